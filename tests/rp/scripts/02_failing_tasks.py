#!/usr/bin/env python3
"""Failing tasks fail alone, with their exit code and reason (RP's examples/02)."""

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
        for i in range(12):
            td = rp.TaskDescription()
            if i % 3 == 0:
                td.executable = "/bin/true"
            elif i % 3 == 1:
                td.executable = "/bin/sh"
                td.arguments = ["-c", "echo failing >&2; exit 3"]
            else:
                td.executable = "/no/such/executable"
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for i, t in enumerate(tasks):
            print(t.uid, t.state, t.exit_code, t.exception_detail)
            if i % 3 == 0:
                assert t.state == rp.DONE and t.exit_code == 0 and t.exception is None
            else:
                assert t.state == rp.FAILED, t.state
                assert t.exception and t.exception_detail
            if i % 3 == 1:
                assert t.exit_code == 3 and "failing" in t.stderr
                assert "exit code 3" in t.exception_detail
        assert pilot.state == rp.PMGR_ACTIVE  # the pilot does not care
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
