#!/usr/bin/env python3
"""Getting started: one pilot, a few tasks, their states (RP's examples/00)."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session=session)
        pd_init = {"resource": resource, "runtime": 15, "exit_on_error": True,
                   "project": None, "queue": None, "access_schema": None, "cores": 8}
        pdesc = rp.PilotDescription(pd_init)
        pilot = pmgr.submit_pilots(pdesc)
        tmgr = rp.TaskManager(session=session)
        tmgr.add_pilots(pilot)

        tds = []
        for i in range(16):
            td = rp.TaskDescription()
            td.executable = "/bin/date"
            td.ranks = 1
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for task in tasks:
            print("  * %s: %s, exit: %3s, out: %s" % (task.uid, task.state[:4], task.exit_code,
                                                     task.stdout.strip()[:35]))
        assert [t.state for t in tasks] == [rp.DONE] * 16
        assert pilot.state == rp.PMGR_ACTIVE
        print("OK", os.path.basename(__file__))
    except Exception:
        raise
    except (KeyboardInterrupt, SystemExit):
        print("need to exit now")
        raise
    finally:
        session.close(download=True)
