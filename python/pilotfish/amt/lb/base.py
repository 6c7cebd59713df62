"""The strategy contract.

A strategy is collective. `run(comm, ids, loads, homes)` is called on every rank with this
rank's objects: `ids` (int64 global object ids), `loads` (float64, predicted by the load model)
and `homes` (int64, each object's home rank). It returns, for each of them, the rank it should
live on next (int64 array, same order). The runtime then migrates the objects whose rank
changed. `comm` is a communicator of the strategy's own (any collectives are fine).
A strategy may fill `self.details` (a dict) for LBStats.details.
"""

from __future__ import annotations

import numpy as np


class Strategy:
    name = "base"
    options: dict = {}  # option name -> default

    def __init__(self, **options):
        unknown = set(options) - set(self.options)
        if unknown:
            raise TypeError(
                f"load-balancing strategy {self.name!r} has no option(s) "
                f"{sorted(unknown)}; options: {sorted(self.options) or 'none'}"
            )
        self.opts = {**self.options, **options}
        self.details: dict = {}

    def run(self, comm, ids: np.ndarray, loads: np.ndarray, homes: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class CentralStrategy(Strategy):
    """Gathers every (load, rank) to rank 0, decides there, scatters the decisions."""

    def run(self, comm, ids, loads, homes):
        rank, size = comm.Get_rank(), comm.Get_size()
        parts = comm.gather(loads, root=0)
        out = None
        if rank == 0:
            counts = [len(p) for p in parts]
            all_loads = np.concatenate(parts) if parts else np.zeros(0)
            owner = np.repeat(np.arange(size, dtype=np.int64), counts)
            new = np.asarray(self.assign(all_loads, owner, size), dtype=np.int64)
            out = np.split(new, np.cumsum(counts)[:-1])
        mine = comm.scatter(out, root=0)
        self.details = comm.bcast(self.details, root=0)  # LBStats: the same on every rank
        return mine

    def assign(self, loads: np.ndarray, owner: np.ndarray, size: int) -> np.ndarray:
        raise NotImplementedError


class HomeStrategy(Strategy):
    """Every object back to its home rank (the initial even block distribution)."""

    name = "home"

    def run(self, comm, ids, loads, homes):
        return np.asarray(homes, dtype=np.int64).copy()
