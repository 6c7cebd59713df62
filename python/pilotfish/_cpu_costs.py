"""A simulated pilot's CPU model: what the agent's own work costs its process, so that a
saturated agent (or root) shows in a prediction. The costs, their defaults and the checks of
the part of a launch model that gives them (the key "cpu" of `launch_model`: a dict or the
JSON file's object) -- here, beside the launch model (_launch_costs.py), so that the
description (checked at submit, client side) and the simulated agent (agent/simulation.py,
whose CpuModel charges them) import neither each other.

Costs are CPU seconds of the process that pays them (agent/simulation.py says when each is
charged):
    frame_s          a frame the agent receives or sends: a Submit from the client, a launch
                     frame to a node executor (one per node per launch round) and its
                     Spawned reply, a node's exit frame (one per node per instant its tasks
                     end) and its acknowledgment (one per node per ACK_S), the Updates frame
                     of a round that finds the process idle (a round that arrives while it
                     is busy joins the round in progress: no frame of its own)
    accept_s         a task accepted (checked, queued, bound to its partition)
    launch_s         a task placed and launched (besides its frames or its spawn)
    end_s            a task's end reaped, released, finalized and reported
    spawn_s          a task whose launcher process the agent spawns itself (every launch
                     method but the node executors' "nodes" and "pmi"): spawn and reap
    idle_s           CPU seconds per second the process spends idle (its loop, the client's
                     heartbeats): its work runs on what is left
    beat_per_node_s  CPU seconds per second per node executor it serves (heartbeats both
                     ways, one per node a second up to agent/nodes.BEATS_PER_S nodes; past
                     that the beat period grows, so the cost stays that of BEATS_PER_S
                     nodes): off without node executors
    route_s          subagents only: the root's cost per frame from the client it routes
                     (a Submit goes on whole to the sub-agents of its tasks)
    scale            every cost above times this (an agent core faster than the one fitted:
                     < 1; 0: the agent's work costs no time, as before issue 48)
    subagents        false: one agent process (one CPU timeline); true: each partition has a
                     sub-agent process of its own (its own timeline, its own nodes'
                     heartbeats) under a root charged route_s per routed frame

Fitted per machine (fit_cpu): `bench/bench_sim_vs_real.py --fit FILE` measures the real
agent's CPU (per process, its threads' schedstat) on local pilots of emulated node
executors -- idle at two sizes, per task in two workloads of different frames per task --
and writes the costs as FILE's "cpu": a launch model (`pilotfish simulate --launch-model
FILE`, `launch_model=FILE`) whose costs the simulated agent then charges.
"""

from __future__ import annotations

import math
from typing import Any

from ._errors import show


def finite_cost(v: Any) -> bool:
    """v is a number (not a bool), finite and >= 0: what every modeled cost must be (the
    launch model's and the CPU model's)."""
    try:  # (math.isfinite of an int too large for a float raises OverflowError)
        return (
            not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
        )
    except OverflowError:
        return False


CPU_KEY = "cpu"  # its key in a launch model (no launch method has this name)

CPU_COSTS = (
    "frame_s",
    "accept_s",
    "launch_s",
    "end_s",
    "spawn_s",
    "idle_s",
    "beat_per_node_s",
    "route_s",
    "scale",
)
CPU_FLAGS = ("subagents",)

# Fitted from the real agent (issue 48; the lead's measurements of the agent's CPU per
# process, on this machine's cores):
#   one task per frame, tasks spread over many node executors: 131 us of agent CPU per task
#     (~70 us of it messaging: CURVE/ZeroMQ I/O 38-45 us, Python send/receive ~26 us)
#   many tasks per frame: 30-40 us per task      -> accept + launch + end = 35 us
#   one host, null tasks (spawned): 102-109 us    -> spawn_s = 105 - 35 = 70 us
#   idle, per node executor (1 s beats both ways): ~13 ms/s + 38 us per node per second
# Each one-task frame costs the agent seven frames (its Submit, the launch frame to its node
# and the node's Spawned reply, the node's exit frame and its acknowledgment, the Updates
# frame after the launch and after the end): frame_s = (131 - 35) / 7 = 13.7 us (the round's
# own loop overhead included); fitted here (bench/bench_sim_vs_real.py --fit, quiet machine:
# two bulk workloads of 0.26 and 4.3 frames per task on 256 emulated nodes): 14.8 us a frame
# and 35.1 us a task (10.0 / 15.0 / 10.0 in TASK_SPLIT's shares). The split of a task's cost
# over accept / launch / end is not measured (placement is in launch). route_s: a root
# receives a frame and sends it on whole, two frames (a design figure, not a measurement).
DEFAULT_CPU: dict[str, Any] = {
    "frame_s": 14.8e-6,
    "accept_s": 10e-6,
    "launch_s": 15e-6,
    "end_s": 10e-6,
    "spawn_s": 70e-6,
    "idle_s": 0.013,
    "beat_per_node_s": 38e-6,
    "route_s": 38.4e-6,
    "scale": 1.0,
    "subagents": False,
}


def check_cpu(costs: Any) -> str | None:
    """Why this "cpu" part of a launch model is unusable, or None."""
    if not isinstance(costs, dict):
        return f"{CPU_KEY!r}: its costs must be a dict"
    for k, v in costs.items():
        if not isinstance(k, str) or k not in CPU_COSTS + CPU_FLAGS:
            return (
                f"{CPU_KEY}.{show(k, 60)}: unknown cost (expected "
                f"{', '.join(CPU_COSTS + CPU_FLAGS)})"
            )
        if k in CPU_FLAGS:
            if not isinstance(v, bool):
                return f"{CPU_KEY}.{k} = {show(v, 60)}: must be true or false"
            continue
        if not finite_cost(v):
            return f"{CPU_KEY}.{k} = {show(v, 60)}: must be a finite number >= 0"
        if k == "idle_s" and v >= 1:
            return f"{CPU_KEY}.{k} = {show(v, 60)}: must be < 1 (CPU seconds per second)"
    return None


def load_cpu(costs: dict | None) -> dict[str, Any]:
    """The defaults, overridden by `costs` (checked already)."""
    out = dict(DEFAULT_CPU)
    out.update(costs or {})
    return out


TASK_SPLIT = {"accept_s": 10 / 35, "launch_s": 15 / 35, "end_s": 10 / 35}  # (of a task's cost)


def fit_cpu(idle: list[tuple[int, float]], runs: list[tuple[float, float]]) -> dict[str, float]:
    """The CPU costs fitted from a real agent's CPU, measured per process on this machine
    (bench/bench_sim_vs_real.py --fit):
        idle  (beating nodes, CPU seconds per second with nothing to do) of pilots of two or
              more sizes -- beating nodes: its node executors, at most agent/nodes.BEATS_PER_S
              -> idle_s + beat_per_node_s x nodes (least squares)
        runs  (CPU seconds per task beyond the idle rate, frames per task as the CPU model
              counts them for that same workload) of two or more workloads of different
              frames per task -> a task's cost + frame_s x frames (least squares); the task's
              cost split over accept_s, launch_s, end_s as TASK_SPLIT (not separable here)
    Only these costs: spawn_s and route_s are not measured by these runs (the defaults stay).
    ValueError if the points cannot separate the costs, or the fit gives one out of range."""
    out = {}
    for name, pts, (a_key, b_key) in (
        ("idle", idle, ("idle_s", "beat_per_node_s")),
        ("runs", runs, ("task_s", "frame_s")),
    ):
        if len(pts) < 2 or len({round(x, 9) for x, _ in pts}) < 2:
            raise ValueError(f"{name}: need points at two or more different x, got {pts!r}")
        n = len(pts)
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        out[a_key], out[b_key] = my - slope * mx, slope
    for k in ("idle_s", "beat_per_node_s", "task_s", "frame_s"):
        if not finite_cost(out[k]):
            raise ValueError(f"fitted {k} = {out[k]!r}: not a cost (>= 0); measure again")
    if out["idle_s"] >= 1:
        raise ValueError(f"fitted idle_s = {out['idle_s']!r}: must be < 1")
    task = out.pop("task_s")
    out.update({k: task * share for k, share in TASK_SPLIT.items()})
    return out
