"""Hierarchical (tree) load balancing from load summaries.

The ranks are the leaves of a tree of fan-out `fanout` (ranks [0,f) form a group, groups of
groups form the next level, ...). Only per-rank load totals are exchanged (one float per rank),
never object lists:

1. plan (identical on every rank, no communication): bottom-up over the tree levels, inside
   each group, the ranks above the group's mean send their excess to the ranks below it
   (matched in rank order). A lower level has already brought every rank of a child sub-tree
   to that child's mean, so all ranks of a child are above the group's mean or all below:
   load only crosses between children, and afterwards every rank of the group is at its
   mean. (Matching whole children and splitting a child's flow evenly over its ranks instead
   mis-pairs ranks when children differ in size -- the last, partial sub-tree -- and left
   2x imbalances.) Flows through a
   rank (received at one level, sent on at a higher one) are then short-cut so that load only
   moves from the rank that holds it now to its final rank: origin -> destination amounts.
2. select (local): each rank serves its outgoing amounts with its own objects, heaviest first,
   taking an object when it brings the remaining amount closer to zero.
3. the realised rank loads (one Allreduce of P deltas) start the next round, until max/mean
   <= tolerance or `rounds` rounds. An object moves at most once.

Decisions are local to sub-trees in the sense of Charm++'s HybridLB (summaries up, decisions
down); the summaries here are allgathered (P floats per rank) rather than reduced along the
tree, which is fine up to thousands of ranks.
"""

from __future__ import annotations

import numpy as np

from .base import Strategy


def plan_flows(loads: list[float], fanout: int) -> dict[tuple[int, int], float]:
    """origin -> destination amounts that equalise `loads` over the tree (see module doc)."""
    P = len(loads)
    L = [float(x) for x in loads]
    comp: list[dict[int, float]] = [{r: L[r]} if L[r] > 0 else {} for r in range(P)]
    eps = 1e-12 * (sum(L) + 1.0)

    def move(s: int, d: int, amount: float):
        # what s sends: its own load first, then what it received (short-cut to the origin)
        left = amount
        src = comp[s]
        for o in sorted(src, key=lambda o: (o != s, o)):
            if left <= eps:
                break
            take = min(src[o], left)
            src[o] -= take
            if src[o] <= eps:
                del src[o]
            comp[d][o] = comp[d].get(o, 0.0) + take
            left -= take
        L[s] -= amount
        L[d] += amount

    g = 1
    while g < P:
        G = g * fanout
        for start in range(0, P, G):
            ranks = range(start, min(start + G, P))
            if len(ranks) <= g:  # a single child: balanced by the level below
                continue
            mean = sum(L[r] for r in ranks) / len(ranks)
            pos = [[L[r] - mean, r] for r in ranks if L[r] - mean > eps]
            neg = [[mean - L[r], r] for r in ranks if mean - L[r] > eps]
            pi = ni = 0
            while pi < len(pos) and ni < len(neg):
                a = min(pos[pi][0], neg[ni][0])
                move(int(pos[pi][1]), int(neg[ni][1]), a)
                pos[pi][0] -= a
                neg[ni][0] -= a
                if pos[pi][0] <= eps:
                    pi += 1
                if neg[ni][0] <= eps:
                    ni += 1
        g = G
    flows: dict[tuple[int, int], float] = {}
    for d in range(P):
        for o, amount in comp[d].items():
            if o != d and amount > eps:
                flows[(o, d)] = amount
    return flows


class HierarchicalStrategy(Strategy):
    name = "hierarchical"
    options = {"fanout": 4, "rounds": 4, "tolerance": 1.02}

    def run(self, comm, ids, loads, homes):
        rank, size = comm.Get_rank(), comm.Get_size()
        fanout = max(2, int(self.opts["fanout"]))
        dest = np.full(len(loads), rank, dtype=np.int64)
        available = sorted(range(len(loads)), key=lambda k: -loads[k])  # heaviest first
        my_load = float(loads.sum())
        rl = np.array(comm.allgather(my_load), dtype=np.float64)
        rounds = 0
        for _ in range(int(self.opts["rounds"])):
            mean = rl.mean() if size else 0.0
            if size < 2 or mean <= 0 or rl.max() <= self.opts["tolerance"] * mean:
                break
            rounds += 1
            flows = plan_flows(rl.tolist(), fanout)
            out = sorted(((d, a) for (o, d), a in flows.items() if o == rank), key=lambda x: -x[1])
            delta = np.zeros(size)
            for d, amount in out:
                left = amount
                keep = []
                for k in available:
                    x = float(loads[k])
                    if left > 0 and 0 < x < 2 * left:  # a weightless object changes nothing
                        dest[k] = d
                        left -= x
                        delta[d] += x
                        delta[rank] -= x
                    else:
                        keep.append(k)
                available = keep
            total = np.zeros(size)
            comm.Allreduce(delta, total)
            rl = rl + total
        self.details = {"rounds": rounds}
        return dest
