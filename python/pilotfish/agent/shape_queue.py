"""The scheduler's queues by shape (agent/scheduler.py): a task's shape key -- what it asks for,
and its expected duration class -- and the heap of one shape's waiting tasks.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from .tasks import WAITING

ShapeKey = tuple  # (ranks, cores_per_rank, gpus_per_rank, mem_per_rank, colocate, duration class)
DURATION_STEPS = 32  # duration classes per doubling: ~2 % apart, fine enough for LPT order


def shape_key(spec) -> ShapeKey:
    """A task's shape: what it asks for, and its expected duration by powers of two (-1: not
    given) -- so that within a shape arrival order stays exact and across shapes the longer
    ones can go first."""
    d = spec.duration
    return (
        spec.ranks,
        spec.cores_per_rank,
        spec.gpus_per_rank,
        spec.mem_per_rank,
        spec.colocate,
        -1 if d is None else max(0, math.floor(DURATION_STEPS * (math.log2(d) + 8))),
    )


@dataclass
class ShapeQueue:
    """The waiting tasks of one shape, in priority order (a heap), and what the scheduler
    noted of it: when it last failed to fit, its placement order."""

    key: ShapeKey
    heap: list = field(default_factory=list)  # (-priority, seq, task)
    blocked_gen: int = -1  # release generation at which it last failed to fit
    blocked_since: float | None = None
    order: tuple = ()  # how hard it is to place, for the utilization policy (see _order)

    def head(self):
        heap = self.heap
        while heap and heap[0][2].state is not WAITING:
            heapq.heappop(heap)
        return heap[0] if heap else None
