"""Handler overhead of two pilotfish.amt trees, alternated inside one process.

    python bench/amt/overhead_ab.py --before /tmp/amt_before/python --after python \\
        [--rounds 40] [--ranks 1] [--clock wall|cpu]

The cost of a same-rank message (send + dispatch + instrumented handler, no MPI) in
microseconds: 64 elements, each sending K small messages to a neighbour on its own rank, both
trees' runtimes side by side in the same process(es) (_two_trees.py), ABBA rounds. With one
rank no other process of the benchmark competes for a core, so on a shared machine this is
quieter than rate_ab.py's 'local' case; `--clock cpu` times the process's CPU time instead of
the wall clock (blind to being descheduled; with --ranks 2 it includes spinning while the other
rank finishes). Prints per tree the median and best us per message, and the median (quartiles)
over the rounds of after/before -- below 1: the after tree is cheaper.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time

from _two_trees import SIDES, find_mpiexec, rate_element, run_job, staged


def worker(a) -> None:
    sys.path.insert(0, a.worker)
    amts = {side: importlib.import_module(f"pf_{side}.amt") for side in SIDES}
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    n, k = 64, a.k
    colls = {}
    for side, amt in amts.items():
        amt.configure(idle="spin")
        colls[side] = amt.Collection(rate_element(amt), n)
    size = amts["before"].size()
    per_rank = n // size

    def case(side):
        amt, coll = amts[side], colls[side]
        t0 = clock()
        with amt.epoch():
            for i in coll.local_indices():
                base = i - i % per_rank              # a neighbour on the same rank
                coll[i].burst(base + (i + 1 - base) % per_rank, k)
        return (clock() - t0) / (per_rank * k) * 1e6

    us = {side: [] for side in SIDES}
    for rnd in range(a.rounds):
        for side in (SIDES if rnd % 2 == 0 else SIDES[::-1]):
            us[side].append(case(side))
    ratios = [x / y for x, y in zip(us["after"], us["before"])]
    if amts["before"].rank() == 0:
        print(json.dumps({"ranks": size, "clock": a.clock, "rounds": a.rounds, "k": k,
                          **{f"{s}_us_median": statistics.median(us[s]) for s in SIDES},
                          **{f"{s}_us_best": min(us[s]) for s in SIDES},
                          "after_over_before": statistics.median(ratios),
                          "quartiles": statistics.quantiles(ratios, n=4)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before")
    ap.add_argument("--after")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    if not (a.before and a.after) or a.rounds < 1 or a.ranks < 1 or 64 % a.ranks:
        ap.error("give --before and --after (python/ folders), --rounds >= 1, --ranks "
                 "dividing 64")
    with staged({"before": a.before, "after": a.after}, "amt_overhead_ab_") as tmp:
        res = run_job([a.mpiexec or find_mpiexec(), "-n", str(a.ranks), sys.executable,
                       __file__, "--worker", str(tmp), "--rounds", str(a.rounds), "--k",
                       str(a.k), "--clock", a.clock], timeout=900)
    q = res["quartiles"]
    print(f"{res['ranks']} rank(s), clock {res['clock']}, {res['rounds']} rounds x "
          f"{64 // res['ranks'] * res['k']:,} messages per rank: us per local message, "
          f"before {res['before_us_median']:.2f} (best {res['before_us_best']:.2f}), after "
          f"{res['after_us_median']:.2f} (best {res['after_us_best']:.2f}); after/before "
          f"{res['after_over_before']:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})")


if __name__ == "__main__":
    main()
