"""Simulated pilots (agent/simulation.py), issue 48: the clock waits for the client's word
(a burst of submits is one virtual instant however slowly the client sends it), and the
agent's own work takes CPU time (CpuModel; costs: pilotfish/_cpu_costs.py), so a saturated
agent caps the predicted throughput and sub-agents (one CPU per partition) lift it."""

from __future__ import annotations

import os
import time

import pytest

import pilotfish as pf
from pilotfish import _cpu_costs
from pilotfish._events import read_all_events
from pilotfish.agent.node_link import BEATS_PER_S
from pilotfish.agent.simulation import CpuModel, Timeline
from pilotfish.client import submit


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


# -- the client's word ----------------------------------------------------------------------
def test_a_burst_arrives_at_one_instant_however_slow_the_client(session):
    """Three submits of one burst, 0.3 s of real time apart, then a two-core task, then a
    wait: every task arrives at one virtual instant (the clock used to run after 0.1 s of
    the client's silence: the second batch arrived when the first had ended, 5 virtual
    seconds later), and the burst is placed whole -- the big task first, as the policy
    places the hardest first -- not by the real time its frames took to come."""
    pilot, tmgr = simulated(
        session, nodes=2, cores_per_node=2, launch_model={"direct": {"latency_s": 0.0}}
    )
    tasks = []
    for _ in range(3):
        tasks += tmgr.submit_tasks(
            [pf.TaskDescription(executable="w", duration=5) for _ in range(4)]
        )
        time.sleep(0.3)  # a slow client (or a loaded machine) between two submits
    big = tmgr.submit_tasks(pf.TaskDescription(executable="w", cores_per_rank=2, duration=5))
    assert tmgr.wait_tasks(timeout=60) == [pf.DONE] * 13
    arrived = {times(t)[pf.AGENT_SCHEDULING] for t in tasks + [big]}
    assert len(arrived) == 1, sorted(arrived)
    t0 = min(arrived)
    assert times(big)[pf.EXECUTING] == pytest.approx(t0, abs=0.01)
    # and the clock ran once the client waited: 70 core-seconds on 4 cores, in 5 s waves
    assert max(times(t)[pf.DONE] for t in tasks) - t0 == pytest.approx(20.0, abs=0.1)


def test_callbacks_chain_tasks_back_to_back_in_virtual_time(session):
    """Each task submitted from a callback of the one before (the client waits throughout):
    with nothing else to run the clock stays where the last one ended, so the chain of six
    minute-long tasks takes six virtual minutes -- and no real seconds of a held clock."""
    pilot, tmgr = simulated(
        session, nodes=1, cores_per_node=2, launch_model={"direct": {"latency_s": 0.0}}
    )
    more = []

    def chain(task, state):
        if state == pf.DONE and len(more) < 5:
            more.append(tmgr.submit_tasks(pf.TaskDescription(executable="w", duration=60)))

    tmgr.register_callback(chain)
    first = tmgr.submit_tasks(pf.TaskDescription(executable="w", duration=60))
    t0 = time.monotonic()
    while len(more) < 5 or more[-1].state not in pf.FINAL:
        tmgr.wait_tasks(timeout=1.5)
        assert time.monotonic() - t0 < 1.5 * 6, "the clock stayed held"
    assert times(more[-1])[pf.DONE] - times(first)[pf.EXECUTING] == pytest.approx(360, abs=1)


def test_the_word_follows_every_submit_made_while_the_client_waits(monkeypatch):
    """submit.Word alone (a recording bridge): a waiter says the word to the manager's live
    simulated pilots (no other); a submit while one waits says it again after its frames
    (a callback's, another thread's); a submit nobody waits for says it SILENCE_S after the
    call, unless another submit or a wait came first (their own word then)."""
    monkeypatch.setattr(submit.Word, "SILENCE_S", 0.2)
    sent = []

    class Bridge:
        def send(self, uid, frame):
            sent.append((uid, frame))

    class Plane:
        bridge = Bridge()
        closed = False

        def check_open(self):
            if self.closed:
                raise pf.SessionClosed("closed")

    class Pilot:
        def __init__(self, uid, simulated, state):
            self.uid, self.simulated, self.state = uid, simulated, state

    plane = Plane()
    word = submit.Word(
        plane,
        {
            "a": Pilot("a", True, pf.ACTIVE),
            "b": Pilot("b", False, pf.ACTIVE),
            "c": Pilot("c", True, pf.DONE),
        },
    )
    said = ("a", submit.Word.WAITING)
    with word.waiting():
        assert sent == [said]
        with word.submitting():
            pass
        assert sent == [said] * 2
    with word.submitting():
        pass
    time.sleep(0.1)
    with word.submitting():  # the next submit of the burst, within SILENCE_S: no word yet
        pass
    time.sleep(0.15)
    assert sent == [said] * 2
    time.sleep(0.2)
    assert sent == [said] * 3  # SILENCE_S after the last submit
    with word.submitting():
        pass
    with word.waiting():  # a wait says it at once (no word of the timer's after it)
        pass
    time.sleep(0.3)
    assert sent == [said] * 4
    with word.submitting():
        pass
    plane.closed = True  # a closed session's timer says nothing
    time.sleep(0.3)
    assert sent == [said] * 4


def test_a_client_that_never_waits_is_heard_by_its_silence(session):
    """A client that polls states instead of waiting: its client says the word for it
    Word.SILENCE_S of real time after its last submit call."""
    pilot, tmgr = simulated(session, nodes=1, cores_per_node=1)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="w", duration=3600))
    t0 = time.monotonic()
    while t.state not in pf.FINAL:
        assert time.monotonic() - t0 < submit.Word.SILENCE_S + 20, t.state
        time.sleep(0.05)
    assert t.state == pf.DONE and time.monotonic() - t0 >= submit.Word.SILENCE_S - 0.1


# -- the agent's CPU --------------------------------------------------------------------------
COSTS = {
    "frame_s": 20e-6,
    "accept_s": 10e-6,
    "launch_s": 15e-6,
    "end_s": 10e-6,
    "idle_s": 0.0,
    "beat_per_node_s": 0.0,
    "route_s": 40e-6,
}
NODES = {"startup_s": 0.0, "startup_per_node_s": 0.0, "latency_s": 0.0}


def one_task_frames(session, monkeypatch, partitions=1, subagents=False, n=3000):
    """n tasks of 20 ms, one per Submit frame, on 1,000 one-core nodes through node
    executors (no launch latency): tasks per virtual second, first arrival -> last end."""
    monkeypatch.setattr(submit, "SUBMIT_BATCH", 1)
    pilot, tmgr = simulated(
        session,
        nodes=1000,
        cores_per_node=1,
        node_executors=True,
        partitions=partitions,
        launch_model={"nodes": NODES, "cpu": dict(COSTS, subagents=subagents)},
    )
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="w", duration=0.02) for _ in range(n)])
    assert set(tmgr.wait_tasks(timeout=120)) == {pf.DONE}
    pilot.cancel()
    pilot.wait(timeout=60)
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    arrive = [e[0] for e in ev if e[2] == pf.AGENT_SCHEDULING and e[1].startswith("task.")]
    done = [e[0] for e in ev if e[2] == pf.DONE and e[1].startswith("task.")]
    assert len(arrive) == len(done) == len(tasks)
    return n / (max(done) - min(arrive))


def test_one_task_frames_are_capped_by_the_agents_cpu_and_sub_agents_lift_it(session, monkeypatch):
    """Each task costs one agent: its Submit frame and accept (30 us), its launch, its
    node's launch frame and that node's Spawned reply (55 us), its end and its node's exit
    frame (30 us), and a third of an acknowledgment frame (each node's exits are acknowledged
    once per ACK_S: the run is shorter, 1,000 nodes run 3,000 tasks): ~122 us, at most
    ~8,200 tasks/s of virtual time (before issue 48 the agent's work took no time: 20 ms
    tasks on 1,000 cores ran at up to 50,000/s). Four partitions in one agent change
    nothing; four sub-agents (a CPU each, a root routing the frames at 40 us each) lift it."""
    frames = 4 + 1000 / 3000
    cap = 1 / (COSTS["frame_s"] * frames + COSTS["accept_s"] + COSTS["launch_s"] + COSTS["end_s"])
    one = one_task_frames(session, monkeypatch)
    assert 0.8 * cap < one <= 1.001 * cap, (one, cap)
    parts = one_task_frames(session, monkeypatch, partitions=4)
    assert parts == pytest.approx(one, rel=0.1)
    subs = one_task_frames(session, monkeypatch, partitions=4, subagents=True)
    assert subs > 1.4 * one, (subs, one)
    # the root's frames now cap it: 3,000 x 40 us, then each sub-agent's quarter of the rest
    assert subs <= 1 / COSTS["route_s"], subs


def test_timeline_is_first_come_first_served_at_its_idle_speed():
    tl = Timeline("agent", 0.5)  # half its CPU goes to heartbeats: work takes twice as long
    assert tl.run(1.0, 0.1) == pytest.approx(1.2)
    assert tl.run(1.1, 0.1) == pytest.approx(1.4)  # given while busy: after the work before
    assert tl.run(2.0, 0.0) == pytest.approx(2.0)
    assert tl.run(3.0, 0.05) == pytest.approx(3.1)
    assert tl.busy == pytest.approx(0.25)


def test_heartbeats_of_node_executors_load_their_process():
    class P:
        def __init__(self, index, n):
            self.index, self.nodes = index, [None] * n

    costs = _cpu_costs.load_cpu(None)
    small = CpuModel(costs, [P(0, 300), P(1, 200)], node_executors=True)
    assert small.lines[0].speed == pytest.approx(1 - 0.013 - 500 * 38e-6)
    # past BEATS_PER_S nodes the real agent's beat period grows (agent/nodes.beat_period):
    # its beats, and so their cost, stay those of BEATS_PER_S nodes
    one = CpuModel(costs, [P(0, 5000), P(1, 5000)], node_executors=True)
    assert one.lines[0].speed == pytest.approx(1 - 0.013 - BEATS_PER_S * 38e-6)
    subs = CpuModel(dict(costs, subagents=True), [P(0, 600), P(1, 5000)], node_executors=True)
    assert [tl.speed for tl in subs.lines] == pytest.approx(
        [1 - 0.013 - 600 * 38e-6, 1 - 0.013 - BEATS_PER_S * 38e-6]
    )
    assert subs.root is not None and subs.root.speed == pytest.approx(1 - 0.013)
    assert CpuModel(costs, [P(0, 10_000)], node_executors=False).lines[0].speed == pytest.approx(
        1 - 0.013
    )


@pytest.mark.parametrize(
    "cpu, why",
    [
        ({"speed": 1}, "cpu.'speed': unknown cost"),
        ({"frame_s": -1}, "cpu.frame_s = -1: must be a finite number >= 0"),
        ({"frame_s": float("nan")}, "must be a finite number >= 0"),
        ({"idle_s": 1.0}, "cpu.idle_s = 1.0: must be < 1"),
        ({"subagents": 1}, "cpu.subagents = 1: must be true or false"),
        ({"scale": True}, "cpu.scale = True: must be a finite number >= 0"),
        ([1, 2], "'cpu': its costs must be a dict"),
    ],
)
def test_bad_cpu_models_are_rejected(cpu, why):
    with pytest.raises(pf.DescriptionError) as e:
        pf.PilotDescription(resource="simulated", launch_model={"cpu": cpu})
    assert e.value.field == "launch_model" and why in str(e.value), str(e.value)


def test_simulate_command_charges_the_agents_cpu_and_takes_sub_agents(tmp_path):
    """`pilotfish simulate`: 5,000 one-millisecond tasks on 200 one-core nodes through node
    executors (no launch latency) take 25 waves of 1 ms when the agent's work costs nothing
    (--cpu-scale 0), ~75 us of its CPU each with the fitted defaults, and about a quarter of
    that per partition with --subagents (4 partitions: four CPUs)."""
    import subprocess
    import sys

    from pilotfish.analytics import analyze

    wl = tmp_path / "w.yaml"
    wl.write_text("""
pilot: {resource: simulated, nodes: 200, cores_per_node: 1, partitions: 4, node_executors: true,
        launch_model: {nodes: {startup_s: 0, startup_per_node_s: 0, latency_s: 0}}}
tasks:
  - {count: 5000, executable: sim, duration: 0.001}
""")
    ttx = {}
    for name, opts in (("free", ["--cpu-scale", "0"]), ("one", []), ("subs", ["--subagents"])):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pilotfish.cli",
                "simulate",
                *opts,
                "--sessions",
                str(tmp_path / name),
                str(wl),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "5000 DONE" in r.stdout, r.stdout
        (s,) = (tmp_path / name).iterdir()
        ttx[name] = analyze(s).ttx
    assert ttx["free"] == pytest.approx(0.025, abs=0.002), ttx
    assert 0.3 < ttx["one"] < 0.5, ttx  # 5,000 x (accept, launch, end, two node frames)
    assert ttx["subs"] < 0.4 * ttx["one"], ttx
    r = subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", "simulate", "--cpu-scale", "-1", str(wl)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--cpu-scale" in r.stderr, r.stderr
