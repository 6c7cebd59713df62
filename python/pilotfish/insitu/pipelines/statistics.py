"""The "statistics" pipeline: count, min, max, mean and a histogram over every value of
every block staged in an iteration, across all servers.

config: {"bins": 10 (default), "range": [lo, hi] (default: the iteration's global min, max)}
"""

from __future__ import annotations

import operator

import numpy as np

from .._pipeline import InsituError, Pipeline, pipeline


@pipeline("statistics")
class Statistics(Pipeline):
    def __init__(self, config: dict):
        super().__init__(config)
        bins = config.get("bins", 10)
        rng = config.get("range")
        if type(bins) is not int or not 1 <= bins <= 1_000_000:
            raise InsituError(f"statistics: bins = {bins!r}: must be an integer 1..1000000")
        if rng is not None and not (
            isinstance(rng, list)
            and len(rng) == 2
            and all(isinstance(x, (int, float)) for x in rng)
            and rng[0] < rng[1]
        ):
            raise InsituError(f"statistics: range = {rng!r}: must be [lo, hi] with lo < hi")
        self.bins = bins
        self.range = rng
        self.blocks: list = []

    def activate(self, iteration: int) -> None:
        self.blocks = []

    def stage(self, block_id, array, meta) -> None:
        self.blocks.append(array)

    def execute(self, iteration: int):
        comm = self.comm
        values = [np.asarray(b, dtype=np.float64).ravel() for b in self.blocks]
        local = (
            sum(v.size for v in values),
            sum(float(v.sum()) for v in values),
            min((v.min() for v in values if v.size), default=np.inf),
            max((v.max() for v in values if v.size), default=-np.inf),
        )
        count, total, lo, hi = comm.allreduce(
            local, lambda a, b: (a[0] + b[0], a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]))
        )
        rng = self.range or ([lo, hi] if count else [0.0, 1.0])
        if rng[0] == rng[1]:
            rng = [rng[0] - 0.5, rng[1] + 0.5]
        hist = np.zeros(self.bins, dtype=np.int64)
        for v in values:
            hist += np.histogram(v, bins=self.bins, range=(rng[0], rng[1]))[0]
        hist = comm.allreduce(hist, operator.add)
        if comm.rank != 0:
            return None
        return {
            "count": int(count),
            "min": float(lo) if count else None,
            "max": float(hi) if count else None,
            "mean": total / count if count else None,
            "histogram": hist.tolist(),
            "range": [float(rng[0]), float(rng[1])],
        }

    def deactivate(self, iteration: int) -> None:
        self.blocks = []
