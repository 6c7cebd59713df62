#!/usr/bin/env python3
"""Several pilots; round robin (RP's default) and backfilling schedulers (RP's 03/04)."""

import collections
import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resources = sys.argv[1:] or ["local.localhost"] * 3
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        pdescs = [rp.PilotDescription({"resource": r, "runtime": 10, "cores": c})
                  for r, c in zip(resources, (2, 4, 8))]
        pilots = pmgr.submit_pilots(pdescs)
        assert len(pilots) == 3
        pmgr.wait_pilots(state=rp.PMGR_ACTIVE)
        for name in (rp.SCHEDULER_ROUND_ROBIN, rp.SCHEDULER_BACKFILLING):
            tmgr = rp.TaskManager(session, scheduler=name)
            tmgr.add_pilots(pilots)
            tds = [rp.TaskDescription({"executable": "/bin/echo", "arguments": ["$RP_PILOT_ID"]})
                   for _ in range(28)]
            tasks = tmgr.submit_tasks(tds)
            tmgr.wait_tasks()
            per = collections.Counter(t.pilot for t in tasks)
            print(name, dict(per))
            for t in tasks:
                assert t.state == rp.DONE and t.stdout.strip() == t.pilot, (t.stdout, t.pilot)
            if name == rp.SCHEDULER_ROUND_ROBIN:
                assert sorted(per.values()) == [9, 9, 10], per
            else:  # by capacity: 2 : 4 : 8 cores
                assert per[pilots[0].uid] < per[pilots[1].uid] < per[pilots[2].uid], per
        print("OK", os.path.basename(__file__))
    finally:
        session.close(download=True)
