"""Piecewise-constant functions of time built from weighted intervals, vectorized.

Everything over time here (cores busy, tasks running) is a sum of weighted intervals
[start, end). Sorting the interval edges once and taking a cumulative sum of the deltas gives
the exact step function; its running integral is piecewise linear, so averages over any bins
are exact (np.interp on the integral) -- no sampling, no Python loop per interval.

Where only bin averages or the peak are needed (plots, concurrency peaks of 1M tasks),
`boundary_bin_means` and `interval_peak` get them without building the step function: the
former from weighted histograms of the interval edges (no sort at all), the latter from the
sorted starts and ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _edge_cumulatives(x: np.ndarray, w: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """G(e_k) = sum over points x_i < e_k of w_i * (e_k - x_i), for uniform edges; points
    are clipped to [e_0, e_N] (only the overlap of intervals with the edges' span counts).
    One index pass and two bincounts; no sort."""
    lo, hi = float(edges[0]), float(edges[-1])
    nbins = len(edges) - 1
    xr = np.clip(x, lo, hi) - lo
    idx = np.minimum((xr * (nbins / (hi - lo))).astype(np.intp), nbins - 1)
    W = np.bincount(idx, weights=w, minlength=nbins)
    WS = np.bincount(idx, weights=w * xr, minlength=nbins)
    W = np.concatenate([[0.0], np.cumsum(W)])
    WS = np.concatenate([[0.0], np.cumsum(WS)])
    # a point on an edge may land in the bin below it: it adds (e - x) = 0 there anyway
    return (edges - lo) * W - WS


def boundary_bin_means(bounds: np.ndarray, weight, edges: np.ndarray) -> np.ndarray:
    """Bin means of consecutive phases given per-row boundaries.

    bounds: (n, m) non-decreasing times per row; phase j of row i is
    [bounds[i, j], bounds[i, j+1]) with weight[i]. Returns (m-1, n_bins): the mean of
    sum(weight * 1[in phase j]) over each bin [edges[k], edges[k+1]) (edges uniform).

    The integral up to e of a phase [s, t) is w * (max(0, e - s) - max(0, e - t)), so each
    boundary column is summarized once (weighted histograms of position and moment) and
    phase j is column j minus column j+1 -- exact up to float rounding.
    """
    bounds = np.asarray(bounds, dtype=np.float64)
    n, m = bounds.shape
    weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), (n,))
    ok = np.all(np.isfinite(bounds), axis=1) & (weight != 0)
    b, w = bounds[ok], weight[ok]
    widths = np.diff(edges)
    if not len(b):
        return np.zeros((m - 1, len(widths)))
    G = [_edge_cumulatives(b[:, j], w, edges) for j in range(m)]
    return np.stack([np.diff(G[j] - G[j + 1]) / widths for j in range(m - 1)])


def interval_bin_means(start, end, weight, edges: np.ndarray) -> np.ndarray:
    """Mean over each bin [edges[k], edges[k+1]) of sum(weight * 1[start <= t < end]);
    intervals with end <= start or a non-finite edge count zero. Edges uniform."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    b = np.stack([start, np.maximum(end, start)], axis=1)
    return boundary_bin_means(b, weight, edges)[0]


def interval_peak(start, end) -> int:
    """Maximum number of intervals [start, end) open at once (unit weights)."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    ok = np.isfinite(start) & np.isfinite(end) & (end > start)
    if not ok.any():
        return 0
    s = np.sort(start[ok])
    e = np.sort(end[ok])
    # open just after the j-th start: starts so far minus ends at or before it
    open_ = np.arange(1, len(s) + 1) - np.searchsorted(e, s, side="right")
    return int(open_.max())


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
        order = np.argsort(t)  # ties need no order: levels are taken after the last of them
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
