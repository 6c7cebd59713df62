"""Why is it pending? task.explain() and `pilotfish explain` on real local pilots: the agent's
own answer (queue position, room now, reservations, colocation, learned and given
durations, function calls), the answer after the end, and the request files' defences."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import pilotfish as pf
from pilotfish import _explain as X
from pilotfish.agent.explain import requests


def _sleep(sec, **kw):
    return pf.TaskDescription(executable="/bin/sleep", arguments=[str(sec)], **kw)


def _wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.mark.slow
def test_explain_queued_reserved_colocated_and_ended(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=4, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    # both nodes full for a while (one core of the second frees at 2.5 s); a 2 x 2-core
    # task, a whole-node task and small ones wait behind them
    full = tmgr.submit_tasks(
        [_sleep(8, cores_per_rank=4), _sleep(8, cores_per_rank=3), _sleep(2.5)]
    )
    _wait_for(lambda: all(t.state == pf.EXECUTING for t in full))
    wide = tmgr.submit_tasks(_sleep(0.1, ranks=2, cores_per_rank=2, name="wide"))
    whole = tmgr.submit_tasks(_sleep(0.1, cores_per_rank=4, name="whole"))
    small = tmgr.submit_tasks([_sleep(0.1, name="small") for _ in range(3)])

    e = full[0].explain()
    assert e[X.WHERE] == X.RUNNING and e[X.NODES] and e[X.PILOT] == pilot.uid
    e = wide.explain()
    assert e[X.WHERE] == X.QUEUED, e
    assert e[X.REQUEST] == [2, 2, 0, 0]
    assert any("no node has 2 free cores now" in w for w in e[X.WAITS_FOR]), e
    assert e[X.FREE_NOW]["count"] == 0
    assert e[X.FITS_EVER] == {"count": 2, "names": [n.name for n in pilot.nodes]}
    assert e[X.RANKS_EVER] == 4 and X.NEVER not in e
    # the third small one has two of its shape ahead of it, and harder shapes before it
    e = small[2].explain()
    assert any("2 earlier tasks of the same shape" in w for w in e[X.WAITS_FOR]), e
    assert any("policy starts 2 other shapes" in w for w in e[X.WAITS_FOR]), e

    # once a core is released past starvation_s (2 s), the hardest blocked head gets a
    # reservation: it says so, and the small ones say whose it is
    def reserved():
        e = small[0].explain()
        return e if any("holds a reservation" in w for w in e[X.WAITS_FOR]) else None

    e = _wait_for(reserved, timeout=15)
    holder = next(w for w in e[X.WAITS_FOR] if "holds a reservation" in w).split()[1]
    assert holder in (wide.uid, whole.uid)
    mine = tmgr.get_tasks(holder)[0].explain()
    assert any(w.startswith("holds a reservation on") for w in mine[X.WAITS_FOR]), mine
    text = str(e)
    assert text.startswith(f"{small[0].uid}: queued") and "nodes that could ever hold" in text
    tmgr.wait_tasks(timeout=60)
    e = wide.explain()
    assert e[X.WHERE] == X.FINAL and "ended DONE" in e[X.WAITS_FOR][0], e


@pytest.mark.slow
def test_explain_colocation_group_and_never(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=4, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    first = tmgr.submit_tasks(_sleep(5, cores_per_rank=3, tags={"colocate": "g"}))
    _wait_for(lambda: first.state == pf.EXECUTING)
    second = tmgr.submit_tasks(_sleep(0.1, cores_per_rank=2, tags={"colocate": "g"}))
    node = first.slots[0].node
    e = _wait_for(lambda: (x := second.explain()).get(X.WHERE) == X.QUEUED and x)
    assert any(f"colocation group 'g' is on {node}" in w for w in e[X.WAITS_FOR]), e
    # the other node has room now, but the group holds it to its node
    assert e[X.FREE_NOW]["count"] == 1
    tmgr.wait_tasks(timeout=60)
    assert second.state == pf.DONE and second.slots[0].node == node


@pytest.mark.slow
def test_explain_learned_and_given_duration(session, monkeypatch):
    monkeypatch.setenv("PILOTFISH_SCHEDULER", "plan")  # the policy that learns (agent env)
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    done = tmgr.submit_tasks([_sleep(0.3) for _ in range(4)])
    tmgr.wait_tasks(timeout=60)
    assert all(t.state == pf.DONE for t in done)
    hold = tmgr.submit_tasks(_sleep(3, cores_per_rank=2))
    _wait_for(lambda: hold.state == pf.EXECUTING)
    kind, given = tmgr.submit_tasks([_sleep(0.3), _sleep(0.3, duration=7)])
    e = _wait_for(lambda: (x := kind.explain()).get(X.WHERE) == X.QUEUED and x)
    est = e[X.ESTIMATE]
    assert est["source"] == "learned" and est["n"] >= 3 and 0.2 < est["seconds"] < 2.0, est
    assert "learned from" in str(e)
    e = given.explain()
    assert e[X.ESTIMATE] == {"seconds": 7.0, "source": "given"}
    assert "(its duration)" in str(e)
    tmgr.wait_tasks(timeout=60)


@pytest.mark.slow
def test_explain_function_call_in_its_queue(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=1, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    calls = tmgr.submit_tasks(
        [pf.TaskDescription(function=time.sleep, args=(1.5,)) for _ in range(3)]
    )
    e = _wait_for(
        lambda: (
            (x := calls[2].explain()).get(X.WHERE) == X.QUEUED
            and "function call queued" in str(x)
            and x
        )
    )
    assert any("calls ahead" in w or "call ahead" in w for w in e[X.WAITS_FOR]), e
    _wait_for(lambda: (x := calls[0].explain()).get(X.WHERE) == X.RUNNING and "worker" in str(x))
    tmgr.wait_tasks(timeout=60)


def _cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", "explain", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_cli_explain_live_then_from_events(tmp_path):
    """`pilotfish explain` from another process: a live pilot answers through its request
    file; after the run the session's events answer; a wrong uid is an error naming the
    session's tasks."""
    with pf.Session(path=tmp_path / "s") as session:
        pmgr = pf.PilotManager(session)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
        tmgr = pf.TaskManager(session)
        tmgr.add_pilots(pilot)
        big = tmgr.submit_tasks(_sleep(8, cores_per_rank=2))
        waiting = tmgr.submit_tasks(_sleep(0.1, ranks=1, cores_per_rank=2))
        _wait_for(lambda: big.state == pf.EXECUTING)
        r = _cli(str(session.path), waiting.uid, big.uid, "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got[0][X.WHERE] == X.QUEUED and got[0][X.STATE] == pf.AGENT_SCHEDULING
        assert any("no node has 2 free cores now" in w for w in got[0][X.WAITS_FOR])
        assert got[1][X.WHERE] == X.RUNNING
        req_dir = os.path.join(pilot.sandbox, "explain")
        assert oct(os.stat(req_dir).st_mode & 0o777) == "0o700"
        assert not os.listdir(req_dir)  # request and answer taken away
        tmgr.wait_tasks(timeout=60)
    r = _cli(str(tmp_path / "s"), waiting.uid)
    assert r.returncode == 0, r.stderr
    assert f"{waiting.uid}: final (DONE)" in r.stdout and "ended DONE" in r.stdout
    r = _cli(str(tmp_path / "s"), "task.999999")
    assert r.returncode != 0
    assert "task.999999: no such task" in r.stderr and "task.000000..task.000001" in r.stderr


def test_request_files_refuse_links_and_garbage(tmp_path):
    """The agent reads request files without following links and answers bad ones with why
    (attack first: a planted link to a file the agent could read)."""
    d = tmp_path / "explain"
    d.mkdir(mode=0o700)
    secret = tmp_path / "secret"
    secret.write_text('["task.000000"]')
    os.symlink(secret, d / "link.req")
    (d / "bad.req").write_text('{"not": "a list"}')
    (d / "ok.req").write_text('["task.000001"]')
    (d / "..weird name.req").write_text("[]")
    asked = []
    n = requests(str(tmp_path), lambda uids: asked.append(uids) or [{"uid": u} for u in uids])
    assert n == 3
    assert asked == [["task.000001"]]  # the link was never read
    link = json.loads((d / "link.json").read_text())
    assert "error" in link and "link.req" in link["error"]
    assert "not a JSON list" in json.loads((d / "bad.json").read_text())["error"]
    assert json.loads((d / "ok.json").read_text()) == {"answers": [{"uid": "task.000001"}]}
    assert oct(os.stat(d / "ok.json").st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(d)) == ["bad.json", "link.json", "ok.json"]
    assert secret.exists()  # the link's target untouched


@pytest.mark.parametrize("n", [1])
def test_render_reads_without_optional_keys(n):
    e = X.Explanation({X.UID: "task.000007", X.WHERE: X.UNKNOWN, X.WAITS_FOR: ["why"]})
    assert str(e) == "task.000007: unknown\n  - why"


@pytest.mark.slow
def test_explain_member_waiting_for_a_held_view(tmp_path):
    """A service member ready to join a held view says so, and who holds it (by the CLI:
    members have no client Task)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "services"))
    from test_groups import echo

    with pf.Session(path=tmp_path / "s") as session:
        pmgr = pf.PilotManager(session)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=4, runtime="5m"))
        tmgr = pf.TaskManager(session)
        tmgr.add_pilots(pilot)
        group = tmgr.submit_service_group(echo("held"), replicas=1)
        group.wait_ready(timeout=60)
        with group.hold():
            group.resize(2)
            _wait_for(
                lambda: any(n.state == "ready" and n.uid == "held.m0001" for n in group.news),
                timeout=30,
            )
            r = _cli(str(session.path), "held.m0001", "--json")
            assert r.returncode == 0, r.stderr
            e = json.loads(r.stdout)[0]
            assert e[X.WHERE] == X.RUNNING
            assert any("a member of service group 'held' (ready" in w for w in e[X.WAITS_FOR]), e
            assert any(
                "its join waits for the view's hold to be released (held by the client)" in w
                for w in e[X.WAITS_FOR]
            ), e
        group.stop()


@pytest.mark.mpi
def test_each_task_says_which_launch_method_started_it(session, tmp_path_factory):
    """The route in plain sight (issue 51, row 6): the task's `launcher` (from its EXECUTING
    update), the agent's explain of a running task, the client's and `pilotfish explain`'s of
    an ended one, and the exec_start event's detail -- for a plain task and a 2-rank MPICH
    world (the pilot's own PMI: `pmi`)."""
    from mpi_programs import build_hello  # (tests/agent: the mpich wheel's mpicc)

    hello = build_hello(tmp_path_factory)
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=4, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    slow = tmgr.submit_tasks(_sleep(30))
    _wait_for(lambda: slow.state == pf.EXECUTING)
    e = slow.explain()
    assert e[X.WHERE] == X.RUNNING and e[X.LAUNCHER] == slow.launcher, (e, slow.launcher)
    assert f"launched by {slow.launcher}" in str(e), str(e)
    world = tmgr.submit_tasks(pf.TaskDescription(executable=hello, ranks=2))
    assert world.wait(timeout=60) == pf.DONE, (world.state, world.reason)
    assert world.launcher == "pmi", world.launcher
    assert slow.launcher == pilot.launcher, (slow.launcher, pilot.launcher)
    assert "(launched by pmi)" in str(world.explain())
    slow.cancel()
    tmgr.wait_tasks(timeout=30)
    from pilotfish._events import read_all_events

    def starts():
        evs = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
        return {e[1]: e[3] for e in evs if e[2] == "exec_start"}

    _wait_for(lambda: len(starts()) == 2)  # (the agent writes its events every 0.5 s)
    assert starts() == {slow.uid: slow.launcher, world.uid: "pmi"}, starts()
    session.events.flush()
    out = subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", "explain", str(session.path), world.uid],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "(launched by pmi)" in out.stdout, (out.stdout, out.stderr)
