"""The same message-rate cases with charm4py (PyPI), for comparison. Prints one JSON line.

    python -m charmrun.start +p2 bench/amt/msgrate_charm.py [--k 2000]

Chares 0..n/2-1 live on PE 0 and n/2..n-1 on PE 1 (a block ArrayMap). A case ends when every
chare has contributed to an empty reduction whose target is a Future (senders after sending,
receivers after receiving all their messages)."""

import json
import sys
import time

import numpy as np
from charm4py import Array, ArrayMap, Chare, Future, Group, charm


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


N = arg("--elements", 64)
K = arg("--k", 2000)
REPS = arg("--reps", 3)


class BlockMap(ArrayMap):
    def procNum(self, index):
        return index[0] * charm.numPes() // N


class W(Chare):
    def __init__(self):
        self.n = 0
        self.expect = 0
        self.done = None

    def start(self, case, done):
        self.done = done
        i = self.thisIndex[0]
        half = N // 2
        self.n = 0
        if case == "remote":
            if i < half:
                p = self.thisProxy[i + half]
                for j in range(K):
                    p.hit(j)
                self.contribute(None, None, done)
            else:
                self.expect = K
        elif case == "local":
            partner = i + 1 if (i + 1) % half else i + 1 - half
            p = self.thisProxy[partner]
            self.expect = K
            for j in range(K):
                p.hit(j)
        elif case == "bulk":
            if i < half:
                self.contribute(None, None, done)
            else:
                self.expect = 100 // half + (1 if (i - half) < 100 % half else 0)
                if self.expect == 0:
                    self.contribute(None, None, done)

    def hit(self, j):
        self.n += 1
        if self.n == self.expect:
            self.contribute(None, None, self.done)

    def take(self, arr):
        self.n += 1
        if self.n == self.expect:
            self.contribute(None, None, self.done)


def main(args):
    assert charm.numPes() == 2, "run with +p2"
    arr = Array(W, N, map=Group(BlockMap))
    charm.awaitCreation(arr)
    half = N // 2
    big = [np.ones(1 << 17) for _ in range(100)]
    res = {"elements": N, "k": K, "pes": charm.numPes()}
    for case in ("remote", "local", "bulk"):
        best = None
        for _ in range(REPS):
            f = Future()
            t0 = time.perf_counter()
            arr.start(case, f)
            if case == "bulk":
                for j, a in enumerate(big):
                    arr[half + j % half].take(a)
            f.get()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        if case == "remote":
            res["remote_msgs_per_s"] = half * K / best
        elif case == "local":
            res["local_msgs_per_s"] = N * K / best / charm.numPes()
            res["local_us_per_handler"] = best / (N * K / charm.numPes()) * 1e6
        else:
            res["bulk_GiB_per_s"] = 100 / 1024 / best
    print("RESULT " + json.dumps(res), flush=True)
    charm.exit()


charm.start(main)
