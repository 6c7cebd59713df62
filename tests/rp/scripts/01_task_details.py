#!/usr/bin/env python3
"""Task details: uids, names, sandboxes, expanded arguments, as_dict (RP's examples/01)."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    with rp.Session() as session:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription(
            {"resource": resource, "runtime": 10, "cores": 1024 * 16}))  # fake resources
        tmgr.add_pilots(pilot)
        tds = []
        for i in range(8):
            td = rp.TaskDescription()
            td.executable = "/bin/echo"
            td.arguments = ["$RP_TASK_ID greets $TEST", i]  # expanded, as RP does
            td.environment = {"TEST": "jabberwocky"}
            td.name = "greeter.%d" % i
            if i == 0:
                td.uid = "my.first.task"
            if i >= 6:
                td.sandbox = "task_sandbox"  # shared by these two
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        assert tasks[0].uid == "my.first.task", tasks[0].uid
        states = tmgr.wait_tasks([t.uid for t in tasks])
        assert states == [rp.DONE] * 8, states
        for i, t in enumerate(tasks):
            d = t.as_dict()
            for key in ("uid", "name", "state", "exit_code", "stdout", "pilot", "sandbox"):
                assert key in d, key
            assert t.stdout.strip() == "%s greets jabberwocky %d" % (t.uid, i), t.stdout
            assert t.name == "greeter.%d" % i and t.pilot == pilot.uid and t.exit_code == 0
            assert os.path.isdir(t.sandbox), t.sandbox
            print(t.uid, t.name, t.state, t.sandbox)
        assert tasks[6].sandbox == tasks[7].sandbox != tasks[5].sandbox
        assert tmgr.get_tasks("my.first.task") is tasks[0]
        assert tasks[0].wait() == rp.DONE
        assert len(tmgr.list_tasks()) == 8
    print("OK", os.path.basename(__file__))
