"""Instrumentation and load models.

The runtime times every handler (time.perf_counter around the call) and adds the time to the
element it ran on, for the current phase. `Element.add_load(x)` adds synthetic load (any unit,
e.g. a model of the work) -- with `amt.configure(measure=False)` only synthetic load counts,
which makes load balancing decisions deterministic (tests, planning). `amt.phase()` closes a
phase: each element's load of that phase is appended to its history (which migrates with it).

Load models predict the next phase's load from the history:
  last        the last phase (naive persistence, as Charm++ and vt default)
  median:N    the median of the last N phases (robust to a noisy phase)
  mean:N      the mean of the last N phases
  linear:N    the least-squares line through the last N phases (N >= 2), one phase on: for
              loads that drift (as DARMA/vt's LinearModel); never below 0
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

HISTORY = 32  # phases kept per element


class LoadModel:
    def __init__(self, spec: str = "last"):
        self.spec = spec
        kind, _, arg = spec.partition(":")
        if kind not in ("last", "median", "mean", "linear"):
            raise ValueError(
                f"unknown load model {spec!r}: use 'last', 'median:N', 'mean:N' or 'linear:N'"
            )
        if kind == "last":
            if arg:
                raise ValueError(f"load model 'last' takes no argument (got {spec!r})")
            self.n = 1
        else:
            least = 2 if kind == "linear" else 1  # a line needs two points
            try:
                self.n = int(arg)
            except ValueError:
                raise ValueError(f"load model {spec!r}: N must be an integer >= {least}") from None
            if self.n < least:
                raise ValueError(f"load model {spec!r}: N must be >= {least}")
        self.kind = kind

    def predict(self, history: list[float]) -> float:
        if not history:
            return 0.0
        if self.kind == "last":
            return history[-1]
        recent = history[-self.n :]
        if self.kind == "median":
            return float(statistics.median(recent))
        if self.kind == "linear" and len(recent) > 1:
            return max(0.0, _extrapolate(recent))
        return float(sum(recent) / len(recent))

    def __repr__(self) -> str:
        return f"LoadModel({self.spec!r})"


def _extrapolate(ys: list[float]) -> float:
    """The least-squares line through (0, y0) .. (n-1, y_{n-1}), at x = n."""
    n = len(ys)
    xm = (n - 1) / 2.0
    ym = sum(ys) / n
    sxx = sum((x - xm) ** 2 for x in range(n))
    slope = sum((x - xm) * (y - ym) for x, y in enumerate(ys)) / sxx
    return ym + slope * (n - xm)


def imbalance(loads) -> float:
    """max / mean of per-rank loads (1.0 = perfectly balanced; 1.0 when all are zero)."""
    loads = list(loads)
    if not loads:
        return 1.0
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean > 0 else 1.0


@dataclass
class PhaseStats:
    """What `amt.phase()` returns: the closed phase's per-rank loads (same on every rank)."""

    phase: int
    rank_loads: list[float]
    imbalance: float
    max_load: float
    mean_load: float
    elements: int  # elements on this rank
    collections: dict = field(default_factory=dict)  # collection name -> per-rank loads

    def imbalance_of(self, name: str) -> float:
        """max/mean of one collection's per-rank loads in this phase."""
        return imbalance(self.collections.get(name, []))


@dataclass
class LBStats:
    """What `amt.rebalance()` returns (same on every rank, except `local_*`)."""

    strategy: str
    model: str
    imbalance_before: float  # max/mean of predicted rank loads before
    imbalance_after: float  # ... with the new placement (prediction)
    migrations: int  # elements that changed rank, all ranks
    migrated_bytes: int  # serialised size of the migrated elements, all ranks
    strategy_seconds: float  # time to decide (max over ranks)
    migrate_seconds: float  # time to move the elements (max over ranks)
    rank_loads_before: list[float] = field(default_factory=list)
    rank_loads_after: list[float] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # strategy-specific (e.g. tempered's trials)
