"""Cost of load balancing vs number of elements (pilotfish.amt). Prints JSON lines.

For each element count, every element carries 256 B of numpy state and a synthetic load
(lognormal, x4 on rank 0's home elements: max/mean ~1.6 on 2 ranks), injected through the
instrumentation (amt.configure(measure=False)) so every strategy sees the same loads. Each
strategy runs from the same initial placement (`home` resets between them); reported: the
strategy's decision time (max over ranks), the migration time, migrations and migrated bytes,
imbalance before and after (predicted, which equals the next phase's for synthetic loads).

    mpiexec -n 2 python bench/amt/lbcost.py --elements 1000,10000,100000
"""

import argparse
import json
import time

import numpy as np

from pilotfish import amt


class E(amt.Element):
    def __init__(self, weights):
        self.state = np.full(32, float(self.index))
        self.w = float(weights[self.index])

    def load(self):
        self.add_load(self.w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", default="1000,10000,100000")
    ap.add_argument("--strategies", default="greedy,greedy_refine,hierarchical,tempered")
    ap.add_argument("--tempered-trials", type=int, default=1)
    ap.add_argument("--tempered-iterations", type=int, default=4)
    a = ap.parse_args()
    amt.configure(measure=False)
    r, p = amt.rank(), amt.size()
    for n in [int(x) for x in a.elements.split(",")]:
        rng = np.random.default_rng(n)
        weights = rng.lognormal(0.0, 0.5, n)
        weights[: n // p] *= 4.0                        # rank 0's home elements
        t0 = time.perf_counter()
        coll = amt.Collection(E, n, args=(weights,), name=f"lbcost-{n}")
        t_create = time.perf_counter() - t0
        with amt.epoch():
            for i in coll.local_indices():
                coll[i].load()
        ph = amt.phase()
        for name in a.strategies.split(","):
            opts = {}
            if name == "tempered":
                opts = {"trials": a.tempered_trials, "iterations": a.tempered_iterations}
            t0 = time.perf_counter()
            st = amt.rebalance(name, **opts)
            wall = time.perf_counter() - t0
            if r == 0:
                print(json.dumps({
                    "elements": n, "ranks": p, "strategy": name,
                    "imbalance_before": round(st.imbalance_before, 4),
                    "imbalance_after": round(st.imbalance_after, 4),
                    "strategy_s": st.strategy_seconds, "migrate_s": st.migrate_seconds,
                    "rebalance_wall_s": wall, "migrations": st.migrations,
                    "migrated_bytes": st.migrated_bytes, "create_s": t_create,
                    "phase_imbalance": round(ph.imbalance, 4)}), flush=True)
            amt.rebalance("home")
        coll.destroy()


amt.run(main)
