"""The agent's scheduling policy on top of the Rust placer (mechanism in `_core.Placer`).

Waiting tasks are grouped by request shape (ranks, cores, GPUs, memory, colocation group).
Within a shape, order is (priority, arrival); across shapes, the best head goes first. A
shape that did not fit is not retried until something is released, so a round costs
O(shapes + placed), never O(waiting). Smaller shapes backfill past a large one that does not
fit yet; a large one blocked longer than `starvation_s` gets a reservation: the placer keeps
everyone else off the nodes it picked until the large task starts.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any

ShapeKey = tuple  # (ranks, cores_per_rank, gpus_per_rank, mem_per_rank, colocate)


@dataclass
class _Shape:
    key: ShapeKey
    heap: list = field(default_factory=list)  # (-priority, seq, task)
    blocked_gen: int = -1  # release generation at which it last failed to fit
    blocked_since: float | None = None

    def head(self):
        heap = self.heap
        while heap and heap[0][2].canceled:
            heapq.heappop(heap)
        return heap[0] if heap else None


class Scheduler:
    """Decides which waiting tasks to place now; the placer decides where."""

    def __init__(self, placer: Any, starvation_s: float = 2.0):
        self.placer = placer
        self.starvation_s = starvation_s
        self._shapes: dict[ShapeKey, _Shape] = {}
        self._gen = 0  # bumped on every release: blocked shapes may fit again
        self._colocated: dict[str, int] = {}  # colocation group -> node index
        self._reserved: Any = None  # the task holding the reservation
        self.waiting = 0

    def add(self, tasks: list) -> None:
        """tasks: agent tasks with .spec, .seq, .key, .canceled."""
        shapes = self._shapes
        for t in tasks:
            s = t.spec
            k = (s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank, s.colocate)
            shape = shapes.get(k)
            if shape is None:
                shape = shapes[k] = _Shape(k)
            heapq.heappush(shape.heap, (-s.priority, t.seq, t))
        self.waiting += len(tasks)

    def discard(self, task) -> None:
        """A queued task was canceled (lazy removal: skipped when it reaches a head)."""
        task.canceled = True
        self.waiting -= 1

    def release(self, keys: list[int]) -> None:
        if keys:
            self.placer.release_batch(keys)
            self._gen += 1

    def drain_waiting(self) -> list:
        """Remove and return every waiting task (pilot shutting down)."""
        out = []
        for shape in self._shapes.values():
            out.extend(t for _, _, t in shape.heap if not t.canceled)
            shape.heap.clear()
        self.waiting = 0
        if self._reserved is not None:
            self.placer.unreserve(self._reserved.key)
            self._reserved = None
        return out

    def schedule(self, now: float | None = None) -> list[tuple[Any, list]]:
        """Place what fits now. Returns [(task, [(node, cores, gpus) per rank])]."""
        if not self.waiting:
            return []
        now = time.monotonic() if now is None else now
        placed: list[tuple[Any, list]] = []
        free_cores, free_gpus = self.placer.total_free()

        skip = None
        if self._reserved is not None:  # the starving task goes first, on its reserved nodes
            t = self._reserved
            if t.canceled:
                self._unreserve()
            elif self._place_shape(self._shape_of(t), 1, placed):
                self._unreserve()
                free_cores, free_gpus = self.placer.total_free()
            else:
                skip = self._shape_of(t)  # others backfill, but only off its nodes

        heads = []
        for shape in self._shapes.values():
            if shape is skip or shape.blocked_gen == self._gen:
                continue  # nothing was released since it last failed to fit
            h = shape.head()
            if h is not None:
                heads.append((h[0], h[1], shape))
        heads.sort(key=lambda x: (x[0], x[1]))
        for _, _, shape in heads:
            ranks, cpr, gpr, _, colocate = shape.key
            per_task_c, per_task_g = ranks * cpr, ranks * gpr
            room = free_cores // per_task_c
            if per_task_g:
                room = min(room, free_gpus // per_task_g)
            if colocate is not None and colocate not in self._colocated:
                room = min(room, 1)  # the first of a group fixes the node for the rest
            n = self._place_shape(shape, room, placed) if room else 0
            free_cores -= n * per_task_c
            free_gpus -= n * per_task_g
            if n:
                shape.blocked_since = None
            if shape.head() is not None:
                self._blocked(shape, now, starving=(n == 0))
        return placed

    # -- internals --------------------------------------------------------------------------
    def _shape_of(self, t) -> _Shape:
        s = t.spec
        return self._shapes[(s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank, s.colocate)]

    def _place_shape(self, shape: _Shape, room: int, placed: list) -> int:
        heap = shape.heap
        batch = []
        while heap and len(batch) < room:
            t = heapq.heappop(heap)[2]
            if not t.canceled:
                batch.append(t)
        if not batch:
            return 0
        ranks, cpr, gpr, mpr, colocate = shape.key
        n = len(batch)
        hint = self._colocated.get(colocate, -1) if colocate is not None else -1
        res = self.placer.place_batch([t.key for t in batch], [ranks] * n, [cpr] * n, [gpr] * n,
                                      [mpr] * n, [hint] * n, False)
        count = 0
        for t, slots in zip(batch, res):
            if slots is None:
                heapq.heappush(heap, (-t.spec.priority, t.seq, t))
                continue
            placed.append((t, slots))
            count += 1
            if colocate is not None and colocate not in self._colocated:
                self._colocated[colocate] = slots[0][0]
        self.waiting -= count
        return count

    def _blocked(self, shape: _Shape, now: float, starving: bool) -> None:
        shape.blocked_gen = self._gen
        if not starving:
            return
        if shape.blocked_since is None:
            shape.blocked_since = now
        elif self._reserved is None and now - shape.blocked_since >= self.starvation_s:
            head = shape.head()
            if head is None:
                return
            t = head[2]
            s = t.spec
            nodes = self.placer.reserve(t.key, s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank)
            if nodes is not None:
                self._reserved = t

    def _unreserve(self) -> None:
        self.placer.unreserve(self._reserved.key)
        self._reserved = None
