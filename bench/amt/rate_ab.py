"""Message rate and handler overhead of two pilotfish.amt trees, alternated inside one job.

    python bench/amt/rate_ab.py --before /tmp/amt_before/python --after python [--rounds 10]

On a shared 2-core machine, separate jobs of bench/amt/msgrate_amt.py differ by +-20 %
between runs of the same code. Here both versions live in the same two processes: each tree's
`pilotfish/amt` (and the `_mpi.py` it imports) is copied into a temporary folder as the
packages `pf_before` and `pf_after` (_two_trees.py), both runtimes start side by side (each on its own
duplicated communicators), and every round runs each case on one, then the other (ABBA), so
that the machine's load hits both alike. Cases as in msgrate_amt.py (the same element,
_two_trees.rate_element), 64 elements, 2 ranks:

  remote  rank 0's elements each send K small messages from one handler to rank 1
  local   the same to elements on the same rank: send + dispatch + instrumented handler
  relay   rank 0's elements each queue K local messages whose handlers each post one small
          message to rank 1 (do batches still gather the posts of many short handlers?)

`--send-ahead S` sets amt.configure(send_ahead=S) in the 'after' tree (e.g. 0: send before
every handler). Prints, per case, the median and best over the rounds for each tree and the ratio of medians
(after/before) -- and, per round, the after/before ratio's median, the paired comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _two_trees import SIDES, find_mpiexec, rate_element, run_job, staged


def worker(a) -> None:
    sys.path.insert(0, a.worker)
    import importlib

    amts = {side: importlib.import_module(f"pf_{side}.amt") for side in SIDES}
    comm = amts["before"].mpi().COMM_WORLD
    r = comm.Get_rank()
    n, k = 64, a.k
    half = n // 2
    colls = {}
    for side, amt in amts.items():
        amt.configure(idle="spin")
        if side == "after" and a.send_ahead is not None:
            amt.configure(send_ahead=a.send_ahead)
        colls[side] = amt.Collection(rate_element(amt), n)

    def case(side, what):
        amt, coll = amts[side], colls[side]
        comm.Barrier()
        t0 = time.perf_counter()
        with amt.epoch():
            if what == "local":
                for i in coll.local_indices():
                    partner = i + 1 if (i + 1) % half else i + 1 - half
                    coll[i].burst(partner, k)
            elif r == 0:
                for i in coll.local_indices():
                    if what == "remote":
                        coll[i].burst(i + half, k)
                    else:
                        coll[i].relay_burst(i + half, k)
        comm.Barrier()
        return half * k / (time.perf_counter() - t0)

    cases = ("remote", "local", "relay")
    rates = {(side, c): [] for side in SIDES for c in cases}
    for rnd in range(a.rounds):
        order = SIDES if rnd % 2 == 0 else SIDES[::-1]
        for c in cases:
            for side in order:
                rates[side, c].append(case(side, c))
    for side in SIDES:
        total = colls[side].reduce(lambda e: e.n, "sum")
        assert total == a.rounds * half * k * 4, (side, total)
    if r == 0:
        out = {"rounds": a.rounds, "k": k, "trees": {s: amts[s].__file__ for s in SIDES}}
        for c in cases:
            b, f = rates["before", c], rates["after", c]
            out[c] = {"before_median": statistics.median(b), "before_best": max(b),
                      "after_median": statistics.median(f), "after_best": max(f),
                      "ratio_of_medians": statistics.median(f) / statistics.median(b),
                      "paired_ratio_median": statistics.median(x / y for x, y in zip(f, b))}
        print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before")
    ap.add_argument("--after")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--k", type=int, default=2000)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--send-ahead", type=float, default=None,
                    help="amt.configure(send_ahead=) for the 'after' tree only")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    if not (a.before and a.after) or a.rounds < 1:
        ap.error("give --before and --after (python/ folders) and --rounds >= 1")
    load0 = os.getloadavg()[0]
    with staged({"before": a.before, "after": a.after}, "amt_rate_ab_") as tmp:
        argv = [a.mpiexec or find_mpiexec(), "-n", "2", sys.executable, __file__,
                "--worker", str(tmp), "--rounds", str(a.rounds), "--k", str(a.k)]
        if a.send_ahead is not None:
            argv += ["--send-ahead", str(a.send_ahead)]
        res = run_job(argv, timeout=900)
    ahead = "" if a.send_ahead is None else f" --send-ahead {a.send_ahead:g}"
    print(f"<!-- python bench/amt/rate_ab.py --rounds {a.rounds} --k {a.k}{ahead}; "
          f"{os.cpu_count()} "
          f"cores, load average {load0:.2f} -> {os.getloadavg()[0]:.2f} -->")
    print("| case | before msgs/s: median (best) | after msgs/s: median (best) | "
          "after/before (medians) | after/before (paired rounds, median) |")
    print("|---|---|---|---|---|")
    for c in ("remote", "local", "relay"):
        x = res[c]
        print(f"| {c} | {x['before_median']:,.0f} ({x['before_best']:,.0f}) | "
              f"{x['after_median']:,.0f} ({x['after_best']:,.0f}) | "
              f"{x['ratio_of_medians']:.3f} | {x['paired_ratio_median']:.3f} |")


if __name__ == "__main__":
    main()
