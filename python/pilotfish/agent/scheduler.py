"""The agent's scheduling policy on top of the Rust placer (mechanism in `_core.Placer`).

Waiting tasks are grouped by request shape (ranks, cores, GPUs, memory, colocation group,
duration class). Within a shape, order is (priority, arrival). Across shapes, policy
"utilization" (the default) takes the heads in the order (priority, aged, hardest to place:
GPUs then cores, longest expected duration, arrival): the big tasks that leave the fewest
ways to fill a node start first and small ones backfill around them -- a list schedule that
starts small tasks first fills every node with them and ends with a tail of big ones. Fillers
(no GPU, at most 1/16 of the smallest node's cores and, where tracked, memory) fit anywhere, so their size says nothing about how
hard they are to place: among them the longest expected duration goes first (LPT), so that
the last to start are the shortest and the run ends with a short tail (with `duration`
given; +0.9 % RU on 20 seeds of the seed-000 mix in the list-schedule model, every seed
better). A head that waited longer than `aging_s` goes before every non-aged one of its
priority, so no small task waits forever behind a stream of big ones. Policy "fifo" is
(priority, arrival) alone.

A shape that did not fit is not retried until something is released, so a round costs
O(shapes log shapes + placed), never O(waiting). A head blocked longer than `starvation_s`
gets a reservation: the placer keeps everyone else off the nodes it picked until it starts.

Nothing may stall the pilot for good: a task that can never be placed (a colocated task larger
than its group's node) is handed back as unplaceable with the reason, at once; a reservation
is dropped as soon as its task is placed, canceled, failed or found unplaceable, and the
reserved task itself (not whatever heads its shape) is what gets the reserved nodes.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

from .clock import REAL
from .tasks import DROPPED, PLACED, WAITING, move

ShapeKey = tuple  # (ranks, cores_per_rank, gpus_per_rank, mem_per_rank, colocate, duration class)
POLICIES = ("utilization", "fifo")
DURATION_STEPS = 32  # duration classes per doubling: ~2 % apart, fine enough for LPT order
FILLER_SHARE = 16  # a task without GPUs within 1/FILLER_SHARE of a node's cores: a filler


def shape_key(spec) -> ShapeKey:
    """A task's shape: what it asks for, and its expected duration by powers of two (-1: not
    given) -- so that within a shape arrival order stays exact and across shapes the longer
    ones can go first."""
    d = spec.duration
    return (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank,
            spec.colocate,
            -1 if d is None else max(0, math.floor(DURATION_STEPS * (math.log2(d) + 8))))


@dataclass
class _Shape:
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


class Scheduler:
    """Decides which waiting tasks to place now; the placer decides where."""

    def __init__(self, placer: Any, starvation_s: float = 2.0,
                 capacity: list[tuple[int, int, int]] | None = None,
                 policy: str = "utilization", aging_s: float = 60.0):
        """capacity: per-node (cores, gpus, mem MiB; 0 = untracked), to tell a colocated task
        that can never fit its group's node (default: asked from the placer, all free)."""
        if policy not in POLICIES:
            raise ValueError(f"scheduler policy {policy!r}: one of {', '.join(POLICIES)}")
        self.placer = placer
        self.starvation_s = starvation_s
        self.policy = policy
        self.aging_s = aging_s
        if capacity is None:
            capacity = [tuple(placer.free(n)) for n in range(placer.n_nodes)]
        self.capacity = capacity
        # a filler fits on every node (the smallest one counts)
        self._filler_cores = min((c for c, _, _ in capacity), default=0) // FILLER_SHARE
        mems = [m for _, _, m in capacity if m > 0]    # 0: memory not tracked on that node
        self._filler_mem = min(mems) // FILLER_SHARE if mems and len(mems) == len(capacity) \
            else None
        self.unplaceable: list[tuple[Any, str]] = []  # (task, why): the agent fails them
        self._shapes: dict[ShapeKey, _Shape] = {}
        self._gen = 0  # bumped on every release: blocked shapes may fit again
        self._colocated: dict[str, int] = {}  # colocation group -> node index
        self._reserved: Any = None  # the task holding the reservation
        self.waiting = 0
        # nothing added, released or removed since the last round: every head failed to fit
        # then and would again (blocked shapes are skipped), so the round is skipped whole
        self._dirty = True

    def add(self, tasks: list, now: float | None = None) -> None:
        """tasks: agent tasks with .spec, .seq, .key (state becomes WAITING); now: the
        clock schedule() is given (its arrival time, for aging)."""
        shapes = self._shapes
        self._dirty = True
        now = REAL.mono() if now is None else now
        for t in tasks:
            s = t.spec
            t.queued = now
            move(t, WAITING)
            k = shape_key(s)
            shape = shapes.get(k)
            if shape is None:
                shape = shapes[k] = _Shape(k, order=self._order(k))
            heapq.heappush(shape.heap, (-s.priority, t.seq, t))
            self.waiting += 1
            node = self._colocated.get(s.colocate, -1) if s.colocate is not None else -1
            if node >= 0 and not self._fits_node(k, node):
                self._reject_shape(shape, [], node)

    def discard(self, task) -> None:
        """A queued task was canceled (lazy removal: skipped when it reaches a head)."""
        if task.state is not WAITING:
            return
        move(task, DROPPED)
        self.waiting -= 1
        self._dirty = True
        if self._reserved is task:
            self._unreserve()

    def take_unplaceable(self) -> list[tuple[Any, str]]:
        """Tasks found unplaceable since the last call, with the reason (out of the queue)."""
        out, self.unplaceable = self.unplaceable, []
        return out

    def release(self, keys: list[int]) -> None:
        if keys:
            self.placer.release_batch(keys)
            self._gen += 1
            self._dirty = True

    def take(self, cores: int, fits) -> list:
        """Remove and return waiting tasks of shapes that pass fits(shape key), up to `cores`
        cores in all, the ones that would start last here first (lowest priority, newest);
        never the reserved one. O(waiting of the shapes taken from): for moving work to
        another partition (rare)."""
        out: list = []
        for shape in sorted(self._shapes.values(), key=lambda sh: -len(sh.heap)):
            ranks, cpr = shape.key[:2]
            size = ranks * cpr
            if cores < size:
                continue
            if not shape.heap or not fits(shape.key):
                continue
            live = sorted(e for e in shape.heap
                          if e[2].state is WAITING and e[2] is not self._reserved)
            kept = [e for e in shape.heap if e[2] is self._reserved]
            k = min(cores // size, len(live))
            cores -= k * size
            out.extend(e[2] for e in live[len(live) - k:])
            shape.heap = live[:len(live) - k] + kept
            heapq.heapify(shape.heap)
        self.waiting -= len(out)
        return out

    def drain_waiting(self) -> list:
        """Remove and return every waiting task (pilot shutting down)."""
        out = []
        for shape in self._shapes.values():
            out.extend(t for _, _, t in shape.heap if t.state is WAITING)
            shape.heap.clear()
        self.waiting = 0
        if self._reserved is not None:
            self.placer.unreserve(self._reserved.key)
            self._reserved = None
        return out

    def _order(self, key: ShapeKey) -> tuple:
        """A shape's place in the utilization order, after priority and aging (fixed for the
        shape: worked out once): GPUs, then cores -- a filler's count as none -- then the
        longest duration, then cores."""
        ranks, cpr, gpr, mpr, _, dur = key
        cores = ranks * cpr
        filler = gpr == 0 and cores <= self._filler_cores and (
            not mpr or self._filler_mem is None or ranks * mpr <= self._filler_mem)
        # a task without a duration counts as the longest (as Slurm takes a job without a
        # time limit to need the most): started late, it would make the longest tail
        return (-ranks * gpr, 0 if filler else -cores, -dur if dur >= 0 else -math.inf, -cores)

    def schedule(self, now: float | None = None) -> list[tuple[Any, list]]:
        """Place what fits now. Returns [(task, [(node, cores, gpus) per rank])]."""
        if not self.waiting or not self._dirty:
            return []
        self._dirty = False
        now = REAL.mono() if now is None else now
        placed: list[tuple[Any, list]] = []
        free_cores, free_gpus = self.placer.total_free()

        skip = None
        if self._reserved is not None:  # the starving task goes first, on its reserved nodes
            t = self._reserved
            if t.state is not WAITING:
                self._unreserve()
            elif self._place_reserved(t, placed):
                self._unreserve()
                free_cores, free_gpus = self.placer.total_free()
            else:
                skip = self._shape_of(t)  # others backfill, but only off its nodes

        heads = []
        fifo = self.policy == "fifo"
        aged_before = now - self.aging_s
        gen = self._gen
        may_reserve = self._reserved is None
        starvation_before = now - self.starvation_s
        # per GPU count, the most free cores on one node: a rank larger than that fits nowhere
        mf = self.placer.max_free()
        maxg = len(mf) - 1
        for shape in self._shapes.values():
            if shape is skip or shape.blocked_gen == gen:
                continue  # nothing was released since it last failed to fit
            key = shape.key
            if key[0] * key[1] > free_cores or key[0] * key[2] > free_gpus or key[2] > maxg \
                    or mf[key[2]] < key[1]:
                # larger than what is free (in all, or on any one node): blocked (and starving)
                # without being tried --
                # unless it is due for a reservation, which goes by the heads' order below
                since = shape.blocked_since
                if not (may_reserve and since is not None and since <= starvation_before):
                    if shape.head() is not None:
                        shape.blocked_gen = gen
                        if since is None:
                            shape.blocked_since = now
                    continue
            h = shape.head()
            if h is None:
                continue
            if fifo:
                heads.append(((h[0], h[1]), shape))
            else:
                heads.append(((h[0], h[2].queued > aged_before) + shape.order + (h[1],), shape))
        heads.sort(key=lambda x: x[0])
        for _, shape in heads:
            ranks, cpr, gpr, _, colocate, _ = shape.key
            per_task_c, per_task_g = ranks * cpr, ranks * gpr
            room = free_cores // per_task_c
            if per_task_g:
                room = min(room, free_gpus // per_task_g)
            if colocate is not None and colocate not in self._colocated:
                room = min(room, 1)  # the first of a group fixes the node for the rest
            if room and (gpr > maxg or mf[gpr] < cpr):
                room = 0  # no node has a rank's worth free any more
            n = self._place_shape(shape, room, placed) if room else 0
            if n:
                mf = self.placer.max_free()
            free_cores -= n * per_task_c
            free_gpus -= n * per_task_g
            if n:
                shape.blocked_since = None
            if shape.key in self._shapes and shape.head() is not None:
                self._blocked(shape, now, starving=(n == 0))
        return placed

    # -- internals --------------------------------------------------------------------------
    def _shape_of(self, t) -> _Shape:
        return self._shapes[shape_key(t.spec)]

    def _place_shape(self, shape: _Shape, room: int, placed: list) -> int:
        heap = shape.heap
        batch = []
        while heap and len(batch) < room:
            t = heapq.heappop(heap)[2]
            if t.state is WAITING:
                batch.append(t)
        if not batch:
            return 0
        ranks, cpr, gpr, mpr, colocate, _ = shape.key
        n = len(batch)
        hint = self._colocated.get(colocate, -1) if colocate is not None else -1
        if hint >= 0 and not self._fits_node(shape.key, hint):
            self._reject_shape(shape, batch, hint)
            return 0
        res = self.placer.place_batch([t.key for t in batch], [ranks] * n, [cpr] * n, [gpr] * n,
                                      [mpr] * n, [hint] * n, False)
        count = 0
        for t, slots in zip(batch, res):
            if slots is None:
                heapq.heappush(heap, (-t.spec.priority, t.seq, t))
                continue
            placed.append((t, slots))
            move(t, PLACED)
            count += 1
            if colocate is not None and colocate not in self._colocated:
                self._colocated[colocate] = slots[0][0]
                self._check_group(colocate, slots[0][0])
        self.waiting -= count
        return count

    def _place_reserved(self, t, placed: list) -> bool:
        """Place the reserved task itself (a newer, higher-priority task of the same shape
        must not take its turn: the reserved nodes are kept for this key alone)."""
        s = t.spec
        hint = self._colocated.get(s.colocate, -1) if s.colocate is not None else -1
        (slots,) = self.placer.place_batch([t.key], [s.ranks], [s.cores_per_rank],
                                           [s.gpus_per_rank], [s.mem_per_rank], [hint], False)
        if slots is None:
            return False
        placed.append((t, slots))
        move(t, PLACED)
        self.waiting -= 1
        if s.colocate is not None and s.colocate not in self._colocated:
            self._colocated[s.colocate] = slots[0][0]
            self._check_group(s.colocate, slots[0][0])
        return True

    def _fits_node(self, key: ShapeKey, node: int) -> bool:
        ranks, cpr, gpr, mpr = key[:4]
        cores, gpus, mem = self.capacity[node]
        return (ranks * cpr <= cores and ranks * gpr <= gpus
                and (not mem or not mpr or ranks * mpr <= mem))

    def _check_group(self, colocate: str, node: int) -> None:
        """The group's node is fixed: its waiting tasks that can never fit there fail now."""
        for key, shape in list(self._shapes.items()):
            if key[4] == colocate and not self._fits_node(key, node):
                self._reject_shape(shape, [], node)

    def _reject_shape(self, shape: _Shape, batch: list, node: int) -> None:
        ranks, cpr, gpr, mpr, colocate, _ = shape.key
        cores, gpus, mem = self.capacity[node]
        why = (f"colocation group {colocate!r} is on node {node} ({cores} cores, {gpus} GPUs"
               f"{f', {mem} MiB' if mem else ''}), which can never hold {ranks} x "
               f"({cpr} cores, {gpr} GPUs{f', {mpr} MiB' if mpr else ''})")
        tasks = list(batch) + [e[2] for e in shape.heap if e[2].state is WAITING]
        shape.heap.clear()
        self._shapes.pop(shape.key, None)
        for t in tasks:
            move(t, DROPPED)  # out of the queue for good
            if self._reserved is t:
                self._unreserve()
            self.unplaceable.append((t, why))
        self.waiting -= len(tasks)

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
            colocate = shape.key[4]
            if colocate is not None and colocate in self._colocated:
                return  # its node is fixed: reserving other nodes would only idle them
            t = head[2]
            s = t.spec
            nodes = self.placer.reserve(t.key, s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank)
            if nodes is not None:
                self._reserved = t

    def _unreserve(self) -> None:
        self.placer.unreserve(self._reserved.key)
        self._reserved = None
        self._gen += 1  # its nodes are open to every shape again
        self._dirty = True
