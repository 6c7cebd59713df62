"""The PIC mini-app on two pilotfish.amt trees inside one job: before vs after, paired.

    python bench/amt/pic_ab.py --before /tmp/amt_before/python --after python \\
        [--factors 4,8] [--jobs 3] [--strategies greedy,greedy_refine,tempered] [--lb-every 1]

Separate `bench_amt.py pic` jobs on a shared 2-core machine differ by more than a runtime
change can: the same code's batch medians spread over +-6 %. Here each job holds both
runtimes: each tree's `pilotfish/amt` (and the `_mpi.py` it imports) is copied into a
temporary folder as `pf_before` / `pf_after` (_two_trees.py), examples/pic/pic.py is loaded twice, once against
each (its `pilotfish.amt` resolved to that copy while it loads), and every iteration moves the
MPI baseline and each amt version of both trees in turn (order alternating per iteration),
then closes a phase in each runtime and rebalances each LB version in its own runtime. So
every amt version of both trees sees the same machine, iteration by iteration, against one MPI
baseline. pic.py's own options otherwise (2 ranks, 100,000 particles per rank, 20
iterations, the first 2 not counted, clock `cpu`, idle `spin`, model `last`).

Prints per factor and version: the speedup over the MPI baseline (median iteration time
ratio) of each tree, median (min-max) over the jobs, the post-LB imbalance, and the paired
ratio after/before of the same job's median iteration times.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path

from _two_trees import REPO, SIDES, find_mpiexec, run_job, staged


def load_pic(side: str, pkgs: str):
    """examples/pic/pic.py as module pic_<side>, with pilotfish.amt = pf_<side>.amt."""
    sys.path.insert(0, pkgs)
    pf = importlib.import_module(f"pf_{side}")
    amt = importlib.import_module(f"pf_{side}.amt")
    loc = importlib.import_module(f"pf_{side}.amt._location")
    saved = {k: sys.modules.get(k) for k in ("pilotfish", "pilotfish.amt",
                                             "pilotfish.amt._location")}
    sys.modules.update({"pilotfish": pf, "pilotfish.amt": amt, "pilotfish.amt._location": loc})
    pf.amt = amt
    try:
        spec = importlib.util.spec_from_file_location(f"pic_{side}",
                                                      REPO / "examples/pic/pic.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"pic_{side}"] = mod
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


def worker(a) -> None:
    pics = {side: load_pic(side, a.worker) for side in SIDES}
    amts = {side: pics[side].amt for side in SIDES}
    for amt in amts.values():
        amt.configure(clock="cpu", idle="spin", measure=True)
    comm = amts["before"].mpi().COMM_WORLD
    names = ["amt"] + [f"amt+{s}" for s in a.strategies.split(",") if s]
    out = []
    for factor in (int(f) for f in a.factors.split(",")):
        p = pics["before"].Params(particles=100_000 * comm.Get_size())
        ids, data = pics["before"].initial_particles(p)
        vs = [("mpi", pics["before"].MpiVersion(factor, p, ids, data))]
        for name in names:
            for side in SIDES:
                vs.append((side, pics[side].AmtVersion(name, factor, p, ids, data, "last",
                                                       a.lb_every)))
        for amt in amts.values():
            amt.phase()
        for it in range(a.iters):
            for _, v in (vs if it % 2 == 0 else vs[::-1]):
                v.move(it)
            ph = {side: amts[side].phase() for side in SIDES}
            for side, v in vs:
                v.after_phase(ph.get(side), it, a.iters)
        for side, v in vs:
            res = {"version": v.name, "factor": factor, "iter_s": v.times,
                   "imbalance": v.imb, "lb_s": v.lb_s, "lb": v.lb, "micro": v.micro}
            s = pics["before"].summarise(res, a.warmup)
            out.append({"side": side, "version": v.name, "factor": factor,
                        "median_iter_s": s["median_iter_s"],
                        "post_lb_imbalance": s["post_lb_imbalance"]})
            v.close()
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before")
    ap.add_argument("--after")
    ap.add_argument("--factors", default="4,8")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--strategies", default="greedy,greedy_refine,tempered")
    ap.add_argument("--lb-every", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--json", default=None, help="write every job's rows here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    if not (a.before and a.after) or a.jobs < 1:
        ap.error("give --before and --after (python/ folders) and --jobs >= 1")
    jobs = []
    loads = [os.getloadavg()[0]]
    with staged({"before": a.before, "after": a.after}, "amt_pic_ab_") as tmp:
        for j in range(a.jobs):
            argv = [a.mpiexec or find_mpiexec(), "-n", "2", sys.executable, __file__,
                    "--worker", str(tmp), "--factors", a.factors, "--strategies",
                    a.strategies, "--lb-every", str(a.lb_every), "--iters", str(a.iters),
                    "--warmup", str(a.warmup)]
            jobs.append(run_job(argv, timeout=1200))
            loads.append(os.getloadavg()[0])
            print(f"  job {j + 1}/{a.jobs} done, load {loads[-1]:.2f}", file=sys.stderr,
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(jobs, indent=1))
    print(f"<!-- python bench/amt/pic_ab.py --factors {a.factors} --jobs {a.jobs} "
          f"--strategies {a.strategies} --lb-every {a.lb_every}; {os.cpu_count()} cores, load "
          f"average {min(loads):.2f}-{max(loads):.2f} -->")
    print("| blocks/rank | version | before: speedup over MPI, median (min-max) [post-LB] | "
          "after: speedup over MPI, median (min-max) [post-LB] | after/before iteration "
          "time, paired, median (min-max) | MPI ms, median |")
    print("|---|---|---|---|---|---|")
    factors = sorted({r["factor"] for r in jobs[0]})
    for f in factors:
        versions = [r["version"] for r in jobs[0] if r["side"] == "before" and r["factor"] == f]
        mpi_ms = [next(r["median_iter_s"] for r in job if r["factor"] == f and
                       r["side"] == "mpi") for job in jobs]
        for v in versions:
            cells, times = [], {}
            for side in SIDES:
                sp, post, t = [], [], []
                for job, m in zip(jobs, mpi_ms):
                    r = next(r for r in job if r["factor"] == f and r["side"] == side
                             and r["version"] == v)
                    sp.append(m / r["median_iter_s"])
                    t.append(r["median_iter_s"])
                    if r["post_lb_imbalance"] is not None:
                        post.append(r["post_lb_imbalance"])
                times[side] = t
                cell = f"{statistics.median(sp):.2f}x ({min(sp):.2f}-{max(sp):.2f})"
                if post:
                    cell += f" [{statistics.median(post):.3f}]"
                cells.append(cell)
            ratio = [x / y for x, y in zip(times["after"], times["before"])]
            print(f"| {f} | {v} | {cells[0]} | {cells[1]} | {statistics.median(ratio):.3f} "
                  f"({min(ratio):.3f}-{max(ratio):.3f}) | {statistics.median(mpi_ms) * 1e3:.0f} |")


if __name__ == "__main__":
    main()
