"""The task table's timers (table.py): a heap of (when, sequence, kind, task, the task's
generation) -- a task's timeout, the SIGKILL after a TERM's grace, the end of a retry's
backoff. The table decides what a fired timer does (TaskTable.fire_timers); a timer of an
earlier generation of its task (a run before a retry) is the table's to ignore.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Iterator
from typing import Any


class Timer(enum.Enum):
    """What a task's timer does when it fires (TaskTable.fire_timers)."""

    TIMEOUT = "timeout"  # its walltime (TaskDescription.timeout) is up: TERM, then KILL
    KILL = "kill"  # the grace after a TERM is up: SIGKILL
    BACKOFF_END = "backoff_end"  # a failed task's retry backoff ended: queued again


class Timers:
    """Timers by due time (the agent's clock.now() time)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer, Any, int]] = []
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, when: float, kind: Timer, t: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, kind, t, t.gen))

    @property
    def next(self) -> float:
        """When the next one is due, inf if none is set."""
        return self._heap[0][0] if self._heap else math.inf

    def due(self, now: float) -> Iterator[tuple[Timer, Any, int]]:
        """(kind, task, its generation then) of each timer due by `now`, earliest first, taken
        off as it is given (timers added meanwhile that are due by now come too)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, kind, t, gen = heapq.heappop(heap)
            yield kind, t, gen
