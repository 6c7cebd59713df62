"""Centralised refinement (in the spirit of Charm++ RefineLB / GreedyRefineLB): start from the
current placement and repeatedly move one object from the most loaded rank (max-heap) to the
least loaded (min-heap), choosing the object whose load best halves their gap (binary search in
the source's sorted loads), while the most loaded rank is above `tolerance` x mean and fewer
than `max_migrations` objects moved. Only objects that must move do: migrations are bounded by
design and by the cap."""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort

import numpy as np

from .base import CentralStrategy


class GreedyRefineStrategy(CentralStrategy):
    name = "greedy_refine"
    options = {"tolerance": 1.02, "max_migrations": None}

    def assign(self, loads, owner, size):
        tol = float(self.opts["tolerance"])
        cap = self.opts["max_migrations"]
        cap = len(loads) if cap is None else int(cap)
        new = owner.copy()
        rl = np.bincount(owner, weights=loads, minlength=size).astype(float).tolist()
        mean = sum(rl) / size if size else 0.0
        target = tol * mean
        lv = loads.tolist()
        # per-rank (load, index) sorted ascending
        objs: list[list[tuple[float, int]]] = [[] for _ in range(size)]
        for k in np.argsort(loads, kind="stable").tolist():
            objs[int(owner[k])].append((lv[k], k))
        stamp = [0] * size
        hmax = [(-rl[r], 0, r) for r in range(size)]
        hmin = [(rl[r], 0, r) for r in range(size)]
        heapq.heapify(hmax)
        heapq.heapify(hmin)

        def top(h, sign):
            while True:
                key, st, r = h[0]
                if st == stamp[r]:
                    return r
                heapq.heappop(h)

        def update(r):
            stamp[r] += 1
            heapq.heappush(hmax, (-rl[r], stamp[r], r))
            heapq.heappush(hmin, (rl[r], stamp[r], r))

        moves = 0
        while moves < cap and size > 1:
            src = top(hmax, -1)
            if rl[src] <= target:
                break
            dst = top(hmin, 1)
            gap = rl[src] - rl[dst]
            want = min(gap / 2.0, rl[src] - mean)
            lst = objs[src]
            i = bisect_right(lst, (want, len(lv)))
            best = None
            for j in (i - 1, i):  # the largest <= want, the smallest > want
                if 0 <= j < len(lst) and 0.0 < lst[j][0] < gap:
                    if best is None or abs(lst[j][0] - want) < abs(lst[best][0] - want):
                        best = j
            if best is None:
                break  # no single move lowers the maximum
            load, k = lst.pop(best)
            insort(objs[dst], (load, k))
            new[k] = dst
            rl[src] -= load
            rl[dst] += load
            update(src)
            update(dst)
            moves += 1
        self.details = {"refine_moves": moves}
        return new
