"""The simulated agent's CPU model (agent/simulation.py CpuModel), issue 48: its costs fitted
per machine from the real agent's CPU (_cpu_costs.fit_cpu; the measurements:
bench/bench_sim_vs_real.py --fit FILE) and used once given as a launch model's "cpu"; and the
round it models as the real agent's (a node's tasks of one round go in one launch frame and
start together, each launch frame has its Spawned reply, exits are acknowledged once per
node per ACK_S)."""

from __future__ import annotations

import json
import os

import pytest

import pilotfish as pf
from pilotfish import _cpu_costs
from pilotfish.agent.node_link import ACK_S
from pilotfish.agent.simulation import CPU_LOG, CpuModel

COSTS = {  # (made up: far from the defaults, so that a default cannot pass for them)
    "idle_s": 0.004,
    "beat_per_node_s": 50e-6,
    "accept_s": 20e-6,
    "launch_s": 30e-6,
    "end_s": 20e-6,
    "frame_s": 40e-6,
}


def test_fit_recovers_the_costs_its_points_were_made_of():
    task = COSTS["accept_s"] + COSTS["launch_s"] + COSTS["end_s"]
    idle = [(n, COSTS["idle_s"] + COSTS["beat_per_node_s"] * n) for n in (16, 256, 1000)]
    runs = [(f, task + COSTS["frame_s"] * f) for f in (0.26, 4.3)]
    fitted = _cpu_costs.fit_cpu(idle, runs)
    assert fitted == pytest.approx(COSTS, rel=1e-9)
    assert _cpu_costs.check_cpu(fitted) is None  # a launch model's "cpu" as it is


@pytest.mark.parametrize(
    "idle, runs, why",
    [
        ([(256, 0.01)], [(0.3, 4e-5), (4, 1e-4)], "idle: need points at two or more"),
        ([(16, 0.01), (16, 0.02)], [(0.3, 4e-5), (4, 1e-4)], "idle: need points at two"),
        ([(16, 0.01), (256, 0.02)], [(0.3, 4e-5), (0.3, 1e-4)], "runs: need points at two"),
        # more CPU per task with fewer frames: a negative frame cost
        ([(16, 0.01), (256, 0.02)], [(0.3, 1e-4), (4, 4e-5)], "fitted frame_s = -"),
        ([(16, 0.02), (256, 0.01)], [(0.3, 4e-5), (4, 1e-4)], "fitted beat_per_node_s = -"),
        ([(16, 2.0), (256, 2.5)], [(0.3, 4e-5), (4, 1e-4)], "fitted idle_s = 1.9"),
    ],
)
def test_fit_refuses_points_that_cannot_give_costs(idle, runs, why):
    with pytest.raises(ValueError) as e:
        _cpu_costs.fit_cpu(idle, runs)
    assert why in str(e.value), str(e.value)


def charged(sandbox: str) -> dict:
    last = None
    with open(os.path.join(sandbox, "agent.log")) as f:
        for line in f:
            if CPU_LOG in line:
                last = line
    assert last is not None
    return json.loads(last.split(CPU_LOG, 1)[1])


def test_the_fitted_costs_in_a_launch_model_file_are_the_ones_charged(session, tmp_path):
    """A launch model file holding fitted costs (as bench_sim_vs_real.py --fit writes it),
    given to a simulated pilot: its agent charges exactly those -- its CPU is its counted
    work at the fitted prices, not at the defaults'."""
    path = tmp_path / "fitted.json"
    nodes = {"startup_s": 0.0, "startup_per_node_s": 0.0, "latency_s": 0.0}
    path.write_text(json.dumps({"nodes": nodes, "cpu": COSTS}))
    pilot = pf.PilotManager(session).submit_pilots(
        pf.PilotDescription(
            resource="simulated",
            nodes=8,
            cores_per_node=4,
            node_executors=True,
            launch_model=str(path),
            runtime="1000h",
        )
    )
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    tmgr.submit_tasks([pf.TaskDescription(executable="w", duration=0.5) for _ in range(100)])
    assert set(tmgr.wait_tasks(timeout=120)) == {pf.DONE}
    pilot.cancel()
    pilot.wait(timeout=60)
    c = charged(pilot.sandbox)
    assert c["accepted"] == c["launched"] == c["ended"] == 100 and c["frames"] > 0, c
    work = (
        c["accepted"] * COSTS["accept_s"]
        + c["launched"] * COSTS["launch_s"]
        + c["ended"] * COSTS["end_s"]
        + c["frames"] * COSTS["frame_s"]
    )
    assert c["busy_s"]["agent"] == pytest.approx(work, abs=1e-5), (c, work)
    defaults = _cpu_costs.DEFAULT_CPU
    at_defaults = (
        100 * (defaults["accept_s"] + defaults["launch_s"] + defaults["end_s"])
        + c["frames"] * defaults["frame_s"]
    )
    assert abs(c["busy_s"]["agent"] - at_defaults) > 0.2 * at_defaults


class P:
    def __init__(self, index):
        self.index, self.nodes = index, ["n0", "n1"]


class S:
    def __init__(self, node):
        self.node = node


class LM:
    name = "nodes"


class T:
    def __init__(self, node, partition):
        self.slots, self.partition, self.lm = [S(node)], partition, LM()


def test_a_round_sends_one_frame_per_node_and_its_tasks_start_together():
    """Four tasks on n0 and two on n1 in one round: the launch work of all six, then n0's
    frame, then n1's (each node's tasks start when their frame is sent: they end together,
    one exit frame a node), the two Spawned replies and the round's Updates frame."""
    costs = _cpu_costs.load_cpu(dict(COSTS, idle_s=0.0))
    p = P(0)
    cpu = CpuModel(costs, [p], node_executors=False)
    tasks = [T("n0", p) for _ in range(4)] + [T("n1", p) for _ in range(2)]
    done = cpu.launched(tasks, 1.0)
    f, lc = COSTS["frame_s"], COSTS["launch_s"]
    assert done[:4] == pytest.approx([1.0 + 6 * lc + f] * 4)
    assert done[4:] == pytest.approx([1.0 + 6 * lc + 2 * f] * 2)
    assert cpu.lines[0].free_at == pytest.approx(1.0 + 6 * lc + 5 * f)  # + 2 Spawned, Updates
    assert cpu.count["frames"] == 5 and cpu.count["launched"] == 6
    # they end together: one exit frame a node, the acknowledgments, no Updates (busy)
    seen = cpu.reaped([(1.0001, t) for t in tasks])
    assert cpu.count["frames"] == 5 + 2 + 2
    assert seen == pytest.approx([cpu.lines[0].free_at] * 6)
    # exits again before ACK_S: no second acknowledgment for those nodes
    end = cpu.lines[0].free_at + 0.1
    cpu.reaped([(end, tasks[0])])
    assert cpu.count["frames"] == 9 + 1 + 1  # n0's exit frame, the (idle) round's Updates
    cpu.reaped([(end + ACK_S, tasks[4])])
    assert cpu.count["frames"] == 11 + 3  # n1's exit frame, its acknowledgment, Updates


def test_a_burst_is_accepted_before_it_can_be_placed():
    """Two Submit frames of 1,000 tasks heard at t=1: the agent accepts them one after the
    other (a frame and 1,000 accepts each); until then accepting() says so (the real agent
    places no task it has not read)."""
    from types import SimpleNamespace

    from pilotfish import _wire

    costs = _cpu_costs.load_cpu(dict(COSTS, idle_s=0.0))
    p = P(0)
    cpu = CpuModel(costs, [p], node_executors=False)
    tasks = {}
    for k in range(2):
        specs = [SimpleNamespace(uid=f"t{k}.{i}") for i in range(1000)]
        tasks.update({s.uid: SimpleNamespace(partition=p) for s in specs})
        cpu.heard(_wire.Submit(specs), tasks, 1.0)  # type: ignore[arg-type]
    done = 1.0 + 2 * (COSTS["frame_s"] + 1000 * COSTS["accept_s"])
    assert cpu.accepted_at == pytest.approx(done)
    assert cpu.accepting(1.0) and cpu.accepting(done - 1e-6) and not cpu.accepting(done + 1e-9)
    assert cpu.count["accepted"] == 2000 and cpu.count["frames"] == 2
