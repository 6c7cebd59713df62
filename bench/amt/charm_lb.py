"""charm4py's GreedyLB on the same kind of synthetic imbalance as bench/amt/lb_quality.py.
Prints one RESULT JSON line.

    python -m charmrun.start +p2 bench/amt/charm_lb.py +balancer GreedyLB +LBObjOnly

Each chare busy-waits (spins) for its synthetic load x UNIT seconds per iteration, since
Charm++ balances on measured time. After 2 iterations AtSync() runs the balancer; then one
more iteration. Reported: the imbalance (max/mean PE load) of the *synthetic* loads before
and after (so the two runtimes are judged on the same numbers), migrations, the LB step's
wall time and the measured per-iteration wall times."""

import json
import sys
import time

import numpy as np
from charm4py import Array, ArrayMap, Chare, Future, Group, Reducer, charm


def arg(name, default, cast=int):
    return cast(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


N = arg("--elements", 64)
UNIT = arg("--unit", 0.0005, float)          # seconds of spinning per unit of load
SEED = arg("--seed", 7)


def weights():
    rng = np.random.default_rng(SEED)
    w = rng.lognormal(0.0, 0.5, N)
    w[: N // 2] *= 4.0
    return w


class BlockMap(ArrayMap):
    def procNum(self, index):
        return index[0] * charm.numPes() // N


class W(Chare):
    def __init__(self):
        self.w = float(weights()[self.thisIndex[0]])
        self.done = None

    def work(self, done, sync):
        t_end = time.perf_counter() + self.w * UNIT
        while time.perf_counter() < t_end:
            pass
        self.done = done
        if sync:
            self.AtSync()
        else:
            self.contribute((charm.myPe(), self.w), Reducer.gather, done)

    def resumeFromSync(self):
        self.contribute((charm.myPe(), self.w), Reducer.gather, self.done)


def imbalance(rows, pes):
    loads = [0.0] * pes
    for pe, w in rows:
        loads[pe] += w
    return max(loads) / (sum(loads) / pes), loads


def main(args):
    pes = charm.numPes()
    arr = Array(W, N, map=Group(BlockMap), useAtSync=True)
    charm.awaitCreation(arr)
    iters, placement = [], []
    for it in range(4):
        f = Future()
        t0 = time.perf_counter()
        arr.work(f, it == 1)          # AtSync after iteration 1 -> the balancer runs
        rows = f.get()
        iters.append(time.perf_counter() - t0)
        placement.append(rows)
    before, lb = imbalance(placement[0], pes)
    after, la = imbalance(placement[-1], pes)
    moved = sum(1 for a, b in zip(placement[0], placement[-1]) if a[0] != b[0])
    print("RESULT " + json.dumps({
        "elements": N, "pes": pes, "imbalance_before": before, "imbalance_after": after,
        "migrations": moved, "iter_s": iters, "loads_before": lb, "loads_after": la}),
        flush=True)
    charm.exit()


charm.start(main)
