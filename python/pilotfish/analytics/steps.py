"""Piecewise-constant functions of time built from weighted intervals, vectorized.

Everything over time here (cores busy, tasks running) is a sum of weighted intervals
[start, end). Sorting the interval edges once and taking a cumulative sum of the deltas gives
the exact step function; its running integral is piecewise linear, so averages over any bins
are exact (np.interp on the integral) -- no sampling, no Python loop per interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Step:
    """f(t) = values[j] for times[j] <= t < times[j+1]; 0 before times[0] and from times[-1].

    times are strictly increasing; values[-1] is the value after the last time (0 for sums
    of finite intervals).
    """
    times: np.ndarray
    values: np.ndarray

    @classmethod
    def from_intervals(cls, start, end, weight=1.0) -> "Step":
        """Sum of weight * 1[start <= t < end]; empty or reversed intervals count zero."""
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), start.shape)
        ok = np.isfinite(start) & np.isfinite(end) & (end > start) & (weight != 0)
        t = np.concatenate([start[ok], end[ok]])
        d = np.concatenate([weight[ok], -weight[ok]])
        return cls.from_deltas(t, d)

    @classmethod
    def from_deltas(cls, t: np.ndarray, delta: np.ndarray) -> "Step":
        if len(t) == 0:
            return cls(np.zeros(0), np.zeros(0))
        order = np.argsort(t, kind="stable")
        t = t[order]
        level = np.cumsum(delta[order])
        # several edges at one time: keep the level after the last of them (no spikes)
        last = np.ones(len(t), bool)
        last[:-1] = t[1:] != t[:-1]
        return cls(t[last], level[last])

    @classmethod
    def constant(cls, t0: float, t1: float, value: float) -> "Step":
        if not (t1 > t0) or value == 0:
            return cls(np.zeros(0), np.zeros(0))
        return cls(np.array([t0, t1], float), np.array([value, 0.0]))

    # ---------------------------------------------------------------- evaluation

    def integral(self) -> float:
        if len(self.times) < 2:
            return 0.0
        return float(np.dot(self.values[:-1], np.diff(self.times)))

    def cumulative(self, at: np.ndarray) -> np.ndarray:
        """The integral of f from -inf to each point of `at`."""
        if len(self.times) == 0:
            return np.zeros(len(at))
        run = np.concatenate([[0.0], np.cumsum(self.values[:-1] * np.diff(self.times))])
        # F is linear between breakpoints and constant outside (f = 0 there)
        return np.interp(at, self.times, run)

    def bin_means(self, edges: np.ndarray) -> np.ndarray:
        """Mean of f over each bin [edges[k], edges[k+1])."""
        return np.diff(self.cumulative(edges)) / np.diff(edges)

    def at(self, t: np.ndarray) -> np.ndarray:
        """f at the given times (right-continuous)."""
        if len(self.times) == 0:
            return np.zeros(len(t))
        j = np.searchsorted(self.times, t, side="right") - 1
        return np.where(j >= 0, self.values[np.maximum(j, 0)], 0.0)

    def maximum(self) -> float:
        return float(self.values.max()) if len(self.values) else 0.0

    def restricted(self, t0: float, t1: float) -> "Step":
        """f on [t0, t1), 0 elsewhere."""
        if not (t1 > t0):
            return Step(np.zeros(0), np.zeros(0))
        inside = (self.times > t0) & (self.times < t1)
        times = np.concatenate([[t0], self.times[inside], [t1]])
        values = np.concatenate([self.at(np.array([t0])), self.values[inside], [0.0]])
        return Step(times, values)

    def map_values(self, fn) -> "Step":
        """A Step with the same breakpoints and fn(values) (fn must keep the last value 0)."""
        return Step(self.times, fn(self.values))

    @staticmethod
    def total(steps: list["Step"]) -> "Step":
        """Pointwise sum."""
        steps = [s for s in steps if len(s.times)]
        if not steps:
            return Step(np.zeros(0), np.zeros(0))
        t = np.concatenate([s.times for s in steps])
        d = np.concatenate([np.diff(s.values, prepend=0.0) for s in steps])
        return Step.from_deltas(t, d)
