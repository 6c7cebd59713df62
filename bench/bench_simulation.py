"""Simulated pilots (issue 11): seed 000's Table 2 regenerated, and prediction vs reality.

    python bench/bench_simulation.py table2 [--nodes 256 512 1024 2048] [--partitions 1 2 8 32]
        [--node-executors] [--launcher prrte|pmi] [--model FILE] [--subagents] [--cpu-scale X]
    python bench/bench_simulation.py throughput [--nodes 10000] [--cores 8] [--tasks 100000]
        [--duration 1] [--partitions 1 4 16 32] [--per-frame 2048] [--cpu-scale X]
    python bench/bench_simulation.py reality --real DIR [--model FILE]

table2   the seed-000 mix at the seed's own durations (90 % 1 rank x U[1,9] cores for
         U[480,600] s, 10 % 1 rank x U[68,84] cores + 1 GPU for U[960,1200] s), 32.03 tasks
         per node (8,200 / 16,400 / 32,800 / 65,600 tasks on 256 / 512 / 1,024 / 2,048 nodes of
         168 cores and 6 GPUs), simulated with the PRRTE launch model for each partition
         count: TTX, RU, tasks per second of virtual time, setup time (placed -> payload
         running) mean / median / q3, and the wall time each simulation took here.
         --subagents: each partition's agent work on a CPU of its own (a sub-agent under a
         root) instead of one agent's; --cpu-scale X: the agent's CPU costs times X (0: its
         work costs no time, as before issue 48).
throughput  N one-core tasks of D seconds on nodes of C cores through node executors (no
         launch latency): where the agent's CPU is what limits, tasks per second of virtual
         time for one agent (every P), then for P sub-agents, and with --cpu-scale 0 beside
         them (what the simulation said before it charged the agent's CPU). The defaults are
         issue 48's run: 100,000 one-second tasks on 10,000 nodes of 8 cores.
reality  the real 16-node PRRTE runs of `bench_partitions.py seed000 --keep DIR`, each
         simulated with the launch model fitted from its own events (`pilotfish simulate
         --fit`): TTX and RU real vs predicted, per partition count. --model FILE: simulate
         them all with that one model instead (e.g. the defaults).

Both sides are measured by the same function of the session's agent events: TTX = first
AGENT_SCHEDULING -> last final state; RU = sum over tasks of cores x (placed -> released) /
(pilot cores x TTX) -- the bench_partitions definition.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402

CORES, GPUS = 168, 6
SEED_TABLE2 = {  # seed 000, Table 2 (Summit): nodes -> RU
    256: 0.85,
    2048: 0.52,
}


def mix(seed: int, n: int, scale: float = 1.0) -> list[tuple[int, int, float]]:
    """The seed-000 mix; scale 1: the seed's durations, 0.01: bench_partitions' real runs."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.9:
            out.append((rng.randint(1, 9), 0, rng.uniform(480, 600) * scale))
        else:
            out.append((rng.randint(68, 84), 1, rng.uniform(960, 1200) * scale))
    return out


def measure(sandbox: str, cores_total: int) -> dict:
    """TTX, RU and setup time from a pilot's agent events (same for real and simulated)."""
    first: dict[tuple[str, str], float] = {}
    for t, uid, name, _ in read_all_events(os.path.join(sandbox, "agent.events")):
        first.setdefault((uid, name), t)
    arrive = [t for (u, n), t in first.items() if n == "AGENT_SCHEDULING"]
    final = [
        t
        for (u, n), t in first.items()
        if n in ("DONE", "FAILED", "CANCELED") and u.startswith("task.")
    ]
    ttx = max(final) - min(arrive)
    sched = {u: t for (u, n), t in first.items() if n == "schedule_ok"}
    unsched = {u: t for (u, n), t in first.items() if n == "unschedule"}
    launch = {u: t for (u, n), t in first.items() if n == "launch_ok"}
    setup = np.array([launch[u] - sched[u] for u in sched if u in launch])
    return {
        "ttx": ttx,
        "sched": sched,
        "unsched": unsched,
        "setup_mean": float(setup.mean()) if len(setup) else float("nan"),
        "setup_median": float(np.median(setup)) if len(setup) else float("nan"),
        "setup_q3": float(np.quantile(setup, 0.75)) if len(setup) else float("nan"),
    }


def ru(m: dict, cores_of: dict[str, int], cores_total: int) -> float:
    busy = sum(
        cores_of[u] * (m["unsched"][u] - m["sched"][u])
        for u in m["sched"]
        if u in m["unsched"] and u in cores_of
    )
    return busy / (cores_total * m["ttx"])


def with_cpu(model, **cpu) -> dict | None:
    """A launch model (dict, file or None) with these CPU model costs ("cpu") over its own."""
    cpu = {k: v for k, v in cpu.items() if v is not None}
    if not cpu:
        return model
    model = dict(json.load(open(model)) if isinstance(model, str) else model or {})
    model["cpu"] = {**model.get("cpu", {}), **cpu}
    return model


def simulate(
    nodes: int,
    partitions: int,
    tasks,
    model=None,
    gpus: int = GPUS,
    cores: int = CORES,
    keep: str | None = None,
    node_executors: bool = False,
    launcher: str = "prrte",
) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = keep or os.path.join(d, "s")
        with pf.Session(path=path) as s:
            pilot = pf.PilotManager(s).submit_pilots(
                pf.PilotDescription(
                    resource="simulated",
                    nodes=nodes,
                    cores_per_node=cores,
                    gpus_per_node=gpus,
                    runtime="10000h",
                    launcher=launcher,
                    partitions=partitions,
                    launch_model=model,
                    node_executors=node_executors or None,
                )
            )
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
            descs = [
                pf.TaskDescription(
                    executable="payload", cores_per_rank=c, gpus_per_rank=g, duration=sec
                )
                for c, g, sec in tasks
            ]
            t0 = time.perf_counter()
            hs = tm.submit_tasks(descs)
            tm.wait_tasks()
            wall = time.perf_counter() - t0
            bad = [h for h in hs if h.state != pf.DONE]
            assert not bad, (bad[0].uid, bad[0].state, bad[0].reason)
            cores_of = {h.uid: c for h, (c, _, _) in zip(hs, tasks)}
            pilot.cancel()
            pilot.wait(timeout=60)
            m = measure(pilot.sandbox, nodes * cores)
    return {
        "ttx_s": round(m["ttx"], 1),
        "ru": round(ru(m, cores_of, nodes * cores), 3),
        "tasks_per_s": round(len(tasks) / m["ttx"], 1),
        "setup_mean_s": round(m["setup_mean"], 3),
        "setup_median_s": round(m["setup_median"], 3),
        "setup_q3_s": round(m["setup_q3"], 3),
        "wall_s": round(wall, 2),
    }


def table2(
    node_counts,
    partition_counts,
    node_executors: bool = False,
    model_file: str | None = None,
    launcher: str = "prrte",
    subagents: bool = False,
    cpu_scale: float | None = None,
) -> None:
    """node_executors: every (single-node) task of the mix through the node executors'
    model instead of the partitions' DVMs (which still start)."""
    model = json.load(open(model_file)) if model_file else None
    model = with_cpu(model, subagents=subagents or None, scale=cpu_scale)
    for nodes in node_counts:
        n = round(8200 * nodes / 256)
        tasks = mix(0, n)
        for p in partition_counts:
            if p > nodes:
                continue
            r = simulate(
                nodes, p, tasks, model=model, node_executors=node_executors, launcher=launcher
            )
            print(
                json.dumps(
                    {
                        "nodes": nodes,
                        "tasks": n,
                        "partitions": p,
                        "launcher": launcher,
                        "node_executors": node_executors,
                        "subagents": subagents,
                        "cpu_scale": 1.0 if cpu_scale is None else cpu_scale,
                        **r,
                        "seed_ru": SEED_TABLE2.get(nodes),
                    }
                ),
                flush=True,
            )


def throughput(
    nodes: int,
    n: int,
    duration: float,
    partition_counts,
    per_frame: int,
    model_file: str | None = None,
    cpu_scale: float | None = None,
    cores: int = 8,
) -> None:
    """Where the agent's CPU limits: n one-core tasks of `duration` s on `nodes` nodes of
    `cores` cores through node executors that start at once and launch without latency; the client
    sends `per_frame` tasks a Submit frame. Tasks per second of virtual time, first arrival
    -> last end, for one agent and for sub-agents per partition count, and (cpu_scale 0)
    with the agent's work costing no time."""
    from pilotfish.client import submit

    base = json.load(open(model_file)) if model_file else {}
    base = {
        **base,
        "nodes": {
            **base.get("nodes", {}),
            "startup_s": 0.0,
            "startup_per_node_s": 0.0,
            "latency_s": 0.0,
        },
    }
    submit.SUBMIT_BATCH = per_frame
    tasks = [(1, 0, duration)] * n
    cases = [(p, False, cpu_scale) for p in partition_counts]
    cases += [(p, True, cpu_scale) for p in partition_counts]
    cases += [(partition_counts[0], False, 0.0)]
    for p, sub, scale in cases:
        if p > nodes:
            continue
        model = with_cpu(base, subagents=sub, scale=scale)
        r = simulate(
            nodes,
            p,
            tasks,
            model=model,
            gpus=0,
            cores=cores,
            node_executors=True,
            launcher="direct",
        )
        print(
            json.dumps(
                {
                    "nodes": nodes,
                    "cores": cores,
                    "tasks": n,
                    "duration_s": duration,
                    "tasks_per_frame": per_frame,
                    "partitions": p,
                    "subagents": sub,
                    "cpu_scale": 1.0 if scale is None else scale,
                    "tasks_per_s": r["tasks_per_s"],
                    "ttx_s": round(n / r["tasks_per_s"], 3),
                    "ru": r["ru"],
                    "wall_s": r["wall_s"],
                }
            ),
            flush=True,
        )


def reality(real_dir: str, model_file: str | None) -> None:
    from pilotfish.analytics.launch_model import fit_launch_model

    for name in sorted(os.listdir(real_dir), key=lambda x: int(x.lstrip("p") or 0)):
        sdir = os.path.join(real_dir, name)
        pilots = [p for p in os.listdir(sdir) if p.startswith("pilot.")]
        if not pilots:
            continue
        with open(os.path.join(sdir, pilots[0], "pilot.json")) as f:
            pj = json.load(f)
        desc = pj["description"]
        nodes, cores, gpus = desc["nodes"], desc["cores_per_node"], desc["gpus_per_node"]
        tasks = mix(0, 550, scale=0.01)
        real = measure(os.path.join(sdir, pilots[0]), nodes * cores)
        uids = sorted(real["sched"])
        cores_of = {u: c for u, (c, _, _) in zip(uids, tasks)}
        model = model_file or fit_launch_model(sdir)
        sim = simulate(nodes, desc["partitions"], tasks, model=model, gpus=gpus, cores=cores)
        r_ru = ru(real, cores_of, nodes * cores)
        print(
            json.dumps(
                {
                    "partitions": desc["partitions"],
                    "model": model_file or "fitted from the run",
                    "real_ttx_s": round(real["ttx"], 2),
                    "sim_ttx_s": sim["ttx_s"],
                    "ttx_error": round(sim["ttx_s"] / real["ttx"] - 1, 3),
                    "real_ru": round(r_ru, 3),
                    "sim_ru": sim["ru"],
                    "ru_error": round(sim["ru"] / r_ru - 1, 3),
                    "real_setup_median_s": round(real["setup_median"], 3),
                    "sim_setup_median_s": sim["setup_median_s"],
                    "fitted": model if not model_file else None,
                }
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", choices=("table2", "throughput", "reality"))
    ap.add_argument(
        "--nodes",
        type=int,
        nargs="+",
        default=None,
        help="table2: 256 512 1024 2048; throughput: 10000 (one count)",
    )
    ap.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=None,
        help="table2: 1 2 8 32; throughput: 1 4 16 32",
    )
    ap.add_argument(
        "--subagents",
        action="store_true",
        help="table2: each partition's work on a sub-agent's CPU of its own",
    )
    ap.add_argument(
        "--cpu-scale",
        type=float,
        default=None,
        help="the agent's CPU costs times this (0: its work costs no time)",
    )
    ap.add_argument("--tasks", type=int, default=100_000, help="throughput: how many tasks")
    ap.add_argument("--cores", type=int, default=8, help="throughput: cores per node")
    ap.add_argument("--duration", type=float, default=1.0, help="throughput: each task's s")
    ap.add_argument(
        "--per-frame",
        type=int,
        default=2048,
        help="throughput: tasks per Submit frame from the client",
    )
    ap.add_argument("--real", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument(
        "--launcher",
        default="prrte",
        help="table2: the pilot's launch method (prrte: DVM partitions; pmi: MPI "
        "worlds served by the node executors, no launcher per task)",
    )
    ap.add_argument(
        "--node-executors",
        action="store_true",
        help="table2: the tasks through node executors (model 'nodes')",
    )
    a = ap.parse_args()
    if a.what == "table2":
        table2(
            a.nodes or [256, 512, 1024, 2048],
            a.partitions or [1, 2, 8, 32],
            a.node_executors,
            a.model,
            a.launcher,
            a.subagents,
            a.cpu_scale,
        )
    elif a.what == "throughput":
        throughput(
            (a.nodes or [10_000])[0],
            a.tasks,
            a.duration,
            a.partitions or [1, 4, 16, 32],
            a.per_frame,
            a.model,
            a.cpu_scale,
            a.cores,
        )
    else:
        if not a.real:
            ap.error("reality needs --real DIR (from bench_partitions.py seed000 --keep DIR)")
        reality(a.real, a.model)


if __name__ == "__main__":
    main()
