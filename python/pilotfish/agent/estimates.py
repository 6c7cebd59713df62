"""Durations learned from the run: how long a task will hold its slots, where `duration` is
not given.

A task's *kind* is its executable and its shape (ranks, cores, GPUs and memory per rank): the
agent sees no task name, and the same program asked for a different shape often does
different work. What a finished task of a kind held its slots for (placed -> released, so
launch costs are in it) is a sample of that kind; the estimate is their mean, and its
uncertainty their standard deviation (Welford's running sums: O(1) per task, no list kept).
A kind with no sample yet borrows the estimate of its executable's tasks of the same
class (with GPUs or without), with that class's spread -- so a size the run has not finished
yet is not taken for unknown when its program is.

A user's `duration` always wins: `expected()` returns it whenever it is set, and a learned
estimate never replaces it (the scheduler's duration classes and the planner read
`expected()`). Killed tasks (canceled, timed out) teach nothing: their run was cut short.
"""

from __future__ import annotations

import math
from typing import Any

MIN_SAMPLES = 2  # a kind's own estimate once this many of it ended; before, its class's


def kind_of(spec: Any) -> tuple:
    return (spec.executable, spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)


def class_of(spec: Any) -> tuple:
    return (spec.executable, spec.gpus_per_rank > 0)


class _Stat:
    __slots__ = ("n", "mean", "m2")

    def __init__(self):
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.25 * self.mean


class Estimate(tuple):
    """(seconds, std, samples, source): source 'duration' (the user's), 'kind' (learned from
    tasks of its kind), 'class' (learned from its executable's tasks with/without GPUs)."""

    __slots__ = ()

    def __new__(cls, seconds: float, std: float, n: int, source: str):
        return tuple.__new__(cls, (seconds, std, n, source))

    seconds = property(lambda self: self[0])
    std = property(lambda self: self[1])
    n = property(lambda self: self[2])
    source = property(lambda self: self[3])


class Estimates:
    """Learned durations per kind (see the module docstring)."""

    def __init__(self):
        self._kinds: dict[tuple, _Stat] = {}
        self._classes: dict[tuple, _Stat] = {}
        self.version = 0  # bumped on every sample: a plan made on older estimates is stale

    def observe(self, spec: Any, seconds: float) -> None:
        """A task of spec's kind held its slots this long (it ended by itself)."""
        if seconds < 0 or spec.function is not None:
            return
        for table, key in ((self._kinds, kind_of(spec)), (self._classes, class_of(spec))):
            st = table.get(key)
            if st is None:
                st = table[key] = _Stat()
            st.add(seconds)
        self.version += 1

    def learned(self, spec: Any) -> Estimate | None:
        """The learned estimate of spec's kind (its `duration` is not looked at)."""
        st = self._kinds.get(kind_of(spec))
        if st is not None and st.n >= MIN_SAMPLES:
            return Estimate(st.mean, st.std, st.n, "kind")
        cl = self._classes.get(class_of(spec))
        if cl is not None and cl.n >= MIN_SAMPLES:
            return Estimate(cl.mean, cl.std, cl.n, "class")
        return None

    def expected(self, spec: Any) -> Estimate | None:
        """The user's duration if given, else the learned estimate, else None."""
        if spec.duration is not None:
            return Estimate(float(spec.duration), 0.0, 0, "duration")
        return self.learned(spec)

    def summary(self) -> list[dict]:
        """One row per learned kind (for the report): executable, shape, samples, mean, std."""
        return [
            {
                "executable": k[0],
                "ranks": k[1],
                "cores_per_rank": k[2],
                "gpus_per_rank": k[3],
                "mem_per_rank": k[4],
                "samples": st.n,
                "mean_s": round(st.mean, 3),
                "std_s": round(st.std, 3),
            }
            for k, st in self._kinds.items()
        ]
