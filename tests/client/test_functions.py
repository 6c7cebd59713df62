"""Function tasks end to end on real local pilots: persistent workers the agent places and
feeds, results through their result logs, failures isolated, pf.Executor's futures."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import threading
import time

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events
from substrate_helpers import start_pilot  # tests/substrates (on the path: conftest)


def square(x):
    return x * x


def chatty(x):
    import sys
    print(f"out {x}")
    print(f"err {x}", file=sys.stderr)
    return x


def pid_of(_):
    return os.getpid()


def fail(x):
    raise ValueError(f"bad input {x}")


def crash(_):
    os.kill(os.getpid(), signal.SIGSEGV)


def nap(s):
    time.sleep(s)
    return s


def unpicklable_result():
    return threading.Lock()


class LocalOnlyError(Exception):  # pickles by reference to this test module: importable
    pass


def raise_local():
    raise LocalOnlyError("mine")


def rendezvous(where, n, interleave=False):
    """Waits (30 s at most) until n calls run at once, each in its own worker; its pid. With
    interleave, the calls then end 0.3 s apart, alternating between the workers' nodes (the
    first of node 0, the first of node 1, the second of node 0, ...): longest idle first,
    the workers go across nodes."""
    node = int(os.environ.get("PILOTFISH_NODE_INDEX", "0"))
    open(os.path.join(where, f"{node}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while len(os.listdir(where)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    if interleave:
        mine = sorted(f for f in os.listdir(where) if f.startswith(f"{node}-"))
        time.sleep(0.3 * (2 * mine.index(f"{node}-{os.getpid()}") + node))
    return os.getpid()


def on_ranks(x, comm):
    return (comm.rank, comm.size, comm.allreduce(x))


@pytest.fixture(scope="module")
def fpilot(tmp_path_factory):
    path = tmp_path_factory.mktemp("functions") / "session"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2,
                                                       runtime="30m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
        yield s, pilot, tmgr


def _worker_starts(pilot) -> int:
    return len({e[1] for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
                if e[1].startswith("worker.") and e[2] == pf.EXECUTING})


def _worker_ends(pilot) -> set:
    """The function workers of the pilot that ended."""
    return {e[1] for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
            if e[1].startswith("worker.") and e[2] in (pf.DONE, pf.FAILED, pf.CANCELED)}


def _eventually(pred, timeout: float = 10.0) -> bool:
    """(the agent writes its events out about once a second)"""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.slow
def test_ten_thousand_function_tasks_all_correct(fpilot):
    s, pilot, tmgr = fpilot
    tasks = tmgr.submit_tasks([pf.TaskDescription(function=square, args=(i,))
                               for i in range(10_000)])
    assert tmgr.wait_tasks([t.uid for t in tasks], timeout=300) == [pf.DONE] * 10_000
    assert [t.result for t in tasks] == [i * i for i in range(10_000)]
    assert all(t.exception is None for t in tasks)
    h = dict(tasks[5].history)
    assert h[pf.NEW] <= h[pf.EXECUTING] <= h[pf.DONE]
    # their runs are in the agent's events like any task's (the report reads these)
    want = {t.uid for t in tasks}
    assert _eventually(lambda: want <= {
        e[1] for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
        if e[2] == pf.EXECUTING})


def test_what_a_call_prints_is_its_own_output(fpilot):
    _, _, tmgr = fpilot
    tasks = tmgr.submit_tasks([pf.TaskDescription(function=chatty, args=(i,))
                               for i in range(20)] + [pf.TaskDescription(function=square,
                                                                         args=(2,))])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    for i, t in enumerate(tasks[:20]):
        assert (t.stdout, t.stderr, t.result) == (f"out {i}\n", f"err {i}\n", i)
    assert tasks[20].stdout is None and tasks[20].stderr is None


def test_bad_input_is_refused_at_submit_naming_the_field(fpilot):
    _, _, tmgr = fpilot
    lock = threading.Lock()
    cases = [
        (dict(function=lambda: lock), "function", "cannot be pickled"),
        (dict(function=square, args=(lock,)), "args", "cannot be pickled"),
        (dict(function=square, kwargs={"x": lock}), "kwargs", "cannot be pickled"),
        (dict(function=square, executable="/bin/true"), "function", "not both"),
        (dict(function=square, arguments=["1"]), "arguments", "args=(...)"),
        (dict(function=square, input_staging=["a"]), "input_staging", "not for function"),
        (dict(executable="/bin/true", args=(1,)), "args", "function tasks"),
        (dict(function="square"), "function", "callable"),
    ]
    before = len(tmgr)
    for kwargs, field, why in cases:
        with pytest.raises(pf.DescriptionError) as e:
            tmgr.submit_tasks([pf.TaskDescription(function=square, args=(1,)),
                               pf.TaskDescription(**kwargs)])
        assert e.value.field == field and why in str(e.value), (kwargs, e.value)
    assert len(tmgr) == before  # all or nothing: not even the good one was sent


def test_failures_are_isolated_with_their_reasons(fpilot):
    """A raising call fails alone with its exception and remote traceback; one that kills
    its worker (SIGSEGV) fails alone with the signal and the worker is replaced; a result
    that cannot be pickled fails its call; every other call of the same batch is DONE."""
    _, pilot, tmgr = fpilot
    starts = _worker_starts(pilot)
    descs = [pf.TaskDescription(function=square, args=(i,)) for i in range(300)]
    descs[10] = pf.TaskDescription(function=fail, args=(10,))
    descs[150] = pf.TaskDescription(function=crash, args=(0,))
    descs[200] = pf.TaskDescription(function=unpicklable_result)
    descs[250] = pf.TaskDescription(function=raise_local)
    tasks = tmgr.submit_tasks(descs)
    tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
    bad = {10, 150, 200, 250}
    for i, t in enumerate(tasks):
        if i not in bad:
            assert t.state == pf.DONE and t.result == i * i, (i, t.state, t.reason)
    e = tasks[10].exception
    assert tasks[10].state == pf.FAILED and isinstance(e, ValueError)
    assert str(e) == "bad input 10" and "in fail" in str(e.__cause__)
    assert tasks[10].reason == "raised ValueError: bad input 10"
    assert tasks[150].state == pf.FAILED and "SIGSEGV" in tasks[150].reason, tasks[150].reason
    assert isinstance(tasks[150].exception, pf.RemoteError)
    assert tasks[200].state == pf.FAILED and "cannot be pickled" in tasks[200].reason
    assert isinstance(tasks[250].exception, LocalOnlyError)
    assert _eventually(lambda: _worker_starts(pilot) > starts)  # the crashed one was replaced
    again = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(7,)))
    assert again.wait(timeout=60) == pf.DONE and again.result == 49


@pytest.mark.slow
def test_timeout_and_cancel(fpilot):
    _, _, tmgr = fpilot
    slow = tmgr.submit_tasks(pf.TaskDescription(function=nap, args=(30,), timeout=0.5))
    assert slow.wait(timeout=30) == pf.FAILED
    assert "timeout" in slow.reason and isinstance(slow.exception, TimeoutError)
    running, queued = tmgr.submit_tasks([pf.TaskDescription(function=nap, args=(30,))
                                         for _ in range(2)] +
                                        [pf.TaskDescription(function=nap, args=(30,))])[1:]
    time.sleep(1.0)
    tmgr.cancel_tasks([running.uid, queued.uid])
    assert tmgr.wait_tasks([running.uid, queued.uid], timeout=30) == [pf.CANCELED] * 2
    after = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(3,)))
    assert after.wait(timeout=60) == pf.DONE and after.result == 9


def test_large_results_travel_by_file(fpilot):
    _, pilot, tmgr = fpilot
    t = tmgr.submit_tasks(pf.TaskDescription(function=bytes, args=(3 << 20,)))
    assert t.wait(timeout=60) == pf.DONE
    assert t._result[:1] == b"F" and len(t._result) < 1000  # a path, not 3 MiB
    assert t.result == bytes(3 << 20)


@contextlib.contextmanager
def _worker_pilot(path, cores: int, **workers):
    """A session with one local pilot of `cores` cores whose function workers take `workers`
    (max_calls, max_mem_mib), and a TaskManager on it."""
    with pf.Session(path=path) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=cores, runtime="10m", workers=workers))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        yield tmgr


@pytest.mark.slow
def test_workers_are_recycled(tmp_path):
    with _worker_pilot(tmp_path / "s", 1, max_calls=10) as tmgr:
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=pid_of, args=(i,))
                                   for i in range(60)])
        assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * 60
        pids = [t.result for t in tasks]
        assert len(set(pids)) >= 6, pids  # at most 10 calls each
        assert max(pids.count(p) for p in set(pids)) <= 10
    with _worker_pilot(tmp_path / "m", 1, max_mem_mib=1) as tmgr:  # (a worker is ~20 MiB)
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=pid_of, args=(i,))
                                   for i in range(5)])
        assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * 5
        assert len({t.result for t in tasks}) >= 2
    with pytest.raises(pf.DescriptionError, match="max_calls"):
        pf.PilotDescription(workers={"max_calls": 0})
    with pytest.raises(pf.DescriptionError, match="unknown key"):
        pf.PilotDescription(workers={"max_call": 3})


def test_workers_on_another_node_send_their_results(tmp_path, monkeypatch):
    """A worker on another node than the agent sends its results with its messages (the
    agent cannot map its log); forced here (PILOTFISH_FN_INLINE): all results right, a crash
    still fails only its call."""
    monkeypatch.setenv("PILOTFISH_FN_INLINE", "1")
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=2, runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        descs = [pf.TaskDescription(function=square, args=(i,)) for i in range(2000)]
        descs[700] = pf.TaskDescription(function=crash, args=(0,))
        tasks = tmgr.submit_tasks(descs)
        tmgr.wait_tasks(timeout=120)
        assert tasks[700].state == pf.FAILED and "SIGSEGV" in tasks[700].reason
        assert all(t.state == pf.DONE and t.result == i * i
                   for i, t in enumerate(tasks) if i != 700)
        assert not [f for f in os.listdir(os.path.join(pilot.sandbox, "functions"))
                    if f.endswith(".log")]  # no logs made


@pytest.mark.mpi
def test_mpi_function_on_two_ranks(tmp_path):
    """ranks=2: the function runs on both ranks of an MPI worker with comm= passed in; the
    result is the ranks' return values, in rank order."""
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=2, runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=on_ranks, args=(i,), ranks=2)
                                   for i in range(1, 4)])
        assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * 3, [t.reason for t in tasks]
        for i, t in enumerate(tasks, 1):
            assert t.result == [(0, 2, 2 * i), (1, 2, 2 * i)]


@pytest.mark.slow
def test_executor_follows_the_futures_api(fpilot):
    _, _, tmgr = fpilot
    ex = pf.Executor(tmgr)
    assert list(ex.map(square, range(50))) == [i * i for i in range(50)]  # in order
    assert list(ex.map(nap, [0.3, 0.0, 0.1])) == [0.3, 0.0, 0.1]
    f = ex.submit(fail, 3)
    assert isinstance(f.exception(timeout=30), ValueError)
    with pytest.raises(ValueError, match="bad input 3"):
        f.result()
    fs = [ex.submit(square, i) for i in range(20)]
    assert sorted(x.result() for x in cf.as_completed(fs, timeout=60)) == \
        sorted(i * i for i in range(20))
    long = ex.submit(nap, 30)
    time.sleep(0.5)
    assert long.cancel() and long.cancelled()
    with pytest.raises(cf.CancelledError):
        long.result()
    with pytest.raises(TimeoutError):
        list(ex.map(nap, [5.0], timeout=0.2))
    pending = [ex.submit(nap, 0.2) for _ in range(4)]
    ex.shutdown(wait=True)
    assert all(p.done() and p.result() == 0.2 for p in pending)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(square, 1)


def test_executor_with_its_own_pilot(tmp_path):
    with pf.Executor(session_path=str(tmp_path / "s")) as ex:
        assert ex.submit(square, 12).result(timeout=60) == 144
        t0 = time.monotonic()
        for _ in range(20):
            ex.submit(square, 2).result(timeout=10)
        assert (time.monotonic() - t0) / 20 < 1.0  # (a bound, not a benchmark)
    assert ex._own is None


def exit_quietly(_):
    os._exit(0)


def test_a_call_that_ends_its_worker_fails_alone_and_one_bad_argument_fails_one_future(fpilot):
    """os._exit(0) in a call is its worker's death (not a recycle: it would be run again and
    again); an argument that cannot be pickled fails its own future, not its batch's."""
    _, _, tmgr = fpilot
    tasks = tmgr.submit_tasks([pf.TaskDescription(function=square, args=(i,)) for i in range(50)]
                              + [pf.TaskDescription(function=exit_quietly, args=(0,))])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    assert all(t.state == pf.DONE for t in tasks[:50])
    assert tasks[50].state == pf.FAILED and "died" in tasks[50].reason
    ex = pf.Executor(tmgr)
    lock = threading.Lock()
    fs = [ex.submit(square, i) for i in range(20)] + [ex.submit(square, lock)] + \
        [ex.submit(square, i) for i in range(20)]
    assert [f.result(timeout=60) for f in fs[:20] + fs[21:]] == [i * i for i in range(20)] * 2
    assert isinstance(fs[20].exception(timeout=60), pf.DescriptionError)
    ex.shutdown()


def stubborn(_):
    while True:  # swallows the TimeoutError raised inside it
        try:
            time.sleep(10)
        except BaseException:  # noqa: BLE001
            pass


@pytest.mark.slow
def test_a_call_that_ignores_its_timeout_is_stopped(fpilot):
    _, _, tmgr = fpilot
    t0 = time.monotonic()
    t, ok = tmgr.submit_tasks([pf.TaskDescription(function=stubborn, args=(0,), timeout=0.5),
                               pf.TaskDescription(function=square, args=(5,))])
    assert t.wait(timeout=30) == pf.FAILED and "timed out after 0.5s" in t.reason, t.reason
    assert time.monotonic() - t0 < 10
    assert ok.wait(timeout=30) == pf.DONE and ok.result == 25
    again = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(6,)))
    assert again.wait(timeout=30) == pf.DONE and again.result == 36


def _closure_over(big):
    def pick(i):
        return int(big[i])
    return pick


def test_a_callable_travels_once_per_pilot(tmp_path, monkeypatch):
    """A callable that closes over a large array goes to the agent once per pilot, with the
    first of its calls; the others (other frames, later submits) name it by digest. (Before,
    every call carried it: 100 calls of an 8 MB closure cost the agent 1.9 GB.)"""
    import numpy as np

    from pilotfish.client import submit as submit_mod

    carried = []
    real = submit_mod.first_carries_function

    def spy(specs, sent):
        real(specs, sent)
        carried.append(sum(s.function is not None for s in specs))

    monkeypatch.setattr(submit_mod, "first_carries_function", spy)
    monkeypatch.setattr(submit_mod, "SUBMIT_BATCH", 50)  # several frames per submit
    pick = _closure_over(np.arange(1_000_000) * 3)  # 8 MB
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=pick, args=(i,))
                                   for i in range(300)])
        assert len(carried) == 6 and sum(carried) == 1, carried
        more = tmgr.submit_tasks([pf.TaskDescription(function=pick, args=(i,))
                                  for i in range(300, 400)])
        assert sum(carried) == 1, carried  # known to the agent already
        assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * 400
        assert [t.result for t in tasks + more] == [3 * i for i in range(400)]


def test_calls_that_overtake_their_callable_wait_for_it(tmp_path, monkeypatch):
    """The agent keeps calls whose callable has not arrived yet until it does (a frame of
    another thread's submit may overtake the one that carries it): here the callable comes
    with the last call of five frames; every call runs, none fails."""
    import pickle

    from pilotfish.client import submit as submit_mod

    def last_carries(specs, sent):
        for k, spec in enumerate(specs):
            if spec.fn_ref is not None and pickle.loads(spec.call)[0] != (249,):
                specs[k] = submit_mod.msgspec.structs.replace(spec, function=None)

    monkeypatch.setattr(submit_mod, "first_carries_function", last_carries)
    monkeypatch.setattr(submit_mod, "SUBMIT_BATCH", 50)
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=square, args=(i,))
                                   for i in range(250)])
        assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * 250, \
            {t.reason for t in tasks if t.state != pf.DONE}
        assert [t.result for t in tasks] == [i * i for i in range(250)]


def test_a_submit_that_fails_after_encoding_sends_the_callable_again(tmp_path, monkeypatch):
    """A callable counts as sent only once its frame is queued: a submit that fails on the way
    (here its journal write) leaves the next submit of the same callable carrying it."""
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        real = s.journal.write_encoded
        calls = []

        def fail_once(records):
            calls.append(1)
            if len(calls) == 1:
                raise OSError("disk full")
            real(records)

        monkeypatch.setattr(s.journal, "write_encoded", fail_once)
        with pytest.raises(OSError, match="disk full"):
            tmgr.submit_tasks(pf.TaskDescription(function=square, args=(2,)))
        t = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(3,)))
        assert t.wait(timeout=60) == pf.DONE and t.result == 9, (t.state, t.reason)


def test_a_refused_call_still_delivers_its_callable(tmp_path, monkeypatch):
    """The agent learns a callable from the call that carries it even when it refuses that
    call (a shape its nodes cannot hold): the call's siblings, which only name it, run."""
    from pilotfish.client.pilot import Pilot

    monkeypatch.setattr(Pilot, "misfit", lambda self, *a, **k: None)  # the agent judges
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        big, ok = tmgr.submit_tasks([
            pf.TaskDescription(function=square, args=(5,), cores_per_rank=64),
            pf.TaskDescription(function=square, args=(6,))])
        assert ok.wait(timeout=60) == pf.DONE and ok.result == 36, (ok.state, ok.reason)
        assert big.wait(timeout=60) == pf.FAILED and "64" in big.reason, big.reason


@pytest.mark.slow
def test_calls_whose_callable_never_comes_fail_with_why(tmp_path, monkeypatch):
    """Never a wait without end: calls that name a callable the agent never got (a client
    that lost the frame carrying it; forced here) fail after PILOTFISH_FN_PARK_S, saying so."""
    from pilotfish.client import submit as submit_mod

    def none_carries(specs, sent):
        for spec in specs:
            spec.function = None

    monkeypatch.setattr(submit_mod, "first_carries_function", none_carries)
    monkeypatch.setenv("PILOTFISH_FN_PARK_S", "1")
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=square, args=(i,))
                                   for i in range(3)])
        assert tmgr.wait_tasks(timeout=60) == [pf.FAILED] * 3
        assert all("did not reach the agent within 1s" in t.reason for t in tasks), \
            [t.reason for t in tasks]


def _same(i):
    return i


@pytest.mark.slow
def test_a_recycled_worker_fails_no_call(tmp_path):
    """A worker recycled after max_calls says bye, then exits: its exit may be reaped before
    its bye is read. None of the calls it handed back unrun may fail as if it had died (it
    did: ~1 recycle in 130 here, 'its worker ... died: exit code 0')."""
    with _worker_pilot(tmp_path / "s", 2, max_calls=20) as tmgr:
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=_same, args=(i,))
                                   for i in range(8000)])  # ~400 recycles
        tmgr.wait_tasks(timeout=280)
        failed = [(t.uid, t.reason) for t in tasks if t.state != pf.DONE]
        assert not failed, failed[:5]
        assert [t.result for t in tasks[::1000]] == list(range(0, 8000, 1000))


def test_idle_workers_give_their_cores_to_work_that_waits(tmp_path):
    """Idle function workers keep their cores while nothing else waits (the next calls reuse
    them), and give them back at once when other work waits for cores: an executable task, or
    a function of another shape (issue 41, papercut 9). The workers' idle_s is an hour here, so
    before the fix the task behind them could only start an hour later (the wait times out)."""
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=2, runtime="10m", workers={"idle_s": 3600}))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        for _ in range(2):
            calls = tmgr.submit_tasks([pf.TaskDescription(function=pid_of, args=(i,))
                                       for i in range(40)])
            assert tmgr.wait_tasks([t.uid for t in calls], timeout=60) == [pf.DONE] * 40
        time.sleep(1.5)  # (the agent writes its events out about once a second)
        assert not _worker_ends(pilot)  # nothing else waited: the idle workers stayed
        exe = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh",
                                                   arguments=["-c", "exit 3"]))
        assert exe.wait(timeout=60) == pf.FAILED and exe.exit_code == 3
        assert _eventually(lambda: _worker_ends(pilot))  # (one made way for it)
        wide = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(7,),
                                                    cores_per_rank=2))
        assert wide.wait(timeout=60) == pf.DONE and wide.result == 49
        last = tmgr.submit_tasks(pf.TaskDescription(function=square, args=(3,)))
        assert last.wait(timeout=60) == pf.DONE and last.result == 9


def test_a_multi_core_task_gets_its_cores_from_idle_workers_at_once(tmp_path):
    """Four idle 1-core workers fill a 4-core pilot; an executable asks for 3 cores on one
    rank. Exactly three workers give way, at once (the queue's count of the cores that wait,
    ports.Host.waiting_for), and the fourth stays warm for the next call. Before, the pool
    counted a waiting task as one core: one worker stopped, the task still did not fit, and
    STALL_S (0.5 s) later every idle worker stopped -- four ended, the fourth too."""
    meet = tmp_path / "meet"
    meet.mkdir()
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=4, runtime="10m", workers={"idle_s": 3600}))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        calls = tmgr.submit_tasks([pf.TaskDescription(function=rendezvous, args=(str(meet), 4))
                                   for _ in range(4)])
        assert tmgr.wait_tasks([t.uid for t in calls], timeout=60) == [pf.DONE] * 4
        pids = {t.result for t in calls}
        assert len(pids) == 4  # four workers, each idle now
        wide = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh",
                                                    arguments=["-c", "exit 0"],
                                                    cores_per_rank=3))
        assert wide.wait(timeout=60) == pf.DONE, wide.reason
        assert _eventually(lambda: len(_worker_ends(pilot)) >= 3)
        time.sleep(1.5)  # (the agent writes its events out about once a second)
        assert len(_worker_ends(pilot)) == 3, _worker_ends(pilot)  # not the fourth
        last = tmgr.submit_tasks(pf.TaskDescription(function=pid_of, args=(0,)))
        assert last.wait(timeout=60) == pf.DONE and last.result in pids  # (warm)
        assert _worker_starts(pilot) == 4


def test_a_task_a_node_wide_gets_a_nodes_worth_from_idle_workers(tmp_path):
    """Two emulated 2-core nodes, four idle 1-core workers, the two longest idle on different
    nodes; an executable asks for 2 cores on one rank. The counts (2 cores wait, none free)
    stop those two: the task still does not fit (a core free on each node), and once its
    round is over (the queue settled) the idle worker of one node stops too. The fourth stays
    warm -- before, STALL_S after the first, every idle worker stopped (four ended)."""
    meet = tmp_path / "meet"
    meet.mkdir()
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=2, cores_per_node=2, runtime="10m", workers={"idle_s": 3600}))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        calls = tmgr.submit_tasks([pf.TaskDescription(function=rendezvous,
                                                      args=(str(meet), 4, True))
                                   for _ in range(4)])
        assert tmgr.wait_tasks([t.uid for t in calls], timeout=60) == [pf.DONE] * 4
        pids = {t.result for t in calls}
        assert len(pids) == 4  # four workers, each idle now
        assert sorted(f.split("-")[0] for f in os.listdir(meet)) == ["0", "0", "1", "1"]
        wide = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh",
                                                    arguments=["-c", "exit 0"],
                                                    cores_per_rank=2))
        assert wide.wait(timeout=60) == pf.DONE, wide.reason
        assert _eventually(lambda: len(_worker_ends(pilot)) >= 3)
        time.sleep(1.5)  # (the agent writes its events out about once a second)
        assert len(_worker_ends(pilot)) == 3, _worker_ends(pilot)  # not the fourth
        last = tmgr.submit_tasks(pf.TaskDescription(function=pid_of, args=(0,)))
        assert last.wait(timeout=60) == pf.DONE and last.result in pids  # (warm)
