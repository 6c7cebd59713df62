#!/usr/bin/env python3
"""Input staging in RP's three forms: a plain name, 'src > tgt', and a dict (RP's 05)."""

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
        os.system("hostname > input.dat")
        with open("other.dat", "w") as f:
            f.write("other\n")
        tds = []
        for i in range(6):
            td = rp.TaskDescription()
            td.executable = "/bin/cat"
            td.arguments = ["input.dat", "renamed.dat", "dict.dat"]
            td.input_staging = ["input.dat",
                                "other.dat > renamed.dat",
                                {"source": "client:///other.dat", "target": "task:///dict.dat",
                                 "action": rp.TRANSFER}]
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        host = open("input.dat").read()
        for t in tasks:
            assert t.state == rp.DONE, (t.state, t.exception_detail)
            assert t.stdout == host + "other\nother\n", t.stdout
        # a bad scheme is rejected at submit, naming the field
        try:
            tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true",
                                                  "input_staging": ["srm:///x.dat"]}))
        except rp.DescriptionError as e:
            assert e.field == "input_staging" and "srm" in str(e), e
        else:
            raise AssertionError("srm:// accepted")
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
