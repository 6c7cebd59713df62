#!/usr/bin/env python3
"""Folders as input: a tree copied (TRANSFER), one packed into a tarball (TARBALL) and one
moved (MOVE); outputs moved into the pilot's space (RP's 11_task_input_folder/_data_tar)."""

import os
import shutil
import sys
import tempfile

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
        scratch = tempfile.mkdtemp()
        for n in range(3):
            os.makedirs("input_dir/sub_%d" % n)
            with open("input_dir/sub_%d/data.txt" % n, "w") as f:
                f.write("%d\n" % n)
        shutil.copytree("input_dir", os.path.join(scratch, "to_move"))
        td = rp.TaskDescription()
        td.executable = "/bin/sh"
        td.arguments = ["-c", "cat copied/sub_*/data.txt packed/sub_*/data.txt "
                              "moved/sub_*/data.txt > all.txt; cat all.txt"]
        td.input_staging = [{"source": "input_dir", "target": "copied", "action": rp.TRANSFER},
                            {"source": "input_dir", "target": "packed", "action": rp.TARBALL},
                            {"source": os.path.join(scratch, "to_move"), "target": "moved",
                             "action": rp.MOVE}]
        td.output_staging = [{"source": "all.txt", "target": "pilot:///all.txt",
                              "action": rp.MOVE}]
        t = tmgr.submit_tasks(td)
        tmgr.wait_tasks()
        assert t.state == rp.DONE, (t.state, t.exception_detail)
        assert t.stdout.split() == ["0", "1", "2"] * 3, t.stdout
        assert not os.path.exists(os.path.join(scratch, "to_move"))  # moved
        assert not os.path.exists(os.path.join(t.sandbox, "all.txt"))
        pilot.stage_out({"source": "pilot:///all.txt", "target": "client:///all.txt"})
        assert open("all.txt").read().split() == ["0", "1", "2"] * 3
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
