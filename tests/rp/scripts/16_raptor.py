#!/usr/bin/env python3
"""RAPTOR with RP's default master and worker (as RP's raptor_simple example and RP's raptor
docs use it): @rp.pythontask calls, worker methods by name, every call mode, results as RP
fills them, rpc('stop')."""

import os
import sys

import pilotfish.rp as rp


@rp.pythontask
def hello_world(msg, sleep):
    import time
    print("hello %s: %.3f" % (msg, time.time()))
    time.sleep(sleep)
    return "hello %s" % msg


@rp.pythontask
def whoami(x, y=0):
    import os
    return os.environ["RP_TASK_ID"], x + y


@rp.pythontask
def broken(x):
    raise ValueError("bad value %s" % x)


states = []


def task_state_cb(task, state):
    states.append((task.uid, state))


if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pd = rp.PilotDescription()
        pd.resource = resource
        pd.runtime = 10
        pd.cores = 8
        pmgr = rp.PilotManager(session=session)
        tmgr = rp.TaskManager(session=session)
        tmgr.register_callback(task_state_cb)
        pilot = pmgr.submit_pilots([pd])[0]
        tmgr.add_pilots(pilot)

        raptor = pilot.submit_raptors(rp.TaskDescription({"mode": rp.RAPTOR_MASTER}))[0]
        worker = raptor.submit_workers(rp.TaskDescription({"mode": rp.RAPTOR_WORKER,
                                                           "cores_per_rank": 2}))[0]
        assert raptor.uid.startswith("raptor."), raptor.uid
        assert worker.uid.startswith(raptor.uid + "."), worker.uid

        tds = [rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                   "function": hello_world("client", 0.1)}),
               rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": "hello",
                                   "args": ["raptor", 0.1]}),
               rp.TaskDescription({"mode": rp.TASK_EVAL,
                                   "code": "os.environ['RP_TASK_ID'] + '/' + "
                                           "os.environ['RP_RANKS']"}),
               rp.TaskDescription({"mode": rp.TASK_EXEC,
                                   "code": "import os\nprint('exec', os.environ['MY_VAR'])\n"
                                           "return 6 * 7",
                                   "environment": {"MY_VAR": "mine"}}),
               rp.TaskDescription({"mode": rp.TASK_PROC, "executable": "/bin/sh",
                                   "arguments": ["-c", "echo proc $0 '{print $1}'"]}),
               rp.TaskDescription({"mode": rp.TASK_SHELL,
                                   "command": "echo shell $RP_TASK_ID; exit 3"}),
               rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": broken(7)}),
               rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": "no_such_method"})]
        tasks = raptor.submit_tasks(tds)
        tmgr.wait_tasks([t.uid for t in tasks])
        for t in tasks:
            print("%s [%s] exit=%s ret=%r out=%r exc=%r" % (t.uid, t.state, t.exit_code,
                                                          t.return_value, t.stdout,
                                                          t.exception))
        f1, f2, ev, ex, proc, shell, bad, nomethod = tasks
        assert f1.state == rp.DONE and f1.return_value == "hello client", f1.as_dict()
        assert "hello client:" in f1.stdout and f1.exit_code == 0
        assert f2.state == rp.DONE and f2.return_value == "hello raptor"
        assert f2.stdout.count("hello raptor:") == 2  # RP's default worker's hello
        assert ev.state == rp.DONE and ev.return_value == ev.uid + "/1", ev.return_value
        assert ex.state == rp.DONE and ex.return_value == 42 and ex.stdout == "exec mine\n"
        assert proc.state == rp.DONE and proc.stdout == "proc /bin/sh {print $1}\n", proc.stdout
        assert shell.state == rp.FAILED and shell.exit_code == 3
        assert shell.stdout == "shell %s\n" % shell.uid, shell.stdout
        assert bad.state == rp.FAILED and bad.exit_code == 1 and bad.return_value is None
        assert bad.exception.startswith("ValueError(") and "bad value 7" in bad.exception
        assert "bad value 7" in bad.exception_detail
        assert nomethod.state == rp.FAILED and "no_such_method" in nomethod.exception

        # a bulk of plain calls, each with its own arguments: each sees its own uid (RP
        # numbers client tasks task.NNNNNN and sets the description's uid and raptor_id)
        many = raptor.submit_tasks([rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                                        "function": whoami(i, y=1)})
                                    for i in range(300)])
        tmgr.wait_tasks([t.uid for t in many])
        for i, t in enumerate(many):
            assert t.state == rp.DONE and t.return_value == (t.uid, i + 1), t.as_dict()
            assert t.uid.startswith("task.") and t.description["uid"] == t.uid, t.uid
            assert t.description["raptor_id"] == raptor.uid
        assert len({t.uid for t in many}) == 300 and tmgr.get_tasks(many[7].uid) is many[7]

        # tasks given raptor_id through the TaskManager go to the master too
        t = tmgr.submit_tasks(rp.TaskDescription({"mode": rp.TASK_FUNC, "function": "hello",
                                                  "kwargs": {"msg": "tmgr"},
                                                  "raptor_id": raptor.uid}))
        t.wait()
        assert t.return_value == "hello tmgr", t.as_dict()

        # refused at submit, naming the field: a call no worker fits, a field a call lacks
        for bad_td, field in (({"function": "hello", "cores_per_rank": 4}, "cores_per_rank"),
                              ({"function": "hello", "input_staging": ["x"]},
                               "input_staging")):
            try:
                raptor.submit_tasks(rp.TaskDescription(dict(bad_td, mode=rp.TASK_FUNCTION)))
            except rp.DescriptionError as e:
                assert e.field == field, e
            else:
                raise AssertionError("accepted: %s" % bad_td)

        assert raptor.state == rp.AGENT_EXECUTING and worker.state == rp.AGENT_EXECUTING
        assert raptor.rpc("no_such_command") is None  # RP's default master ignores it
        raptor.rpc("stop")
        tmgr.wait_tasks(raptor.uid)
        print("%s [%s]: %s" % (raptor.uid, raptor.state, raptor.stdout))
        assert raptor.state == rp.DONE and worker.state == rp.DONE
        assert "stopped" in raptor.stdout
        assert (worker.uid, rp.DONE) in states and (f1.uid, rp.DONE) in states
        print("OK", os.path.basename(__file__))
    finally:
        session.close(download=False)
