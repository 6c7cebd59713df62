#!/usr/bin/env python3
"""Output staging back to the client, and stage_on_error for failed tasks (RP's 06)."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 4,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        tds = []
        for i in range(6):
            td = rp.TaskDescription()
            td.executable = "/bin/sh"
            td.arguments = ["-c", "echo result $RP_TASK_ID > output.dat; exit %d" % (i % 2)]
            td.output_staging = {"source": "task:///output.dat",
                                 "target": "client:///output_%d.dat" % i,
                                 "action": rp.TRANSFER}
            td.stage_on_error = i == 5
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for i, t in enumerate(tasks):
            staged = os.path.exists("output_%d.dat" % i)
            print(t.uid, t.state, staged)
            assert t.state == (rp.DONE if i % 2 == 0 else rp.FAILED)
            assert staged == (i % 2 == 0 or i == 5), i
            if staged:
                assert open("output_%d.dat" % i).read() == "result %s\n" % t.uid
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
