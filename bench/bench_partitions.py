"""Partitions (seed 000): one pilot, P launcher instances (PRRTE DVMs), through real PRRTE.

    python bench/bench_partitions.py seed000 [--partitions 1 2 4 8 16] [--tasks 550]
    python bench/bench_partitions.py startstop [--partitions 1 8 16 32]
    python bench/bench_partitions.py rate [--tasks 400] [--partitions 4]

seed000   the seed-000 mix (90 % 1 rank x U[1,9] cores for U[4.8,6.0] s, 10 % 1 rank x
          U[68,84] cores + 1 GPU for U[9.6,12.0] s: seed durations / 100), ~550 tasks
          submitted at once onto an emulated pilot of 16 x (168 cores, 6 GPUs) with
          launcher "prrte", once per partition count, in one run. Per run: DVM start-up and
          termination per instance (mean, max) and in total as the pilot saw them (first
          launcher_start -> last launcher_ready; drain_stop -> last launcher_stop), setup time
          (placed -> first rank running, from the ranks' own start notes) mean / median / q3,
          TTX (submit -> last task final), RU (busy core-seconds / (cores x TTX)), and the
          spread of tasks and busy core-seconds over partitions (max / min).
startstop P DVMs started and stopped one after another (as RADICAL-Pilot did) and all at
          once (as the agent does: begin all, poll all, stop all), same run, per P.
rate      N /bin/true tasks through prterun on one DVM vs P DVMs, same run (tasks/s).

Every figure comes from the session's own events (pilotfish.analytics), not from this script's
clock, except startstop (bare launch methods, wall clock).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402

sys.path.insert(0, HERE)
from bench_hetero import CORES, GPUS, NODES, mix  # noqa: E402  (the seed-000 mix, one place)


def _q(xs, q):
    return float(np.quantile(xs, q)) if len(xs) else float("nan")


def seed000(partitions: int, tasks: list[tuple[int, int, float]], with_duration: bool = False,
            keep: str | None = None, slurm: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(keep, f"p{partitions}") if keep else os.path.join(d, "s")
        with pf.Session(path=path) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                nodes=NODES, cores_per_node=CORES, gpus_per_node=GPUS, runtime="1h",
                launcher="prrte", partitions=partitions,
                launcher_options={"prrte": {"recycle_after": 100000}},
                # --slurm: the project's cluster of hosts (slurm.sh start 16 168): every
                # task is single-node, so node executors start them all
                **({"resource": "slurm"} if slurm else {})))
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
            descs = [pf.TaskDescription(executable="/bin/sleep", arguments=[f"{sec:.3f}"],
                                        cores_per_rank=c, gpus_per_rank=g, stdout=False,
                                        stderr=False, duration=sec if with_duration else None)
                     for c, g, sec in tasks]
            t0 = time.time()
            handles = tm.submit_tasks(descs)
            tm.wait_tasks()
            bad = [(h.uid, h.state, h.reason) for h in handles if h.state != pf.DONE]
            assert not bad, bad[:3]
            t_end = max(dict(zip(h._hist[::2], h._hist[1::2]))[pf.DONE] for h in handles)
            part_of = {h.uid: h.partition for h in handles}
            pilot.cancel()
            pilot.wait(timeout=120)
            ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    first: dict[tuple[str, str], float] = {}
    for t, uid, name, detail in ev:
        key = (uid, name)
        if key not in first or name in ("launcher_start", "launcher_ready", "launcher_stop"):
            first.setdefault(key, t)
    inst: dict[str, dict[str, float]] = {}
    for t, uid, name, detail in ev:
        if name in ("launcher_start", "launcher_ready", "launcher_stop") and detail:
            inst.setdefault(detail, {}).setdefault(name, t)
    drain_stop = next(t for t, u, n, _ in ev if n == "drain_stop")
    ups = [i["launcher_ready"] - i["launcher_start"] for i in inst.values()]
    starts = [i["launcher_start"] for i in inst.values()]
    readies = [i["launcher_ready"] for i in inst.values()]
    stops = [i["launcher_stop"] for i in inst.values()]
    sched = {u: t for (u, n), t in first.items() if n == "schedule_ok"}
    unsched = {u: t for (u, n), t in first.items() if n == "unschedule"}
    launch = {u: t for (u, n), t in first.items() if n == "launch_ok"}
    # (node executors: no launcher between, the task itself is running at its spawn)
    for (u, n), t in first.items():
        if n == "exec_ok" and u not in launch and slurm:
            launch[u] = t
    setup = [launch[u] - sched[u] for u in sched if u in launch]
    ttx = t_end - t0
    busy = {p: 0.0 for p in range(partitions)}
    count = {p: 0 for p in range(partitions)}
    cores_of = {h.uid: c for h, (c, _, _) in zip(handles, tasks)}
    for u, p in part_of.items():
        count[p] += 1
        busy[p] += cores_of[u] * (unsched[u] - sched[u])
    total_busy = sum(busy.values())
    return {
        "partitions": partitions, "tasks": len(tasks), "durations_given": with_duration,
        "dvm_startup_mean_s": round(statistics.mean(ups), 3),
        "dvm_startup_max_s": round(max(ups), 3),
        "startup_total_s": round(max(readies) - min(starts), 3),
        "termination_total_s": round(max(stops) - drain_stop, 3),
        "overhead_total_s": round(max(readies) - min(starts) + max(stops) - drain_stop, 3),
        "setup_mean_s": round(statistics.mean(setup), 3),
        "setup_median_s": round(_q(setup, 0.5), 3),
        "setup_q3_s": round(_q(setup, 0.75), 3),
        "launch_ok_seen": len(setup),
        "ttx_s": round(ttx, 2),
        "ru": round(total_busy / (NODES * CORES * ttx), 3),
        "tasks_max_over_min": round(max(count.values()) / max(1, min(count.values())), 3),
        "busy_max_over_min": round(max(busy.values()) / max(1e-9, min(busy.values())), 3),
        "tasks_per_partition": [count[p] for p in range(partitions)],
        "busy_per_partition": [round(busy[p]) for p in range(partitions)],
    }


class Spawner:
    """What the agent hands a launch method: spawn(argv, env, stdout, stderr) -> pid."""

    def __init__(self):
        self.procs = []

    def __call__(self, argv, env, stdout=None, stderr=None):
        out = open(stdout, "wb") if stdout else subprocess.DEVNULL
        err = open(stderr, "wb") if stderr else subprocess.DEVNULL
        p = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p.pid

    def reap(self):
        for p in self.procs:
            p.poll()


def _dvms(n: int, root: str):
    from pilotfish.agent.resources import discover
    from pilotfish.launch import get_launcher

    res = discover("local", 1, 4, 0, None)
    return [get_launcher("prrte", res, {"dvm_dir": os.path.join(root, str(i))}) for i in range(n)]


def startstop(n: int) -> dict:
    with tempfile.TemporaryDirectory() as root:
        sp = Spawner()
        seq_dir, con_dir = os.path.join(root, "seq"), os.path.join(root, "con")
        t = time.perf_counter()
        lms = _dvms(n, seq_dir)
        for lm in lms:  # one after another: each waited for before the next
            lm.start(sp)
        t_up = time.perf_counter() - t
        for lm in lms:
            lm.stop()
            sp.reap()
        seq = time.perf_counter() - t
        t = time.perf_counter()
        lms = _dvms(n, con_dir)
        for lm in lms:
            lm.begin(sp)
        pending = list(lms)
        while pending:
            pending = [lm for lm in pending if not lm.poll_ready()]
            if pending:
                time.sleep(0.005)
        c_up = time.perf_counter() - t
        for lm in lms:
            lm.stop_begin()
        for lm in lms:
            lm.stop()
            sp.reap()
        con = time.perf_counter() - t
    return {"dvms": n, "sequential_start_s": round(t_up, 3), "sequential_total_s": round(seq, 3),
            "concurrent_start_s": round(c_up, 3), "concurrent_total_s": round(con, 3),
            "concurrent_over_sequential": round(con / seq, 3)}


def rate(n: int, partitions: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                nodes=partitions * 2, cores_per_node=8, runtime="1h", launcher="prrte",
                partitions=partitions))
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
            # wait for the DVMs, so that start-up is not in the rate
            tm.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(partitions)])
            tm.wait_tasks()
            descs = [pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                     for _ in range(n)]
            t0 = time.perf_counter()
            hs = tm.submit_tasks(descs)
            tm.wait_tasks([h.uid for h in hs])
            dt = time.perf_counter() - t0
            assert all(h.state == pf.DONE for h in hs)
    return {"partitions": partitions, "tasks": n, "seconds": round(dt, 2),
            "tasks_per_s": round(n / dt, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("seed000", "startstop", "rate"))
    ap.add_argument("--partitions", type=int, nargs="+")
    ap.add_argument("--tasks", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", default=None,
                    help="seed000: keep each session under this directory (pN), e.g. for "
                         "bench_simulation.py reality")
    ap.add_argument("--slurm", action="store_true",
                    help="seed000: a Slurm pilot on the cluster of hosts (slurm.sh start 16 168; "
                         "run inside it) -- node executors -- instead of an emulated one")
    ap.add_argument("--duration", action="store_true",
                    help="seed000: give each task its duration (TaskDescription.duration)")
    a = ap.parse_args()
    if a.what == "seed000":
        tasks = mix(a.seed, a.tasks or 550)
        for p in a.partitions or (1, 2, 4, 8, 16):
            print(json.dumps(seed000(p, tasks, a.duration, a.keep, a.slurm)), flush=True)
    elif a.what == "startstop":
        for p in a.partitions or (1, 8, 16, 32):
            print(json.dumps(startstop(p)), flush=True)
    else:
        parts = a.partitions or [4]
        for p in [1] + parts:
            print(json.dumps(rate(a.tasks or 400, p)), flush=True)


if __name__ == "__main__":
    main()
