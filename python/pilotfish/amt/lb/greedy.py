"""Centralised greedy (Charm++ GreedyLB, vt GreedyLB): objects in decreasing load, each to the
rank with the least load so far (a min-heap of rank loads). O(n log n + n log P) on rank 0.
It ignores where objects are, so about (P-1)/P of them migrate; see greedy_refine. Ties in
load go to the rank with fewer objects (else weightless objects -- a rebalance before any
phase -- would all pile onto one rank)."""

from __future__ import annotations

import heapq

import numpy as np

from .base import CentralStrategy


class GreedyStrategy(CentralStrategy):
    name = "greedy"

    def assign(self, loads, owner, size):
        if not loads.sum() > 0:
            return owner.copy()  # nothing measured yet: nothing to balance
        order = np.argsort(-loads, kind="stable")
        heap = [(0.0, 0, r) for r in range(size)]
        new = owner.copy()
        pop, push = heapq.heappop, heapq.heappush
        lv = loads.tolist()
        for k in order.tolist():
            load, count, r = pop(heap)
            new[k] = r
            push(heap, (load + lv[k], count + 1, r))
        return new
