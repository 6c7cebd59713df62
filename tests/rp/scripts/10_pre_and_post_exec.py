#!/usr/bin/env python3
"""pre_exec, post_exec (also per rank) and pre_launch (RP's 10)."""

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
        td = rp.TaskDescription()
        td.pre_launch = ["echo launching > launch.log"]
        td.pre_exec = ["export TEST=jabberwocky", "echo pre"]
        td.executable = "/bin/echo"
        td.arguments = ["$RP_TASK_ID", "$TEST"]
        td.post_exec = ["echo post"]
        ranks = rp.TaskDescription({"executable": "/bin/true", "ranks": 2,
                                    "cpu_process_type": rp.POSIX,
                                    "pre_exec": [{0: "echo first", 1: ["echo second"]}]})
        t, r = tmgr.submit_tasks([td, ranks])
        tmgr.wait_tasks()
        assert t.state == rp.DONE, (t.state, t.exception_detail)
        assert t.stdout.split("\n")[:3] == ["pre", "%s jabberwocky" % t.uid, "post"], t.stdout
        assert open(os.path.join(t.sandbox, "launch.log")).read() == "launching\n"
        assert r.state == rp.DONE and r.stdout.split() == ["first", "second"], r.stdout
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
