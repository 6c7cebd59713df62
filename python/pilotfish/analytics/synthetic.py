"""Synthetic sessions: a plausible run's events, written as pilotfish writes them.

For benchmarks (1M tasks) and for tests of the report, where a real run is too slow or not
available. The run is simulated, not random noise: a pilot starts, the agent receives the
tasks in batches, places them first-come-first-served on a pool of cores and GPUs at a
bounded scheduling rate, spawns them, reaps them, and drains; so warmup, draining and idle
all show up. Files: session.json, client.events, tasks.msgpack, <pilot>/pilot.json,
<pilot>/agent.events (EventWriter frames).

    write_synthetic_session("/tmp/s", n_tasks=1000, nodes=4, cores_per_node=16)
"""

from __future__ import annotations

import heapq
import json
import os
from dataclasses import dataclass

import numpy as np

from pilotfish import _events as E
from pilotfish._events import EventWriter, TaskRecord, write_task_records

# (share, ranks, cores_per_rank, gpus_per_rank): a mixed workload
DEFAULT_MIX = ((0.85, 1, 1, 0), (0.09, 1, 4, 0), (0.04, 2, 8, 0), (0.02, 1, 4, 1))


@dataclass
class Pilot:
    uid: str
    nodes: int
    cores_per_node: int
    gpus_per_node: int
    agent_cores: int = 0


def write_synthetic_session(
    root: str,
    n_tasks: int = 1000,
    nodes: int = 4,
    cores_per_node: int = 16,
    gpus_per_node: int = 2,
    n_pilots: int = 1,
    mean_runtime: float = 4.0,
    schedule_rate: float = 2000.0,
    fail_share: float = 0.01,
    cancel_share: float = 0.002,
    mix=DEFAULT_MIX,
    seed: int = 0,
) -> str:
    """Write a session directory; returns its path. Times start at a fixed epoch so reports
    of the same arguments are identical."""
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    epoch = 1_700_000_000.0
    pilots = [
        Pilot(f"pilot.{k:04d}", nodes, cores_per_node, gpus_per_node) for k in range(n_pilots)
    ]
    with open(os.path.join(root, "session.json"), "w") as fh:
        json.dump(
            {
                "uid": os.path.basename(os.path.normpath(root)),
                "created": epoch,
                "version": "synthetic",
                "host": "synthetic",
            },
            fh,
        )

    # -- the workload
    shares = np.array([m[0] for m in mix], float)
    kind = rng.choice(len(mix), size=n_tasks, p=shares / shares.sum())
    ranks = np.array([m[1] for m in mix])[kind]
    cpr = np.array([m[2] for m in mix])[kind]
    gpr = np.array([m[3] for m in mix])[kind]
    runtime = rng.lognormal(np.log(mean_runtime), 0.5, n_tasks)
    pilot_of = np.arange(n_tasks) % n_pilots
    canceled = rng.random(n_tasks) < cancel_share
    failed = ~canceled & (rng.random(n_tasks) < fail_share)

    # -- the client submits in batches of 10k every 0.2 s, starting at t = 2, in task order
    i = np.arange(n_tasks)
    t_new = 2.0 + (i // 10_000) * 0.2 + (i % 10_000) * 1e-6
    t_sched_client = t_new + 0.001
    t_staging_in = t_new + 0.002 + rng.exponential(0.005, n_tasks)

    t_active = np.zeros(n_pilots)
    cols = {
        k: np.full(n_tasks, np.nan)
        for k in (
            "AGENT_SCHEDULING",
            E.SCHEDULE_OK,
            "EXECUTING",
            E.EXEC_START,
            E.EXEC_OK,
            E.EXEC_STOP,
            E.UNSCHEDULE,
            "STAGING_OUTPUT",
            "final",
        )
    }
    pilot_times = []
    for p_idx, p in enumerate(pilots):
        boot = 5.0 + p_idx * 2.0 + rng.random()
        active = boot + 3.0 + rng.random()
        t_active[p_idx] = active
        mine = np.flatnonzero(pilot_of == p_idx)
        # tasks reach the agent once it is active
        t_recv = np.maximum(t_staging_in[mine], active) + 0.01 + rng.exponential(0.01, len(mine))
        order = mine[np.argsort(t_recv, kind="stable")]
        cols["AGENT_SCHEDULING"][mine] = t_recv
        _simulate_agent(
            rng, p, order, ranks * cpr, ranks * gpr, runtime, canceled, cols, schedule_rate
        )
        last = np.nanmax(np.concatenate([cols["final"][mine], [active]]))
        # canceled tasks: canceled at drain, never placed
        c = mine[canceled[mine]]
        cols["final"][c] = last + 0.5
        pilot_times.append(
            dict(
                NEW=0.0,
                LAUNCHING=0.5,
                bootstrap_start=boot,
                resources_ok=boot + 0.5,
                launcher_start=boot + 0.6,
                launcher_ready=boot + 2.0,
                ACTIVE=active,
                drain_start=last + 0.5,
                drain_stop=last + 1.0,
                launcher_stop=last + 1.2,
                agent_stop=last + 1.5,
                DONE=last + 3.0,
            )
        )

    final_state = np.where(canceled, "CANCELED", np.where(failed, "FAILED", "DONE")).astype(object)
    exit_code = np.where(failed, 1, 0)

    # -- events
    uids = [f"task.{i:07d}" for i in range(n_tasks)]
    client = []
    for name, t in (
        ("NEW", t_new),
        ("SCHEDULING", t_sched_client),
        ("STAGING_INPUT", t_staging_in),
    ):
        client.append((t, np.full(n_tasks, name, object), np.arange(n_tasks)))
    learned = cols["final"] + 0.05 + rng.exponential(0.05, n_tasks)
    client.append((learned, final_state.astype(object), np.arange(n_tasks)))
    for p_idx, p in enumerate(pilots):
        pt = pilot_times[p_idx]
        for name in ("NEW", "LAUNCHING", "DONE"):
            client.append((np.array([pt[name]]), np.array([name], object), np.array([-1 - p_idx])))
    _write_events(os.path.join(root, "client.events"), epoch, client, uids, pilots)

    for p_idx, p in enumerate(pilots):
        mine = np.flatnonzero(pilot_of == p_idx)
        ran = mine[~canceled[mine]]
        parts = [
            (cols["AGENT_SCHEDULING"][mine], np.full(len(mine), "AGENT_SCHEDULING", object), mine)
        ]
        for name in (
            E.SCHEDULE_OK,
            "EXECUTING",
            E.EXEC_START,
            E.EXEC_OK,
            E.EXEC_STOP,
            E.UNSCHEDULE,
            "STAGING_OUTPUT",
        ):
            parts.append((cols[name][ran], np.full(len(ran), name, object), ran))
        parts.append((cols["final"][mine], final_state[mine].astype(object), mine))
        pt = pilot_times[p_idx]
        names = [n for n in pt if n not in ("NEW", "LAUNCHING", "DONE")]
        parts.append(
            (
                np.array([pt[n] for n in names]),
                np.array(names, object),
                np.full(len(names), -1 - p_idx),
            )
        )
        pdir = os.path.join(root, p.uid)
        os.makedirs(pdir, exist_ok=True)
        details = {
            E.SCHEDULE_OK: _shape_details(ranks, cpr, gpr),
            E.RESOURCES_OK: f"{p.nodes}x{p.cores_per_node}/{p.gpus_per_node}",
            E.LAUNCHER_START: "direct p0",
            E.LAUNCHER_READY: "direct p0",
            E.LAUNCHER_STOP: "direct p0",
        }
        _write_events(os.path.join(pdir, "agent.events"), epoch, parts, uids, pilots, details)
        with open(os.path.join(pdir, "pilot.json"), "w") as fh:
            json.dump(
                {
                    "uid": p.uid,
                    "description": {"nodes": p.nodes},
                    "nodes": [
                        [f"node{k:04d}", p.cores_per_node, p.gpus_per_node, 0]
                        for k in range(p.nodes)
                    ],
                    "launcher": "direct",
                    "agent_cores": p.agent_cores,
                    "agent_gpus": 0,
                },
                fh,
            )

    node_of = (np.arange(n_tasks) % nodes).tolist()
    records = [
        TaskRecord(
            uids[i],
            None,
            pilots[pilot_of[i]].uid,
            int(ranks[i]),
            int(cpr[i]),
            int(gpr[i]),
            str(final_state[i]),
            None if canceled[i] else int(exit_code[i]),
            [] if canceled[i] else [node_of[i]] * int(ranks[i]),
        )
        for i in range(n_tasks)
    ]
    write_task_records(os.path.join(root, "tasks.msgpack"), records)
    return root


def _shape_details(ranks, cpr, gpr) -> np.ndarray:
    shapes = {}
    out = np.empty(len(ranks), object)
    for key in set(zip(ranks.tolist(), cpr.tolist(), gpr.tolist())):
        shapes[key] = f"{key[0]}x{key[1]}/{key[2]}"
    keys = ranks * 1_000_000 + cpr * 1000 + gpr
    for key, s in shapes.items():
        out[keys == key[0] * 1_000_000 + key[1] * 1000 + key[2]] = s
    return out


def _simulate_agent(rng, p: Pilot, order, cores, gpus, runtime, canceled, cols, rate) -> None:
    """First-come-first-served placement on pooled cores/GPUs at a bounded rate."""
    n = len(order)
    prep = rng.lognormal(np.log(0.002), 0.6, n)
    spawn = rng.lognormal(np.log(0.0005), 0.5, n)
    reap = rng.lognormal(np.log(0.001), 0.5, n)
    out_stage = rng.exponential(0.0005, n)
    free_c = p.nodes * p.cores_per_node - p.agent_cores
    free_g = p.nodes * p.gpus_per_node
    releases: list[tuple[float, int, int]] = []
    clock = 0.0
    step = 1.0 / rate
    recv = cols["AGENT_SCHEDULING"]
    sched = np.full(n, np.nan)
    unsched = np.full(n, np.nan)
    for k, i in enumerate(order.tolist()):
        if canceled[i]:
            continue
        c, g = int(cores[i]), int(gpus[i])
        t = max(recv[i], clock + step)
        while free_c < c or free_g < g:
            t_rel, rc, rg = heapq.heappop(releases)
            free_c += rc
            free_g += rg
            t = max(t, t_rel)
        free_c -= c
        free_g -= g
        clock = t
        sched[k] = t
        end = t + prep[k] + spawn[k] + runtime[i] + reap[k]
        unsched[k] = end
        heapq.heappush(releases, (end, c, g))
    ok = ~np.isnan(sched)
    idx = order[ok]
    s = sched[ok]
    cols[E.SCHEDULE_OK][idx] = s
    cols["EXECUTING"][idx] = s
    cols[E.EXEC_START][idx] = s + prep[ok]
    cols[E.EXEC_OK][idx] = s + prep[ok] + spawn[ok]
    cols[E.EXEC_STOP][idx] = cols[E.EXEC_OK][idx] + runtime[idx]
    cols[E.UNSCHEDULE][idx] = unsched[ok]
    cols["STAGING_OUTPUT"][idx] = unsched[ok]
    cols["final"][idx] = unsched[ok] + out_stage[ok]


def _write_events(path, epoch, parts, uids, pilots, details=None) -> None:
    """parts: (times, names, task index or -1-pilot index); written sorted by time."""
    t = np.concatenate([p[0] for p in parts])
    names = np.concatenate([p[1] for p in parts])
    who = np.concatenate([p[2] for p in parts])
    order = np.argsort(t, kind="stable")
    t, names, who = t[order] + epoch, names[order], who[order]
    uid_list = np.asarray(uids + [p.uid for p in reversed(pilots)], dtype=object)
    uid_of = uid_list[np.where(who >= 0, who, len(uids) + (len(pilots) + who))]
    det = np.full(len(t), None, object)
    for name, d in (details or {}).items():
        sel = names == name
        if isinstance(d, np.ndarray):
            det[sel] = d[who[sel]]
        else:
            det[sel] = d
    w = EventWriter(path, flush_every=4096)
    events = list(zip(t.tolist(), uid_of.tolist(), names.tolist(), det.tolist()))
    for k in range(0, len(events), 4096):  # the agent's batches
        w.record_many(events[k : k + 4096])
    w.close()
