#!/usr/bin/env python3
"""Data shared by tasks through the pilot: stage_in once, link it into every task, collect
their outputs in the pilot's space and stage them out (RP's 07)."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 4,
                                                        "runtime": 10}))
        with open("shared_input_file.txt", "w") as f:
            f.write("Hello, world!\nHow are you?\nGoodbye.\n")
        pilot.wait(state=rp.PMGR_ACTIVE)
        pilot.stage_in({"source": "client:///shared_input_file.txt",
                        "target": "pilot:///shared_input_file.txt",
                        "action": rp.TRANSFER})
        tmgr = rp.TaskManager(session)
        tmgr.add_pilots(pilot)
        tds = []
        for i in range(4):
            td = rp.TaskDescription()
            td.executable = "/usr/bin/wc"
            td.arguments = ["-c", "shared_input_file.txt"]
            td.stdout = "STDOUT"
            td.input_staging = {"source": "pilot:///shared_input_file.txt",
                                "target": "shared_input_file.txt", "action": rp.LINK}
            td.output_staging = {"source": "STDOUT", "target": "pilot:///STDOUT.%06d" % i,
                                 "action": rp.COPY}
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for t in tasks:
            assert t.state == rp.DONE, (t.state, t.exception_detail)
            assert t.stdout.split() == ["36", "shared_input_file.txt"], t.stdout
        pilot.stage_out([{"source": "pilot:///STDOUT.%06d" % i,
                          "target": "client:///result.%06d" % i,
                          "action": rp.TRANSFER} for i in range(4)])
        for i in range(4):
            assert open("result.%06d" % i).read().split()[0] == "36"
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
