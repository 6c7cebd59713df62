"""Simulated pilots (agent/simulation.py): the real agent -- scheduler, partitions,
meta-scheduler -- on a virtual clock with an executor that starts nothing."""

from __future__ import annotations

import collections
import json
import os

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events

# exact launch costs, and the agent's work costs no CPU time (its CPU model: test_sim_cpu.py)
EXACT = {
    "direct": {"latency_s": 0.0},
    "prrte": {"startup_s": 2.0, "latency_s": 0.5, "latency_per_inflight_s": 0.0, "fail_rate": 0.0},
    "cpu": {"scale": 0},
}


def simulated(session, **kw):
    pmgr = pf.PilotManager(session)
    kw.setdefault("runtime", "1000h")
    pilot = pmgr.submit_pilots(pf.PilotDescription(resource="simulated", **kw))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def times(task):
    return dict(zip(task._hist[::2], task._hist[1::2]))


@pytest.mark.slow
def test_ten_thousand_tasks_follow_the_hand_computed_schedule(session):
    """10 cores, 10,000 one-core tasks of 3 s, no launch cost: task i starts at 3 * (i // 10)
    and ends 3 s later -- exactly -- so the run takes 3,000 virtual seconds."""
    pilot, tmgr = simulated(session, nodes=2, cores_per_node=5, launch_model=EXACT)
    tasks = tmgr.submit_tasks(
        [pf.TaskDescription(executable="work", duration=3) for _ in range(10_000)]
    )
    tmgr.wait_tasks(timeout=120)
    assert {t.state for t in tasks} == {pf.DONE}
    t0 = times(tasks[0])[pf.EXECUTING]
    for i, t in enumerate(tasks):
        h = times(t)
        assert h[pf.EXECUTING] - t0 == pytest.approx(3.0 * (i // 10), abs=1e-6), i
        assert h[pf.DONE] - h[pf.EXECUTING] == pytest.approx(3.0, abs=1e-6), i
    assert times(tasks[-1])[pf.DONE] - t0 == pytest.approx(3000.0, abs=1e-6)


def test_never_oversubscribes_and_places_like_the_real_agent(session):
    """A mixed workload over 2 partitions: at every instant each core holds at most one task
    (checked from the placements and the events), big tasks go first (utilization policy)."""
    pilot, tmgr = simulated(
        session, nodes=4, cores_per_node=8, gpus_per_node=2, partitions=2, launch_model=EXACT
    )
    descs = [
        pf.TaskDescription(executable="w", cores_per_rank=1 + i % 3, duration=1 + i % 7)
        for i in range(300)
    ]
    descs += [
        pf.TaskDescription(executable="w", cores_per_rank=6, gpus_per_rank=1, duration=10)
        for _ in range(12)
    ]
    tasks = tmgr.submit_tasks(descs)
    tmgr.wait_tasks(timeout=60)
    assert {t.state for t in tasks} == {pf.DONE}
    pilot.cancel()
    pilot.wait(timeout=60)
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    start = {e[1]: e[0] for e in ev if e[2] == "schedule_ok"}
    end = {e[1]: e[0] for e in ev if e[2] == "unschedule"}
    points = []
    for t in tasks:
        for s in t.slots:
            for c in s.cores:
                points.append((start[t.uid], 1, (s.node, c)))
                points.append((end[t.uid], -1, (s.node, c)))
    held = collections.Counter()
    for _, delta, core in sorted(points, key=lambda p: (p[0], p[1])):
        held[core] += delta
        assert held[core] <= 1, core
    big = [times(t)[pf.EXECUTING] for t in tasks[300:]]
    assert min(big) == min(times(t)[pf.EXECUTING] for t in tasks)  # hardest first


def test_launcher_model_delays_start_and_launch(session):
    """PRRTE model: each partition's DVM is ready 2 s after it starts, each launch reaches
    its payload 0.5 s after it is made."""
    pilot, tmgr = simulated(
        session, nodes=2, cores_per_node=2, launcher="prrte", partitions=2, launch_model=EXACT
    )
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="w", duration=4) for _ in range(4)])
    tmgr.wait_tasks(timeout=60)
    pilot.cancel()
    pilot.wait(timeout=60)
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    first = {}
    for t_, uid, name, detail in ev:
        first.setdefault((uid, name, detail if name.startswith("launcher") else None), t_)
    for i in range(2):
        up = (
            first[(pilot.uid, "launcher_ready", f"prrte p{i}")]
            - first[(pilot.uid, "launcher_start", f"prrte p{i}")]
        )
        assert up == pytest.approx(2.0, abs=1e-6)
    for t in tasks:
        ok, run = first[(t.uid, "exec_ok", None)], first[(t.uid, "launch_ok", None)]
        stop = first[(t.uid, "exec_stop", None)]
        assert run - ok == pytest.approx(0.5, abs=1e-6)
        assert stop - run == pytest.approx(4.0, abs=1e-6)


@pytest.mark.parametrize(
    "desc, field, why",
    [
        (
            dict(resource="simulated", launch_model={"prun": {}}),
            "launch_model",
            "'prun' is not a launch method",
        ),
        (
            dict(resource="simulated", launch_model={"prrte": {"latency_s": -1}}),
            "launch_model",
            "must be a finite number >= 0",
        ),
        (
            dict(resource="simulated", launch_model={"prrte": {"speed": 1}}),
            "launch_model",
            "unknown cost",
        ),
        (
            dict(resource="simulated", launch_model={"prrte": {"fail_rate": 1.5}}),
            "launch_model",
            "must be < 1",
        ),
        (
            dict(resource="simulated", launch_model="/nonexistent.json"),
            "launch_model",
            "cannot read",
        ),
        # a device that never ends is read no further than a model can be (was: MemoryError)
        (
            dict(resource="simulated", launch_model="/dev/zero"),
            "launch_model",
            "larger than 1048576",
        ),
        (
            dict(resource="local", launch_model={"prrte": {}}),
            "launch_model",
            "only a simulated pilot",
        ),
    ],
)
def test_bad_launch_models_are_rejected(desc, field, why):
    with pytest.raises(pf.DescriptionError) as e:
        pf.PilotDescription(**desc)
    assert e.value.field == field and why in str(e.value)


def test_simulated_task_needs_a_duration(session):
    pilot, tmgr = simulated(session, nodes=1, cores_per_node=2)
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_tasks(pf.TaskDescription(executable="w"))
    assert e.value.field == "duration" and "simulated" in str(e.value)
    with pytest.raises(pf.DescriptionError) as e:
        pf.TaskDescription(executable="w", duration=0)
    assert e.value.field == "duration"


@pytest.mark.slow
def test_model_file_and_report_of_a_simulated_session(tmp_path):
    from pilotfish.analytics import analyze
    from pilotfish.analytics.report import write_report

    model = tmp_path / "model.json"
    model.write_text(json.dumps({"direct": {"latency_s": 0.25}, "cpu": {"scale": 0}}))
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = simulated(s, nodes=2, cores_per_node=4, launch_model=str(model))
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="w", duration=60) for _ in range(16)]
        )
        tmgr.wait_tasks(timeout=60)
    assert {t.state for t in tasks} == {pf.DONE}
    assert all(
        times(t)[pf.DONE] - times(t)[pf.EXECUTING] == pytest.approx(60.25, abs=1e-6) for t in tasks
    )
    a = analyze(tmp_path / "s")
    assert a.ttx == pytest.approx(120.5, abs=0.5)  # two waves of 8
    assert a.to_json()["simulated"] is True
    html = open(write_report(a, str(tmp_path / "r"))["report"]).read()
    assert "simulated" in html


def test_failures_and_hangs_of_the_model_cost_time(session):
    """fail_rate: the launch is made twice (latency twice); hang_rate: the slots stay held
    hang_s longer. With both certain... almost (0.999), every task shows both."""
    model = {
        "direct": {"latency_s": 1.0, "fail_rate": 0.999, "hang_rate": 0.999, "hang_s": 10.0},
        "cpu": {"scale": 0},
    }
    pilot, tmgr = simulated(session, nodes=1, cores_per_node=4, launch_model=model)
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="w", duration=5) for _ in range(4)])
    tmgr.wait_tasks(timeout=60)
    for t in tasks:
        h = times(t)
        assert h[pf.DONE] - h[pf.EXECUTING] == pytest.approx(2.0 + 5.0 + 10.0, abs=1e-6)
