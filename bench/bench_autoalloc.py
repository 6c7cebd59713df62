"""Allocations that follow the work (issue 50), side by side on one burst, on the cluster of
4 hosts x 16 cores:

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_autoalloc.py
        [--small 600] [--big 20] [--duration 20] [--idle 30] [--second-gap 120]
        [--only autoalloc,static,per_task,model] [--splits 4,2+2]
        [--out bench/results/autoalloc.json]

The burst: --small one-core tasks and --big tasks of 2 nodes (2 ranks x 16 cores), each
sleeping --duration s, submitted at once. Three ways to run it, one after another:

  autoalloc  pmgr.autoalloc(2-node Slurm template, max_pilots=3, idle_timeout=--idle,
             max_nodes=4): then, --second-gap s after the first burst's last task, a second
             burst (64 one-core tasks) that must start new pilots. Checked as the issue's
             done-when says: at most 3 of its jobs in Slurm at once (squeue, each second),
             every task DONE, every job ends within idle timeout + 15 s of its last task,
             no pilot ended while a task of its burst waited in the client.
  static     static choices made by hand (--splits: one pilot of the 4 nodes, two of 2
             nodes, ...), each submitted with the burst and ended (by hand: pilot.cancel)
             once every task is done: the best of them is the baseline.
  per_task   no pilot: one Slurm job per task (two job arrays: 1 core each, and 2 nodes x
             16 cores each), each job recording when its script started and ended.
  model      the same burst on _alloc_sim's model of the queue (autoalloc and static), so
             the model's figures stand beside the real ones.

Per way: makespan (first submit -> last task end), core-seconds allocated (running pilots'
cores x time, ACTIVE -> end; per_task: each job's cores x its script's run), busy (tasks'
cores x their EXECUTING -> end) and idle (the difference), the most jobs at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from pilotfish.client._alloc_core import Limits
from pilotfish.client._alloc_sim import Cluster, SimTask, simulate

CORES = 16
NODES = 4


def burst(n_small: int, n_big: int, duration: float) -> list:
    sleep = ["-c", f"sleep {duration:g}"]
    return [pf.TaskDescription(executable="/bin/sh", arguments=sleep) for _ in range(n_small)] + [
        pf.TaskDescription(executable="/bin/sh", arguments=sleep, ranks=2, cores_per_rank=CORES)
        for _ in range(n_big)
    ]


class JobCounter:
    """The most of `ids()` in squeue at once, sampled each second."""

    def __init__(self, ids, fmt: str = "%i"):
        self.ids, self.fmt, self.most, self._stop = ids, fmt, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(1.0):
            r = subprocess.run(
                ["squeue", "-h", "-r", "-o", self.fmt], capture_output=True, text=True
            )
            mine = set(self.ids())
            self.most = max(self.most, len([j for j in r.stdout.split() if j in mine]))

    def stop(self):
        self._stop.set()
        self._t.join()


def _final_t(t):
    return next(x for s, x in t.history if s in pf.FINAL)


def _busy(tasks) -> float:
    out = 0.0
    for t in tasks:
        start = next((x for s, x in t.history if s == pf.EXECUTING), None)
        if start is not None:
            out += (_final_t(t) - start) * t.description.ranks * t.description.cores_per_rank
    return out


def _allocated(pilots) -> float:
    out = 0.0
    for p in pilots:
        start = next((x for s, x in p.history if s == pf.ACTIVE), None)
        if start is not None:
            out += (next(x for s, x in p.history if s in pf.FINAL) - start) * (
                p.description.nodes * CORES
            )
    return out


def run_autoalloc(a, root) -> dict:
    tmpl = pf.PilotDescription(resource="slurm", nodes=2, cores_per_node=CORES, runtime="1h")
    with pf.Session(path=os.path.join(root, "autoalloc")) as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(tmpl, max_pilots=3, idle_timeout=f"{a.idle}s", max_nodes=NODES)
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        counter = JobCounter(lambda: [p._job.native_id for p in pol.pilots if p._job])
        t0 = time.time()
        tasks = tmgr.submit_tasks(burst(a.small, a.big, a.duration))
        states = tmgr.wait_tasks(timeout=3600)
        first = list(pol.pilots)
        last = max(_final_t(t) for t in tasks)
        for p in first:
            p.wait(timeout=a.idle + 60)
        time.sleep(max(0.0, last + a.second_gap - time.time()))
        t2 = time.time()
        more = tmgr.submit_tasks(burst(64, 0, a.duration))
        states2 = tmgr.wait_tasks([t.uid for t in more], timeout=3600)
        second = [p for p in pol.pilots if p not in first]
        for p in second:
            p.wait(timeout=a.idle + 60)
        counter.stop()
        s.events.flush()
        evs = read_all_events(os.path.join(s.path, "client.events"))
        pilots = list(pol.pilots)
        status = pol.status
    by_pilot: dict = {}
    for t in tasks + more:
        by_pilot.setdefault(t.pilot, []).append(_final_t(t))
    tails = {
        p.uid: round(
            next(x for st, x in p.history if st in pf.FINAL)
            - max(by_pilot.get(p.uid, [p.history[0][1]])),
            1,
        )
        for p in pilots
    }
    routed1 = max(t for t, u, n, _ in evs if n == E.ROUTED and u in {x.uid for x in tasks})
    ended_early = [d for t, u, n, d in evs if n == E.ALLOC_END and t < routed1]
    first_alloc = _allocated(first)
    out = {
        "makespan_s": round(last - t0, 1),
        "allocated_core_s": round(first_alloc),
        "busy_core_s": round(_busy(tasks)),
        "idle_core_s": round(first_alloc - _busy(tasks)),
        "jobs": len(first),
        "pilots": [(p.uid, p.description.nodes, p.state, p.reason) for p in pilots],
        "most_jobs_at_once_squeue": counter.most,
        "all_done": states == [pf.DONE] * len(tasks) and states2 == [pf.DONE] * len(more),
        "job_end_after_last_task_s": tails,
        "ended_while_tasks_waited": ended_early,
        "second_burst_new_pilots": [p.uid for p in second],
        "second_burst_started_s_after_submit": round(
            min(_final_t(t) for t in more) - t2 - a.duration, 1
        )
        if more
        else None,
        "status": status,
    }
    out["done_when"] = bool(
        out["all_done"]
        and counter.most <= 3
        and not ended_early
        and second
        and all(v <= a.idle + 15 for v in tails.values())
    )
    return out


def run_static(a, root, split: list[int]) -> dict:
    """A static choice made by hand: pilots of these node counts, submitted with the burst,
    each canceled (by hand) once every task is done."""
    name = "+".join(map(str, split))
    with pf.Session(path=os.path.join(root, f"static{name}")) as s:
        pmgr = pf.PilotManager(s)
        t0 = time.time()
        pilots = pmgr.submit_pilots(
            [
                pf.PilotDescription(resource="slurm", nodes=n, cores_per_node=CORES, runtime="1h")
                for n in split
            ]
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilots)
        tasks = tmgr.submit_tasks(burst(a.small, a.big, a.duration))
        states = tmgr.wait_tasks(timeout=3600)
        for p in pilots:
            p.cancel()  # by hand, as soon as all is done
        for p in pilots:
            p.wait(timeout=60)
    last = max(_final_t(t) for t in tasks)
    alloc = _allocated(pilots)
    return {
        "split": split,
        "makespan_s": round(last - t0, 1),
        "allocated_core_s": round(alloc),
        "busy_core_s": round(_busy(tasks)),
        "idle_core_s": round(alloc - _busy(tasks)),
        "jobs": len(split),
        "all_done": states == [pf.DONE] * len(tasks),
    }


def run_per_task(a, root) -> dict:
    d = os.path.join(root, "per_task")
    os.makedirs(d, exist_ok=True)
    body = (
        '#!/bin/sh\ndate +%s.%N > "{d}/{tag}.$SLURM_ARRAY_TASK_ID.start"\nsleep {dur:g}\n'
        'date +%s.%N > "{d}/{tag}.$SLURM_ARRAY_TASK_ID.end"\n'
    )
    arrays = []
    t0 = time.time()
    for tag, n, cores, extra in (
        ("small", a.small, 1, ["-n", "1", "-c", "1"]),
        ("big", a.big, 2 * CORES, ["-N", "2", "--ntasks-per-node=1", "-c", str(CORES)]),
    ):
        if not n:
            continue
        script = os.path.join(d, f"{tag}.sh")
        with open(script, "w") as f:
            f.write(body.format(d=d, tag=tag, dur=a.duration))
        r = subprocess.run(
            [
                "sbatch",
                "--parsable",
                f"--array=0-{n - 1}",
                "-o",
                "/dev/null",
                "-t",
                "10",
                *extra,
                script,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        arrays.append((r.stdout.strip().split(";")[0], tag, cores))
    ours = {j for j, _, _ in arrays}
    counter = JobCounter(lambda: ours, fmt="%F")
    while True:
        r = subprocess.run(["squeue", "-h", "-r", "-o", "%F"], capture_output=True, text=True)
        if not set(r.stdout.split()) & ours:
            break
        time.sleep(2)
    counter.stop()
    alloc = busy = 0.0
    last, done = t0, 0
    for _, tag, cores in arrays:
        for f in os.listdir(d):
            if f.startswith(tag + ".") and f.endswith(".end"):
                end = float(open(os.path.join(d, f)).read())
                start = float(open(os.path.join(d, f[:-4] + ".start")).read())
                done += 1
                last = max(last, end)
                alloc += (end - start) * cores
                busy += a.duration * cores
    return {
        "makespan_s": round(last - t0, 1),
        "allocated_core_s": round(alloc),
        "busy_core_s": round(busy),
        "idle_core_s": round(alloc - busy),
        "jobs": a.small + a.big,
        "most_jobs_at_once_squeue": counter.most,
        "all_done": done == a.small + a.big,
        "note": "allocated = each job's script run (Slurm's start-up before it not counted)",
    }


def run_model(a) -> dict:
    tasks = [SimTask(f"s{i}", duration=a.duration) for i in range(a.small)] + [
        SimTask(f"b{i}", ranks=2, cores_per_rank=CORES, duration=a.duration) for i in range(a.big)
    ]
    out = {}
    for name, lim in (
        (
            "autoalloc",
            Limits(
                max_pilots=3, nodes=2, max_nodes=NODES, cores_per_node=CORES, idle_timeout=a.idle
            ),
        ),
        ("static", Limits(max_pilots=1, nodes=NODES, cores_per_node=CORES, idle_timeout=0.0)),
        ("static2+2", Limits(max_pilots=2, nodes=2, cores_per_node=CORES, idle_timeout=0.0)),
    ):
        r = simulate(tasks, lim, Cluster(nodes=NODES, cores_per_node=CORES, queue_wait=1.0))
        out[name] = {
            "makespan_s": r.makespan,
            "allocated_core_s": round(r.allocated_core_s),
            "busy_core_s": round(r.busy_core_s),
            "idle_core_s": round(r.idle_core_s),
            "jobs": len(r.jobs),
            "most_jobs": r.max_jobs,
            "done": r.done,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=600)
    ap.add_argument("--big", type=int, default=20)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--second-gap", type=float, default=120.0)
    ap.add_argument("--only", default="model,autoalloc,static,per_task")
    ap.add_argument(
        "--splits", default="4,2+2", help="the static choices (nodes per pilot), e.g. 4,2+2,1+1+1+1"
    )
    ap.add_argument("--out", default="bench/results/autoalloc.json")
    a = ap.parse_args()
    os.environ.setdefault("PILOTFISH_BATCH_POLL_S", "1")
    root = tempfile.mkdtemp(prefix="bench_autoalloc.")
    results: dict = {"args": vars(a)}
    for way in a.only.split(","):
        t = time.time()
        if way == "model":
            results[way] = run_model(a)
        elif way == "static":
            for split in a.splits.split(","):
                nodes = [int(n) for n in split.split("+")]
                key = f"static{split}"
                results[key] = run_static(a, root, nodes)
                print(f"{key}: {json.dumps(results[key])}", flush=True)
            continue
        else:
            results[way] = {
                "autoalloc": run_autoalloc,
                "per_task": run_per_task,
            }[way](a, root)
        print(f"{way} ({time.time() - t:.0f} s): {json.dumps(results[way])}", flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    print(
        f"{'way':<10} {'makespan s':>11} {'allocated core-s':>17} {'idle core-s':>12} {'jobs':>5}"
    )
    statics = [k for k in results if k.startswith("static")]
    for way in ("autoalloc", *statics, "per_task"):
        r = results.get(way)
        if r:
            print(
                f"{way:<10} {r['makespan_s']:>11} {r['allocated_core_s']:>17} "
                f"{r['idle_core_s']:>12} {r['jobs']:>5}"
            )
    for way, r in results.get("model", {}).items():
        print(
            f"model {way:<4} {r['makespan_s']:>11} {r['allocated_core_s']:>17} "
            f"{r['idle_core_s']:>12} {r['jobs']:>5}"
        )


if __name__ == "__main__":
    sys.exit(main())
