#!/usr/bin/env python3
"""Function tasks (RP's TASK_FUNCTION, without a RAPTOR master to set up): return values,
exceptions, and rp.PythonTask."""

import os
import sys

import pilotfish.rp as rp


def hello(name, greeting="hello"):
    return "%s %s from %s" % (greeting, name, os.getpid())


def broken():
    raise RuntimeError("broken on purpose")


if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 2,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        tds = []
        for i in range(100):
            td = rp.TaskDescription()
            td.mode = rp.TASK_FUNCTION
            td.function = hello
            td.args = ["task %d" % i]
            td.kwargs = {"greeting": "hi"}
            tds.append(td)
        tds.append(rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                       "function": rp.PythonTask(hello, ["you"])}))
        tds.append(rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": broken}))
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for i, t in enumerate(tasks[:100]):
            assert t.state == rp.DONE, (t.state, t.exception_detail)
            assert t.return_value.startswith("hi task %d from " % i), t.return_value
        assert tasks[100].return_value.startswith("hello you from ")
        assert tasks[101].state == rp.FAILED
        assert isinstance(tasks[101].exception, RuntimeError), tasks[101].exception
        assert "broken on purpose" in tasks[101].exception_detail
        try:
            tmgr.submit_tasks(rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                                  "function": "hello"}))
        except rp.DescriptionError as e:
            assert e.field == "function", e
        else:
            raise AssertionError("a function name was accepted")
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
