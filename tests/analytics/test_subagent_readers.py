"""Every reader of a pilot's agent files reads its sub-agents' too (_agent_files.py): a pilot
with a root and a sub-agent per partition (agent/root.py) keeps its tasks' agent-side events
and journal in <pilot>/sub/p<i>/. `pilotfish report` and analytics, the dashboard (followed as
it runs), `pilotfish logs` / `explain` and a resumed session show it as they show a pilot of
one agent: the same workload on the same declared shape, run both ways (real local pilots,
real processes over real ZeroMQ). And nothing reached through a link is read."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import EventWriter
from pilotfish._agent_files import agent_dirs, agent_files
from pilotfish.analytics import analyze, load_session
from pilotfish.analytics.dashboard import SessionWatch
from pilotfish.analytics.launch_model import fit_launch_model
from pilotfish.analytics.utilization import TASK_PHASES
from pilotfish.client.resume import Resumed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N = 24  # tasks: 3 waves on 8 cores
SLEEP = 0.4


def _run(path, subagents: bool, watch: bool = False):
    """One pilot of 4 nodes x 2 cores in 2 partitions, with sub-agents or one agent; N tasks
    that print and sleep. With watch: a dashboard reader made before the tasks, refreshed
    while they run and after (returned)."""
    w = None
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(
            pf.PilotDescription(
                resource="local",
                nodes=4,
                cores_per_node=2,
                runtime="10m",
                partitions=2,
                subagents=subagents,
            )
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
        if watch:
            w = SessionWatch(str(path))
            w.refresh()
        tasks = tmgr.submit_tasks(
            [
                pf.TaskDescription(
                    executable="/bin/sh", arguments=["-c", f"echo out-{i}; sleep {SLEEP}"]
                )
                for i in range(N)
            ]
        )
        if watch:
            tasks[0].wait(timeout=60)
            w.refresh()  # mid-run: the files are followed, not read again later
        tmgr.wait_tasks(timeout=90)
        assert collections.Counter(t.state for t in tasks) == {pf.DONE: N}
        uids = {t.uid: t.partition for t in tasks}
        pilot.cancel()
        assert pilot.wait(timeout=60) == pf.CANCELED
        sandbox = pilot.sandbox
    if watch:
        w.refresh()
    return sandbox, uids, w


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("subreaders")
    sub = _run(base / "sub", True, watch=True)
    one = _run(base / "one", False)
    return base, sub, one


def test_the_files_of_a_pilot_are_its_own_then_its_sub_agents(runs):
    base, (sandbox, uids, _), (one_sandbox, _, _) = runs
    subs = [os.path.join(sandbox, "sub", f"p{i}") for i in (0, 1)]
    assert agent_dirs(sandbox) == [sandbox, *subs]
    assert agent_files(sandbox, "agent.events") == [
        os.path.join(d, "agent.events") for d in [sandbox, *subs]
    ]
    assert agent_dirs(one_sandbox) == [one_sandbox]


def test_analytics_of_a_sub_agent_pilot_are_those_of_one_agent(runs):
    base, (sandbox, uids, _), (one_sandbox, one_uids, _) = runs
    sub, one = analyze(load_session(base / "sub")), analyze(load_session(base / "one"))
    for a in (sub, one):
        t = a.data.tasks
        for name in ("EXECUTING", E.SCHEDULE_OK, E.EXEC_START, E.EXEC_STOP, "DONE"):
            assert t[name].notna().sum() == N, (name, a.data.path)
        assert set(t["pilot"]) == {"pilot.0000"}
        # the payload ran (sleep) in every task's exec_cmd span
        assert (t[E.EXEC_STOP] - t[E.EXEC_START] >= SLEEP * 0.9).all()
    # node use: each task on a node of the partition that ran it (the pilot's node indices)
    parts = {p["index"]: p for p in sub.partitions}
    assert sorted(parts) == [0, 1]
    for p in parts.values():
        assert p["tasks"] == sum(1 for v in uids.values() if v == p["index"])
        assert p["busy_core_s"] >= p["tasks"] * SLEEP * 0.9
        assert None not in (p["start"], p["ready"], p["stop"]), p  # its launcher's events
    # utilization: the same workload, the same declared shape -> the same busy core-seconds
    us, uo = sub.utilization["cores"], one.utilization["cores"]
    busy_s = sum(us.phases[k] for k in TASK_PHASES)
    busy_o = sum(uo.phases[k] for k in TASK_PHASES)
    assert busy_o >= N * SLEEP
    assert abs(busy_s - busy_o) <= 0.2 * busy_o, (busy_s, busy_o)
    assert abs(us.phases["exec_cmd"] - uo.phases["exec_cmd"]) <= 0.2 * uo.phases["exec_cmd"]
    assert abs(sum(us.shares.values()) - 1) < 1e-9 and us.oversubscribed == 0
    # the pilot's life is the root's (a sub-agent's ACTIVE/agent_stop is not the pilot's)
    root = [e for e in E.read_all_events(os.path.join(sandbox, "agent.events"))]
    t_active = min(t for t, u, n, _ in root if n == "ACTIVE") - sub.data.t0
    t_stop = min(t for t, u, n, _ in root if n == E.AGENT_STOP) - sub.data.t0
    p = sub.data.pilots.loc["pilot.0000"]
    assert p["ACTIVE"] == pytest.approx(t_active) and p[E.AGENT_STOP] == pytest.approx(t_stop)
    launchers = sub.data.launchers
    assert sorted(launchers["partition"]) == ["p0", "p1"]
    # `pilotfish simulate --fit`: the launches and launcher start-ups are the sub-agents'
    fitted, fitted_one = fit_launch_model(str(base / "sub")), fit_launch_model(str(base / "one"))
    assert set(fitted) == set(fitted_one) == {"direct"}


def test_pilotfish_report_counts_every_task_of_the_sub_agents(runs):
    base, _, _ = runs
    r = subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", "report", str(base / "sub"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["tasks"]["total"] == N
    cmd = m["utilization"]["cores"]["phases"]["exec_cmd"]["resource_s"]
    assert cmd >= N * SLEEP * 0.9
    assert [p["tasks"] for p in m["partitions"]] and sum(p["tasks"] for p in m["partitions"]) == N


def test_the_dashboard_follows_each_sub_agents_file(runs):
    base, (sandbox, uids, w), _ = runs
    s = w.summary()
    assert s["tasks"] == N and s["states"]["DONE"] == N, s
    assert s["events_read"] > 0 and not s["warnings"]
    assert s["bytes_read"] == s["bytes_total"]  # each file followed: no byte read twice
    assert w.refreshes == 3
    fresh = SessionWatch(str(base / "sub"))  # a reader made after the run: the same counts
    fresh.refresh()
    assert fresh.states() == w.states()
    (p,) = w.pilots_json()["pilots"]
    assert sorted(x["name"] for x in p["launchers"]) == ["direct p0", "direct p1"]
    notes = [n["event"] for n in p["notes"]]
    assert notes.count(E.AGENT_STOP) == 1, notes  # the pilot's, not each sub-agent's too


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_pilotfish_logs_and_explain_read_the_sub_agents(runs):
    base, (sandbox, uids, _), _ = runs
    r = _cli("logs", str(base / "sub"))
    assert r.returncode == 0, r.stderr
    for i in range(N):  # what each task printed: in its sub-agent's journal
        assert f"out-{i}\n" in r.stdout, r.stdout[:500]
    assert r.stdout.count(": DONE") == N
    last = sorted(uids)[-1]
    r = _cli("explain", str(base / "sub"), last, "--json")
    assert r.returncode == 0, r.stderr
    (got,) = json.loads(r.stdout)
    assert got["state"] == "DONE", got


def test_a_resumed_session_knows_what_the_sub_agents_finished(runs):
    """A resume reads the finals each agent journaled (the client may have died before it
    journaled them): a sub-agent pilot's are in its sub-agents' journals."""
    base, (sandbox, uids, _), _ = runs
    r = Resumed()
    r.learn(sandbox)
    assert {u: rec[2] for u, rec in r.finals.items() if u in uids} == dict.fromkeys(uids, "DONE")


def test_nothing_reached_through_a_link_is_read(runs, tmp_path):
    """A sub-agent folder that is a link, one another user could write to, a file that is a
    link: not listed, not read (by analytics, the dashboard, `logs`, a resume)."""
    base, (sandbox, uids, _), _ = runs
    copy = tmp_path / "s"
    shutil.copytree(base / "sub", copy, symlinks=True)
    pdir = copy / os.path.basename(sandbox)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    forged = [(1.0e9, "task.999999", "EXECUTING", None), (1.0e9 + 1, "task.999999", "DONE", None)]
    w = EventWriter(str(elsewhere / "agent.events"))
    w.record_many(forged)
    w.close()
    os.symlink(elsewhere, pdir / "sub" / "p2")  # a folder that is a link
    open_dir = pdir / "sub" / "p3"
    open_dir.mkdir()
    shutil.copy(elsewhere / "agent.events", open_dir / "agent.events")
    os.chmod(open_dir, 0o777)  # a folder anyone could have written to
    linked = pdir / "sub" / "p4"
    linked.mkdir(mode=0o700)
    os.symlink(elsewhere / "agent.events", linked / "agent.events")  # a file that is a link
    got = agent_files(str(pdir), "agent.events")
    assert got == [str(pdir / "agent.events")] + [
        str(pdir / "sub" / f"p{i}" / "agent.events") for i in (0, 1)
    ]
    data = load_session(copy)
    assert "task.999999" not in data.tasks.index
    watch = SessionWatch(str(copy))
    watch.refresh()
    assert watch.summary()["tasks"] == N
    p1 = pdir / "sub" / "p1" / "agent.events"  # replaced after it was read: named, not reread
    data = p1.read_bytes()
    (p1.parent / "new").write_bytes(data * 2)
    os.replace(p1.parent / "new", p1)  # (another inode)
    watch.refresh()
    s = watch.summary()
    assert s["tasks"] == N and s["states"]["DONE"] == N
    assert any(
        w.startswith(f"{pdir.name}/sub/p1/agent.events: was replaced") for w in s["warnings"]
    )
    r = _cli("logs", str(copy), "task.999999")
    assert r.returncode != 0 and "no such task" in r.stderr
