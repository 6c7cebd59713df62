#!/usr/bin/env python3
"""Task environments: variables (expanded, as RP exports them), RP's own variables, and a
named environment prepared on the pilot (RP's 08 and 12_task_env)."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 2,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        pilot.prepare_env(env_name="myenv", env_spec={"type": "virtualenv", "setup": [],
                                                      "pre_exec": ["export FROM_ENV=yes"]})
        td = rp.TaskDescription()
        td.executable = "/bin/sh"
        td.arguments = ["-c", 'echo "$TEST $WHO $RP_TASK_ID $RP_PILOT_ID $RP_SESSION_ID '
                              '$RP_RANK $RP_RANKS $FROM_ENV"; echo "$VIRTUAL_ENV"; '
                              'test "$PWD" = "$RP_TASK_SANDBOX"']
        td.environment = {"TEST": "jabberwocky", "WHO": "$RP_TASK_ID"}
        td.named_env = "myenv"
        t = tmgr.submit_tasks(td)
        tmgr.wait_tasks()
        assert t.state == rp.DONE, (t.state, t.exception_detail, t.stderr)
        line, venv = t.stdout.splitlines()
        assert line.split() == ["jabberwocky", t.uid, t.uid, pilot.uid, session.uid, "0", "1",
                                "yes"], line
        assert venv.endswith("/env/myenv"), venv
        try:
            tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true",
                                                  "named_env": "unknown"}))
        except rp.DescriptionError as e:
            assert e.field == "named_env", e
        else:
            raise AssertionError("an unknown named_env was accepted")
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
