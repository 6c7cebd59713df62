"""RAPTOR's plain calls (rp.PythonTask, or a worker method by name) on a real local pilot:
the batch path that makes them pilotfish function tasks at function-task speed keeps RP's
behaviour -- uids as RP numbers client tasks, each call's own RP_TASK_ID, arguments and
results, clear refusals -- and steps aside where it could not (a user's uid of the same
form, arguments it cannot vouch for, a worker class that changed)."""

from __future__ import annotations

import os

import pytest

import pilotfish as pf
import pilotfish.rp as rp
from pilotfish.client.submit import journal_values


@rp.pythontask
def whoami(x, y=0):
    return os.environ["RP_TASK_ID"], x + y


def _call(i):
    return rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": whoami(i, y=10)})


@pytest.fixture
def raptor(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(tmp_path))
    with rp.Session() as s:
        pilot = rp.PilotManager(s).submit_pilots(rp.PilotDescription(
            {"resource": "local.localhost", "cores": 3, "runtime": 10}))
        tmgr = rp.TaskManager(s)
        tmgr.add_pilots(pilot)
        r = pilot.submit_raptors(rp.TaskDescription({"mode": rp.RAPTOR_MASTER}))[0]
        r.submit_workers(rp.TaskDescription({"mode": rp.RAPTOR_WORKER}))
        yield s, tmgr, r
        r.rpc("stop")


def test_plain_calls_are_pilotfish_tasks_with_their_own_uid(raptor):
    s, tmgr, r = raptor
    tasks = r.submit_tasks([_call(i) for i in range(500)])
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
    assert states == [rp.DONE] * 500
    for i, t in enumerate(tasks):
        assert t.uid == t._pf.uid and t.uid.startswith("task.")  # (no second name)
        assert t.return_value == (t.uid, i + 10)  # its own RP_TASK_ID, its own arguments
        assert t.description["uid"] == t.uid and t.description["raptor_id"] == r.uid
        assert type(t._pf.description).__name__ == "CheckedCall"  # the batch path
    assert tmgr.get_tasks(tasks[3].uid) is tasks[3] and tmgr.list_tasks().count(tasks[3].uid) == 1


def test_a_user_uid_of_pilotfish_form_turns_the_batch_path_off(raptor):
    """A uid the user gave that looks like pilotfish's own (task.NNNNNN) could be the uid a
    later call's pilotfish task gets: the calls then take the general path (uids of their
    master's), and no call hides the user's task."""
    s, tmgr, r = raptor
    mine = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true",
                                                 "uid": "task.000040"}))
    tasks = r.submit_tasks([_call(i) for i in range(60)])
    tmgr.wait_tasks([t.uid for t in tasks] + [mine.uid], timeout=120)
    assert mine.state == rp.DONE and tmgr.get_tasks("task.000040") is mine
    assert all(t.uid.startswith(r.uid + ".task.") for t in tasks)
    assert [t.return_value for t in tasks] == [(t.uid, i + 10) for i, t in enumerate(tasks)]
    assert len({t.uid for t in tasks} | {mine.uid}) == 61


def test_a_call_the_batch_path_does_not_take_goes_the_general_way(raptor):
    """One call of a batch that is not plain (an eval, a uid of its own) sends the whole
    batch the general way; each still runs as RP's, with its own RP_TASK_ID."""
    s, tmgr, r = raptor
    ev = rp.TaskDescription({"mode": rp.TASK_EVAL, "code": "os.environ['RP_TASK_ID']"})
    named = rp.TaskDescription({"mode": rp.TASK_FUNCTION, "function": whoami(5),
                                "uid": "mine.1"})
    tasks = r.submit_tasks([_call(0), ev, named])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    assert [t.state for t in tasks] == [rp.DONE] * 3
    assert tasks[0].return_value == (tasks[0].uid, 10) and ev.uid == tasks[1].uid
    assert tasks[1].return_value == tasks[1].uid
    assert tasks[2].uid == "mine.1" and tasks[2].return_value == ("mine.1", 5)
    with pytest.raises(ValueError, match="str keys"):  # (refused when it is made)
        rp.PythonTask(lambda **kw: 1, kwargs={1: "x"})


def test_pf_task_uid_inside_a_function_task(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(tmp_path))
    with pf.Session() as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(cores_per_node=2,
                                                                    runtime="1m"))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        ts = tm.submit_tasks([pf.TaskDescription(function=pf.task_uid) for _ in range(20)])
        tm.wait_tasks([t.uid for t in ts], timeout=60)
        assert [t.result for t in ts] == [t.uid for t in ts]
    assert pf.task_uid() is None  # (not in a worker)


def test_journal_names_a_callable_object_by_its_class_not_its_address():
    class Adder:
        def __call__(self, x):
            return x + 1

    d = pf.TaskDescription(function=Adder(), args=(1,))
    name = journal_values(d)["function"]
    assert name.endswith("Adder") and "0x" not in name, name


def test_a_callback_sees_each_plain_calls_uid_in_its_description(raptor):
    """A callback runs as the calls are submitted (NEW, TMGR_SCHEDULING), before submit
    returns: the description already carries the call's uid, as RP sets it."""
    s, tmgr, r = raptor
    seen = []
    tmgr.register_callback(lambda t, state: seen.append((t.uid, t.description.get("uid"))))
    tasks = r.submit_tasks([_call(i) for i in range(50)])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    mine = [x for x in seen if x[0] in {t.uid for t in tasks}]
    assert len(mine) >= 3 * 50 and all(u == d for u, d in mine), mine[:5]


def test_a_worker_may_not_take_a_tasks_uid(raptor):
    s, tmgr, r = raptor
    e = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true"}))
    with pytest.raises(ValueError, match="already used"):
        r.submit_workers(rp.TaskDescription({"mode": rp.RAPTOR_WORKER, "uid": e.uid}))
    assert tmgr.wait_tasks(e.uid, timeout=60) == rp.DONE and tmgr.get_tasks(e.uid) is e


MASTER = '''
import pilotfish.rp as rp


class Collect(rp.raptor.Master):
    def __init__(self):
        super().__init__()
        self.got = []

    def result_cb(self, tasks):
        self.got.extend(t["uid"] for t in tasks)
'''


def test_result_cb_gets_calls_that_end_before_their_submit_returns(tmp_path, monkeypatch):
    """A master with result_cb hears of every end on pilotfish's IO thread; a call may end
    before the submit that sent it has made its rp Task. It was dropped then."""
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(tmp_path))
    (tmp_path / "collect.py").write_text(MASTER)
    monkeypatch.chdir(tmp_path)
    from pilotfish.rp import _api

    slow = _api.TaskManager._wrap_all

    def late(self, ts):  # the submit is slow to make its rp Tasks: the calls end first
        import time
        time.sleep(2)
        return slow(self, ts)

    monkeypatch.setattr(_api.TaskManager, "_wrap_all", late)
    with rp.Session() as s:
        pilot = rp.PilotManager(s).submit_pilots(rp.PilotDescription(
            {"resource": "local.localhost", "cores": 3, "runtime": 10}))
        tmgr = rp.TaskManager(s)
        tmgr.add_pilots(pilot)
        r = pilot.submit_raptors(rp.TaskDescription({"mode": rp.RAPTOR_MASTER,
                                                     "raptor_file": "collect.py",
                                                     "raptor_class": "Collect"}))[0]
        r.submit_workers(rp.TaskDescription({"mode": rp.RAPTOR_WORKER}))
        r.submit_tasks([_call(0)])  # (workers up: the next calls end within the sleep)
        tasks = r.submit_tasks([_call(i) for i in range(5)])
        tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
        import time
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not {t.uid for t in tasks} <= set(r.master.got):
            time.sleep(0.05)
        assert {t.uid for t in tasks} <= set(r.master.got), (r.master.got, tasks)
        r.rpc("stop")


def test_a_callable_per_call_keeps_the_masters_caches_bounded(raptor):
    """A script that makes a callable per call (a lambda, a closure): the master's caches of
    callables (a PlainRun and a checked template each) stay bounded, and each call still
    runs its own callable."""
    from pilotfish.rp import _masters as _raptor

    s, tmgr, r = raptor

    def one(i):
        return rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                   "function": rp.PythonTask(lambda: i * 2)})

    n = _raptor._CACHE_MAX + 500
    tasks = r.submit_tasks([one(i) for i in range(n)])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=300)
    assert [t.return_value for t in tasks] == [2 * i for i in range(n)]
    assert 0 < len(r._raptor._fast) <= _raptor._CACHE_MAX
