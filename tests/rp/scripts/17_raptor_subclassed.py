#!/usr/bin/env python3
"""RAPTOR with a master and a worker of one's own, the hooks RP's raptor examples use: the
master's request_cb (which submits extra tasks of its own), result_cb (which sees those too),
worker methods by name, a mode the worker registers."""

import os
import sys
import threading
import time

import pilotfish.rp as rp


class MyWorker(rp.raptor.MPIWorker):

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_mode("foo", self._dispatch_foo)

    def _dispatch_foo(self, task):
        return "foo for %s" % task["uid"], "", 0, "foo retval", None

    def my_hello(self, uid, count=0):
        print("my_hello %s %d" % (uid, count))
        return "my_hello retval %d" % count


class MyMaster(rp.raptor.Master):

    def __init__(self):
        super().__init__()
        self.results = []
        self.requested = []
        self.lock = threading.Lock()

    def request_cb(self, tasks):
        for task in tasks:
            self.requested.append(task["uid"])
            if task["description"]["mode"] == rp.TASK_FUNC:  # one extra task each
                self.submit_tasks(rp.TaskDescription({
                    "uid": "extra." + task["uid"], "mode": rp.TASK_PROC,
                    "executable": "/bin/sh", "arguments": ["-c", "echo extra $RP_TASK_ID"]}))
        return [t for t in tasks if not t["uid"].endswith("drop")]

    def result_cb(self, tasks):
        with self.lock:
            for task in tasks:
                self.results.append((task["uid"], task["state"], task["stdout"],
                                     task["return_value"]))


if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session=session)
        tmgr = rp.TaskManager(session=session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 4,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        raptor = pilot.submit_raptors(rp.TaskDescription(
            {"mode": rp.RAPTOR_MASTER, "raptor_class": "MyMaster"}))[0]
        raptor.submit_workers([rp.TaskDescription({"mode": rp.RAPTOR_WORKER,
                                                    "raptor_class": "MyWorker"})
                               for _ in range(2)])
        master = raptor.master
        assert isinstance(master, MyMaster) and len(master.workers) == 2
        tds = [rp.TaskDescription({"uid": "call.%d" % i, "mode": rp.TASK_FUNC,
                                   "function": "my_hello",
                                   "kwargs": {"uid": "call.%d" % i, "count": i}})
               for i in range(3)]
        tds.append(rp.TaskDescription({"uid": "foo.0", "mode": "foo"}))
        tds.append(rp.TaskDescription({"uid": "call.drop", "mode": rp.TASK_FUNC,
                                       "function": "hello", "args": ["x"]}))
        tasks = raptor.submit_tasks(tds)
        tmgr.wait_tasks([t.uid for t in tasks])
        for i, t in enumerate(tasks[:3]):
            assert t.state == rp.DONE, (t.uid, t.state, t.exception_detail)
            assert t.return_value == "my_hello retval %d" % i
            assert t.stdout == "my_hello call.%d %d\n" % (i, i)
        foo = tasks[3]
        assert foo.state == rp.DONE and foo.return_value == "foo retval", foo.as_dict()
        assert foo.stdout == "foo for foo.0"
        drop = tasks[4]
        assert drop.state == rp.FAILED and "request_cb" in drop.exception_detail
        # every task passed request_cb, the master's own too (as in RP)
        assert set(master.requested) == {"call.0", "call.1", "call.2", "call.drop", "foo.0",
                                         "extra.call.0", "extra.call.1", "extra.call.2",
                                         "extra.call.drop"}, master.requested
        deadline = time.time() + 120  # the master's own tasks end too, then it stops
        while len(master.results) < 9 and time.time() < deadline:
            time.sleep(0.05)
        raptor.rpc("stop")
        tmgr.wait_tasks(raptor.uid)
        got = {uid: (state, out, ret) for uid, state, out, ret in master.results}
        for i in range(3):  # the client's tasks and the master's own extra tasks
            assert got["call.%d" % i][0] == rp.DONE, got
            assert got["extra.call.%d" % i] == (rp.DONE, "extra extra.call.%d\n" % i,
                                                None), got
        assert "extra.call.0" not in tmgr.list_tasks()  # the master's, not the client's
        assert raptor.state == rp.DONE
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
