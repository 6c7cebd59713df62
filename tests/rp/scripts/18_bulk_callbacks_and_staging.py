#!/usr/bin/env python3
"""RADICAL_PILOT_BULK_CB=True (callbacks get a list of objects), staging with every action RP
exports (DOWNLOAD from a URL, fetched on the pilot's side), task.output_files, task.as_dict()'s
RP keys, rp.states, and an awk program passed as RP 1.x passes it."""

import functools
import http.server
import os
import sys
import threading

os.environ["RADICAL_PILOT_BULK_CB"] = "True"

import pilotfish.rp as rp

seen = {"pilots": [], "tasks": []}


def pilot_state_cb(pilots):
    assert isinstance(pilots, list), pilots
    seen["pilots"] += [(p.uid, p.state) for p in pilots]


def task_state_cb(tasks, cb_data):
    assert isinstance(tasks, list) and cb_data == "data", (tasks, cb_data)
    seen["tasks"] += [(t.uid, t.state) for t in tasks]


if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    assert rp.states.DONE == rp.DONE and rp.states.FINAL == rp.FINAL
    assert (rp.COPY, rp.LINK, rp.MOVE, rp.DOWNLOAD, rp.TRANSFER, rp.TARBALL) == \
        ("Copy", "Link", "Move", "Download", "Transfer", "Tarball")
    assert (rp.RECURSIVE, rp.CREATE_PARENTS, rp.NON_FATAL, rp.DEFAULT_FLAGS) == (1, 2, 4, 2)

    os.makedirs("web", exist_ok=True)
    with open("web/remote.txt", "w") as f:
        f.write("from the web\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="web")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/remote.txt" % server.server_address[1]
    for name in ("copy.txt", "link.txt", "move.txt", "transfer.txt", "dir/tar.txt"):
        os.makedirs(os.path.dirname(os.path.abspath(name)), exist_ok=True)
        with open(name, "w") as f:
            f.write(name + "\n")

    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session=session)
        pmgr.register_callback(pilot_state_cb)
        tmgr = rp.TaskManager(session=session)
        tmgr.register_callback(task_state_cb, cb_data="data")
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 2,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        here = os.getcwd()
        td = rp.TaskDescription()
        td.executable = "/bin/sh"
        td.arguments = ["-c", "cat in.copy in.link in.move in.transfer dir/tar.txt "
                              "in.download > all.txt; echo made > new.txt"]
        td.input_staging = [
            {"source": "client:///copy.txt", "target": "in.copy", "action": rp.COPY},
            {"source": here + "/link.txt", "target": "in.link", "action": rp.LINK},
            {"source": here + "/move.txt", "target": "in.move", "action": rp.MOVE},
            {"source": "transfer.txt", "target": "in.transfer", "action": rp.TRANSFER,
             "flags": rp.DEFAULT_FLAGS},
            {"source": "dir", "target": "dir", "action": rp.TARBALL},
            {"source": url, "target": "in.download", "action": rp.DOWNLOAD}]
        td.output_staging = [{"source": "all.txt", "target": "client:///all.out",
                              "action": rp.TRANSFER}]
        # an awk program: RP double-quotes arguments ("$1" would expand); RP's export of an
        # environment value keeps its backslash escapes, so \$ there is a literal $
        awk = rp.TaskDescription({"executable": "/usr/bin/awk",
                                  "arguments": ["$PROG", "in.txt"],
                                  "environment": {"PROG": "{print \\$2}"},
                                  "pre_exec": ["printf 'a b\\nc d\\n' > in.txt"]})
        task, awk_task = tmgr.submit_tasks([td, awk])
        tmgr.wait_tasks()
        assert task.state == rp.DONE, task.as_dict()
        with open("all.out") as f:
            assert f.read() == ("copy.txt\nlink.txt\nmove.txt\ntransfer.txt\ndir/tar.txt\n"
                                "from the web\n")
        assert not os.path.exists("move.txt")  # moved, not copied
        assert task.output_files == ["all.txt", "new.txt"], task.output_files
        assert awk_task.state == rp.DONE and awk_task.stdout == "b\nd\n", awk_task.as_dict()

        d = task.as_dict()
        for key in ("type", "tmgr", "uid", "name", "state", "origin", "exit_code", "stdout",
                    "stderr", "return_value", "exception", "exception_detail", "pilot",
                    "endpoint_fs", "resource_sandbox", "session_sandbox", "pilot_sandbox",
                    "task_sandbox", "client_sandbox", "info", "slots", "partition",
                    "description"):
            assert key in d, key
        assert d["task_sandbox"].startswith("file://") and d["task_sandbox"].endswith(
            task.uid + "/"), d["task_sandbox"]
        assert d["state"] == rp.DONE and d["exit_code"] == 0 and d["origin"] == "client"

        assert (task.uid, rp.DONE) in seen["tasks"], seen
        assert (awk_task.uid, rp.DONE) in seen["tasks"]
        assert (pilot.uid, rp.PMGR_ACTIVE) in seen["pilots"], seen
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
        server.shutdown()
