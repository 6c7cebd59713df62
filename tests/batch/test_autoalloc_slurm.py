"""An allocation policy on the project's Slurm (4 hosts), end to end: pilots requested from
what waits, fed, ended once idle; a submission Slurm rejects. The issue's full scenario (600
tasks of 20 s) is bench/bench_autoalloc.py's; this is it scaled down to run in well under a
minute: 40 one-core tasks of 2 s and 2 tasks of 2 nodes, at most 3 pilots, idle timeout 3 s.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_autoalloc_slurm.py
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time

import pytest
from cluster import hosts  # noqa: F401 -- the autouse fixture: skip unless the cluster of hosts

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]

IDLE_S = 3.0


def _events(s, uid=None) -> list:
    s.events.flush()
    evs = read_all_events(os.path.join(s.path, "client.events"))
    return [e for e in evs if uid is None or e[1] == uid]


def _end(p) -> float:
    return next(t for state, t in p.history if state in pf.FINAL)


class InSqueue:
    """The most of a policy's jobs that squeue lists at once, sampled every 0.3 s: what
    Slurm holds, not what the client believes."""

    def __init__(self, pol):
        self.pol, self.most, self.samples, self._stop = pol, 0, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.3):
            out = subprocess.run(
                ["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True, timeout=20
            ).stdout.split()
            mine = {str(p._job.native_id) for p in list(self.pol.pilots) if p._job}
            self.most = max(self.most, len(mine.intersection(out)))
            self.samples += 1

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.most


def test_a_burst_on_slurm_gets_pilots_that_end_once_idle(slurm, tmp_path):
    tmpl = pf.PilotDescription(resource="slurm", nodes=2, cores_per_node=slurm.cpus, runtime="10m")
    small = [pf.TaskDescription(executable="/bin/sleep", arguments=["2"]) for _ in range(40)]
    wide = [
        pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", "sleep 2"], ranks=2, cores_per_rank=slurm.cpus
        )
        for _ in range(2)
    ]
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(
            tmpl, max_pilots=3, idle_timeout=f"{IDLE_S}s", max_nodes=4, tick="0.5s"
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        squeue = InSqueue(pol)
        tasks = tmgr.submit_tasks(small + wide)
        said = str(tasks[-1].explain())
        assert "waiting for an allocation (" in said and "of 3 running)" in said, said
        assert tmgr.wait_tasks(timeout=90) == [pf.DONE] * 42, collections.Counter(
            (t.state, t.reason) for t in tasks
        )
        first = list(pol.pilots)
        for p in first:
            assert p.wait(timeout=30) == pf.DONE, (p.uid, p.state, p.reason)
        # a second burst, once the first pilots are gone: new ones
        more = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(5)])
        assert tmgr.wait_tasks([t.uid for t in more], timeout=60) == [pf.DONE] * 5
        second = [p for p in pol.pilots if p not in first]
        assert second and {t.pilot for t in more} <= {p.uid for p in second}
        for p in second:
            assert p.wait(timeout=30) == pf.DONE, (p.uid, p.state, p.reason)
        evs = _events(s)
        most = squeue.stop()
    assert 1 <= most <= 3 and squeue.samples > 20, (most, squeue.samples)  # Slurm's own count
    # at most 3 jobs at once (each pilot's life, submit to end, is its job's)
    spans = [(p.history[0][1], _end(p)) for p in pol.pilots]
    at_once = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert 1 <= at_once <= 3, spans
    assert sum(p.description.nodes for p in first) <= 4
    by_pilot = collections.defaultdict(list)
    for t in tasks + more:
        by_pilot[t.pilot].append(next(x for state, x in t.history if state in pf.FINAL))
    for p in pol.pilots:  # each ended (idle, drained) within idle timeout + 15 s of its last task
        assert p.reason.startswith(f"{pol.uid}: idle for "), p.reason
        assert _end(p) - max(by_pilot[p.uid]) <= IDLE_S + 15, (p.uid, _end(p), by_pilot[p.uid])
    assert {p.description.nodes for p in first} >= {2}  # the wide tasks got 2-node pilots
    mine = [(t, n, d) for t, u, n, d in evs if u == pol.uid]
    routed = [t for t, _, n, _ in evs if n == E.ROUTED]
    ends = [t for t, n, _ in mine if n == E.ALLOC_END]
    # no allocation ended while tasks of the first burst still waited in the client
    first_routed = max(t for t, u, n, _ in evs if n == E.ROUTED and u in {x.uid for x in tasks})
    assert all(t >= first_routed for t in ends), (ends, first_routed)
    assert len(routed) == 47
    subs = [d for _, n, d in mine if n == E.ALLOC_SUBMIT]
    assert len(subs) == len(pol.pilots) and all("wait that no pilot will take" in d for d in subs)
    for p in pol.pilots:
        print(
            p.uid,
            p.description.nodes,
            [(state, round(t - spans[0][0], 1)) for state, t in p.history],
            p.reason,
        )


def test_a_submission_slurm_rejects_is_quoted_backed_off_and_paused(slurm, tmp_path):
    tmpl = pf.PilotDescription(resource="slurm", nodes=1, runtime="10m", queue="nope")
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(
            tmpl, max_pilots=3, idle_timeout="3s", tick="0.2s", backoff="0.5s", max_failures=3
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(10)])
        deadline = time.monotonic() + 30
        while pol.status["paused"] is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # paused: nothing more is asked of Slurm
        assert pol.status["paused"], pol.status
        assert len(pol.pilots) == 3
        mine = [(t, n, d) for t, u, n, d in _events(s, pol.uid)]
        fails = [(t, d) for t, n, d in mine if n == E.ALLOC_FAIL]
        assert len(fails) == 3
        assert all("invalid partition specified: nope" in d for _, d in fails), fails
        subs = [t for t, n, _ in mine if n == E.ALLOC_SUBMIT]
        assert subs[1] - subs[0] >= 0.5 and subs[2] - subs[1] >= 1.0  # backed off, doubling
        assert [n for _, n, _ in mine].count(E.ALLOC_PAUSE) == 1
        assert all(t.state == pf.SCHEDULING for t in tasks)  # 0 lost: they wait
        said = str(tasks[0].explain())
        assert "the policy is paused: 3 submissions failed in a row" in said, said
        assert "invalid partition specified: nope" in said


def test_a_task_that_would_outlive_its_pilot_gets_the_next_allocation_ahead(slurm, tmp_path):
    """The walltime rule on Slurm: 2-minute pilots (drained 12 s before their end), margin
    10 s. Once the first pilot has run past 10 s, a task declaring a 90 s duration no longer
    fits what it has left: it is not sent there; a second allocation is requested while the
    first still runs, and the task runs on it. A task without a duration still goes to the
    first pilot (walltime does not concern it)."""
    tmpl = pf.PilotDescription(resource="slurm", nodes=1, cores_per_node=slurm.cpus, runtime="2m")
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(
            tmpl, max_pilots=2, idle_timeout=f"{IDLE_S}s", max_nodes=2, tick="0.3s", margin="10s"
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        # a long one-core task keeps the first pilot from ending idle meanwhile
        keep = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["25"]))
        assert keep.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
        (first,) = pol.pilots
        active = next(t for state, t in first.history if state == pf.ACTIVE)
        time.sleep(max(0.0, active + 11.0 - time.time()))  # left: 108 - 11 < 90 + 10
        late = tmgr.submit_tasks(
            pf.TaskDescription(executable="/bin/sleep", arguments=["1"], duration=90)
        )
        free = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["1"]))
        assert late.wait(timeout=90) == pf.DONE, (late.state, late.reason)
        assert free.wait(timeout=30) == pf.DONE, (free.state, free.reason)
        assert free.pilot == first.uid  # no duration: the pilot ending soon takes it
        assert len(pol.pilots) == 2 and late.pilot == pol.pilots[1].uid != first.uid
        second = pol.pilots[1]
        # requested ahead: the first pilot still runs (its 25 s task too)
        assert first.state == pf.ACTIVE and keep.state == pf.EXECUTING, (first.state, keep.state)
        assert second.state == pf.ACTIVE, (second.state, second.reason)
        assert keep.wait(timeout=60) == pf.DONE and keep.pilot == first.uid
        for p in pol.pilots:
            assert p.wait(timeout=40) == pf.DONE, (p.uid, p.state, p.reason)
        mine = [(n, d) for _, u, n, d in _events(s) if u == pol.uid]
    subs = [d for n, d in mine if n == E.ALLOC_SUBMIT]
    assert len(subs) == 2 and "1 would outlive the walltime the running pilots" in subs[1], subs
    print(subs, [(p.uid, p.history) for p in pol.pilots])


def test_a_queued_allocation_no_longer_needed_is_canceled_in_slurm(slurm, tmp_path):
    """Two hosts held by another job: the policy's first pilot runs on the other two, its
    second waits in Slurm's queue (PENDING). Once the first has taken every waiting task,
    nothing needs the second: after the idle timeout it is canceled -- gone from squeue --
    and every task is DONE on the first."""
    blocker = (
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-N",
                "2",
                "-t",
                "5",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 300",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    try:
        deadline = time.monotonic() + 30
        while _squeue_state(blocker) != "RUNNING":
            assert time.monotonic() < deadline, "the blocking job never ran"
            time.sleep(0.3)
        tmpl = pf.PilotDescription(
            resource="slurm", nodes=2, cores_per_node=slurm.cpus, runtime="10m"
        )
        with pf.Session(path=tmp_path / "s") as s:
            pmgr = pf.PilotManager(s)
            pol = pmgr.autoalloc(
                tmpl, max_pilots=2, idle_timeout=f"{IDLE_S}s", max_nodes=4, tick="0.3s"
            )
            tmgr = pf.TaskManager(s)
            tmgr.add_pilots(pol)
            n = 3 * 2 * slurm.cpus  # three times what one pilot holds: a second is asked for
            tasks = tmgr.submit_tasks(
                [pf.TaskDescription(executable="/bin/sleep", arguments=["1"]) for _ in range(n)]
            )
            deadline = time.monotonic() + 60
            while len(pol.pilots) < 2:
                assert time.monotonic() < deadline, pol.status
                time.sleep(0.2)
            second = pol.pilots[1]
            job = str(second._job.native_id)
            assert _squeue_state(job) == "PENDING", _squeue_state(job)
            assert tmgr.wait_tasks(timeout=120) == [pf.DONE] * n
            assert second.wait(timeout=30) == pf.CANCELED, (second.state, second.reason)
            assert "queued, and no waiting task needs it" in second.reason, second.reason
            assert {t.pilot for t in tasks} == {pol.pilots[0].uid}
            deadline = time.monotonic() + 15
            while _squeue_state(job) is not None:  # Slurm let it go
                assert time.monotonic() < deadline, _squeue_state(job)
                time.sleep(0.3)
            assert pol.pilots[0].wait(timeout=30) == pf.DONE
            cancels = [d for _, u, n_, d in _events(s) if u == pol.uid and n_ == E.ALLOC_CANCEL]
            assert len(cancels) == 1 and cancels[0].startswith(second.uid), cancels
    finally:
        subprocess.run(["scancel", blocker], check=False)


def _squeue_state(job: str) -> str | None:
    out = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20
    ).stdout.strip()
    return out or None
