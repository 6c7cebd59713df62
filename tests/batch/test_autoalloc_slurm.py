"""An allocation policy on the project's Slurm (4 hosts), end to end: pilots requested from
what waits, fed, ended once idle; a submission Slurm rejects. The issue's full scenario (600
tasks of 20 s) is bench/bench_autoalloc.py's; this is it scaled down to run in well under a
minute: 40 one-core tasks of 2 s and 2 tasks of 2 nodes, at most 3 pilots, idle timeout 3 s.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_autoalloc_slurm.py
"""

from __future__ import annotations

import collections
import os
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
