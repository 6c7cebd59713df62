"""The agent's scheduling policy on top of the Rust placer (mechanism in `_core.Placer`).

Waiting tasks are grouped by request shape (ranks, cores, GPUs, memory, colocation group,
duration class). Within a shape, order is (priority, arrival). Across shapes, policy
"utilization" (the default) takes the heads in the order (priority, aged, hardest to place:
GPUs then cores, longest expected duration, arrival): the big tasks that leave the fewest
ways to fill a node start first and small ones backfill around them -- a list schedule that
starts small tasks first fills every node with them and ends with a tail of big ones. Fillers
(no GPU, at most 1/16 of the smallest node's cores and, where tracked, memory) fit anywhere,
so their size says nothing about how
hard they are to place: among them the longest expected duration goes first (LPT), so that
the last to start are the shortest and the run ends with a short tail (with `duration`
given; +0.9 % RU on 20 seeds of the seed-000 mix in the list-schedule model, every seed
better). A head that waited longer than `aging_s` goes before every non-aged one of its
priority, so no small task waits forever behind a stream of big ones. Policy "fifo" is
(priority, arrival) alone.

Policy "plan" (the agent's default) is "utilization" that also learns and plans: it
learns each kind's duration from the tasks that ended (estimates.py: same executable and
shape; a user's `duration` always wins) and, while the queue holds more than one wave of
hard-to-place tasks, asks the planner (planner.py) for the order to start them in: a bounded
search judged by a model that runs the queue on expected durations. A plan ranks the waiting
tasks; heads go by (priority, aged, plan rank), so priority and the aging bound still come
first, and under a plan a blocked head gets a reservation only after aging_s (the plan times
the starts). Tasks that arrive drop the plan in force (it would start them after its own)
until the next one, made from a snapshot that has them. No plan (no gain, out of time,
durations not known yet): exactly "utilization". Real pilots plan on a worker thread (the
loop never waits for it), simulated ones inline.

A shape that did not fit is not retried until something is released, so a round costs
O(shapes log shapes + placed), never O(waiting). What waits is counted as it changes (O(1) a
task, never a scan): `waiting` tasks, `waiting_cores` and `waiting_gpus` they ask for in all --
the function pool's idle workers give way by these (functions.py, through ports.Host). A head
blocked longer than `starvation_s` gets a reservation: the placer keeps everyone else off the
nodes it picked until it starts.

Nothing may stall the pilot for good: a task that can never be placed (a colocated task larger
than its group's node) is handed back as unplaceable with the reason, at once; a reservation
is dropped as soon as its task is placed, canceled, failed or found unplaceable, and the
reserved task itself (not whatever heads its shape) is what gets the reserved nodes.
"""

from __future__ import annotations

import heapq
import json
import math
from typing import Any

from .clock import REAL
from .estimates import Estimates
from .planner import Planner, Snapshot
from .shape_queue import ShapeKey, ShapeQueue, shape_key
from .tasks import DROPPED, PLACED, WAITING, move

POLICIES = ("plan", "utilization", "fifo")
UNPLANNED = 1 << 50  # heap entries of tasks no plan ranks: UNPLANNED + arrival seq
REPLAN_S = 1.0  # at least this long (the scheduler's clock) between two plans
FILLER_SHARE = 16  # a task without GPUs within 1/FILLER_SHARE of a node's cores: a filler


class Scheduler:
    """Decides which waiting tasks to place now; the placer decides where."""

    def __init__(
        self,
        placer: Any,
        starvation_s: float = 2.0,
        capacity: list[tuple[int, int, int]] | None = None,
        policy: str = "utilization",
        aging_s: float = 60.0,
        plan_budget_s: float = 0.5,
        plan_sync: bool = False,
        plan_margin: float = 0.01,
    ):
        """capacity: per-node (cores, gpus, mem MiB; 0 = untracked), to tell a colocated task
        that can never fit its group's node (default: asked from the placer, all free).
        policy "plan": plan_budget_s of CPU per plan, inline if plan_sync (simulated pilots),
        a plan kept only if the model says it ends more than plan_margin sooner (a fifth of
        that where every expected duration is the user's)."""
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
        mems = [m for _, _, m in capacity if m > 0]  # 0: memory not tracked on that node
        self._filler_mem = (
            min(mems) // FILLER_SHARE if mems and len(mems) == len(capacity) else None
        )
        self.unplaceable: list[tuple[Any, str]] = []  # (task, why): the agent fails them
        self._shapes: dict[ShapeKey, ShapeQueue] = {}
        self._gen = 0  # bumped on every release: blocked shapes may fit again
        self._colocated: dict[str, int] = {}  # colocation group -> node index
        self._reserved: Any = None  # the task holding the reservation
        self.waiting = 0  # tasks in the queue (WAITING), and what they ask for in all:
        self.waiting_cores = 0  # ranks x cores_per_rank, summed
        self.waiting_gpus = 0  # ranks x gpus_per_rank, summed
        # nothing added, released or removed since the last round: every head failed to fit
        # then and would again (blocked shapes are skipped), so the round is skipped whole
        self.dirty = True
        # policy "plan": what was learned, the planner, the plan in force
        self.estimates: Estimates | None = None
        self.planner: Planner | None = None
        if policy == "plan":
            self.estimates = Estimates()
            self.planner = Planner(budget_s=plan_budget_s, margin=plan_margin, sync=plan_sync)
        self.plan_margin = plan_margin
        self._unplanned = UNPLANNED if policy == "plan" else 0
        self._rank: dict[int, int] = {}  # task key -> its rank in the plan in force
        self._limited = False  # _place_shape stopped at the plan's limit
        self._holding: dict[int, tuple] = {}  # placed key -> (task, placed at, raw slots)
        self._hard: set = set()  # shapes that are not fillers (the planner's business)
        self._cores_total = sum(c for c, _, _ in capacity)
        self._gpus_total = sum(g for _, g, _ in capacity)
        self._last_plan_at = -math.inf
        self._plan_added = True  # tasks arrived since the last snapshot
        self.plan_notes: list = []  # planning outcomes not yet reported (plan_report)

    def add(self, tasks: list, now: float | None = None) -> None:
        """tasks: agent tasks with .spec, .seq, .key (state becomes WAITING); now: the
        clock schedule() is given (its arrival time, for aging)."""
        shapes = self._shapes
        self.dirty = True
        self._plan_added = True
        now = REAL.mono() if now is None else now
        if self.planner is not None:
            self._added_at = now
            if self._rank:  # a plan that does not know them would put them after its own
                self._set_ranks({})
        for t in tasks:
            s = t.spec
            t.queued = now
            move(t, WAITING)
            k = shape_key(s)
            shape = shapes.get(k)
            if shape is None:
                shape = shapes[k] = ShapeQueue(k, order=self._order(k))
                if self.planner is not None and shape.order[:2] != (0, 0):
                    self._hard.add(k)
            heapq.heappush(shape.heap, (-s.priority, self._unplanned + t.seq, t))
            self._count(s, 1)
            node = self._colocated.get(s.colocate, -1) if s.colocate is not None else -1
            if node >= 0 and not self._fits_node(k, node):
                self._reject_shape(shape, [], node)

    def discard(self, task) -> None:
        """A queued task was canceled (lazy removal: skipped when it reaches a head)."""
        if task.state is not WAITING:
            return
        move(task, DROPPED)
        self._count(task.spec, -1)
        self.dirty = True
        if self._reserved is task:
            self._unreserve()

    def take_unplaceable(self) -> list[tuple[Any, str]]:
        """Tasks found unplaceable since the last call, with the reason (out of the queue)."""
        out, self.unplaceable = self.unplaceable, []
        return out

    def release(self, keys: list[int], now: float | None = None) -> None:
        """Free what the keys hold; now (the clock's mono): policy "plan" learns how long
        each held its slots (tasks that ended by themselves, exit code 0)."""
        if keys:
            self.placer.release_batch(keys)
            self._gen += 1
            self.dirty = True
            if self.planner is not None:
                holding = self._holding
                est = self.estimates
                assert est is not None  # planner and estimates come together
                for k in keys:
                    h = holding.pop(k, None)
                    if h is not None and now is not None:
                        t = h[0]
                        if t.exit_code == 0 and not t.signal and t.kill_reason is None:
                            est.observe(t.spec, now - h[1])

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
            live = sorted(
                e for e in shape.heap if e[2].state is WAITING and e[2] is not self._reserved
            )
            kept = [e for e in shape.heap if e[2] is self._reserved]
            k = min(cores // size, len(live))
            cores -= k * size
            out.extend(e[2] for e in live[len(live) - k :])
            shape.heap = live[: len(live) - k] + kept
            heapq.heapify(shape.heap)
        for t in out:
            self._count(t.spec, -1)
        return out

    def drain_waiting(self) -> list:
        """Remove and return every waiting task (pilot shutting down)."""
        out: list = []
        for shape in self._shapes.values():
            out.extend(t for _, _, t in shape.heap if t.state is WAITING)
            shape.heap.clear()
        self.waiting = self.waiting_cores = self.waiting_gpus = 0
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
        filler = (
            gpr == 0
            and cores <= self._filler_cores
            and (not mpr or self._filler_mem is None or ranks * mpr <= self._filler_mem)
        )
        # a task without a duration counts as the longest (as Slurm takes a job without a
        # time limit to need the most): started late, it would make the longest tail
        return (-ranks * gpr, 0 if filler else -cores, -dur if dur >= 0 else -math.inf, -cores)

    def schedule(self, now: float | None = None) -> list[tuple[Any, list]]:
        """Place what fits now. Returns [(task, [(node, cores, gpus) per rank])]."""
        if not self.waiting or not self.dirty:
            return []
        self.dirty = False
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

        if self.planner is not None:
            self._plan_round(now)
        planned = bool(self._rank)
        fifo = self.policy == "fifo"
        aged_before = now - self.aging_s
        gen = self._gen
        may_reserve = self._reserved is None
        # a plan times the starts itself: a reservation only once a task waited aging_s
        starvation_before = now - (
            max(self.starvation_s, self.aging_s) if planned else self.starvation_s
        )
        # per GPU count, the most free cores on one node: a rank larger than that fits nowhere
        mf = self.placer.max_free()
        maxg = len(mf) - 1
        heads: list[tuple[tuple, ShapeQueue]] = []
        for shape in self._shapes.values():
            if shape is skip or shape.blocked_gen == gen:
                continue  # nothing was released since it last failed to fit
            key = shape.key
            if (
                key[0] * key[1] > free_cores
                or key[0] * key[2] > free_gpus
                or key[2] > maxg
                or mf[key[2]] < key[1]
            ):
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
                heads.append((self._head_key(h, shape, planned, aged_before), shape))
        # heads in order (unique keys: seq or plan rank last); a heap, since under a plan a
        # shape whose next task is ranked after another head's goes back in with that task
        heads.sort(key=lambda x: x[0])
        while heads:
            _, shape = heapq.heappop(heads)
            ranks, cpr, gpr, _, colocate, _ = shape.key
            per_task_c, per_task_g = ranks * cpr, ranks * gpr
            room = free_cores // per_task_c
            if per_task_g:
                room = min(room, free_gpus // per_task_g)
            if colocate is not None and colocate not in self._colocated:
                room = min(room, 1)  # the first of a group fixes the node for the rest
            if room and (gpr > maxg or mf[gpr] < cpr):
                room = 0  # no node has a rank's worth free any more
            # under a plan, a shape starts its tasks ranked before the next head's task
            limit = heads[0][0][3] if planned and heads and heads[0][0][2] == 0 else math.inf
            n = self._place_shape(shape, room, placed, limit) if room else 0
            if n:
                mf = self.placer.max_free()
            free_cores -= n * per_task_c
            free_gpus -= n * per_task_g
            if n:
                shape.blocked_since = None
            limited, self._limited = self._limited, False
            if shape.key in self._shapes:
                h = shape.head()
                if h is None:
                    continue
                if limited and n:  # not blocked: its next task waits for its rank
                    heapq.heappush(heads, (self._head_key(h, shape, planned, aged_before), shape))
                else:
                    self._blocked(shape, now, starving=(n == 0))
        if self.planner is not None and placed:
            self._started += len(placed)
            holding = self._holding
            for t, raw in placed:
                holding[t.key] = (t, now, raw)
        return placed

    # -- why is it pending? (explain.py) ------------------------------------------------------
    def explain(self, t, now: float) -> dict:
        """What the queue knows of a waiting task (read only; O(its shape + shapes)):
        ahead -- tasks of its shape that go before it; heads_before -- other shapes whose
        head goes first now (policy order); blocked_s -- how long its shape's head found no
        room; aged -- it waited past aging_s (goes ahead of every non-aged head of its
        priority); reserved -- the nodes (indices) reserved for it, or reserved_by (uid,
        nodes) for another task's reservation; group_node -- the node its colocation group
        is on; plan_rank -- its start number in the plan in force; policy."""
        out: dict = {
            "policy": self.policy,
            "aged": t.queued <= now - self.aging_s,
            "aging_s": self.aging_s,
        }
        shape = self._shapes.get(shape_key(t.spec))
        if shape is not None:
            mine = (-t.spec.priority, self._sortval(t))
            out["ahead"] = sum(
                1 for e in shape.heap if e[2].state is WAITING and e[2] is not t and e[:2] < mine
            )
            if shape.blocked_since is not None:
                out["blocked_s"] = max(0.0, now - shape.blocked_since)
            if self.policy != "fifo":
                planned = bool(self._rank)
                aged_before = now - self.aging_s
                h = shape.head()
                if h is not None:
                    me = self._head_key(h, shape, planned, aged_before)
                    n = 0
                    for other in self._shapes.values():
                        oh = other.head() if other is not shape else None
                        if oh is not None and self._head_key(oh, other, planned, aged_before) < me:
                            n += 1
                    out["heads_before"] = n
        r = self._reserved
        if r is t:
            out["reserved"] = list(self.placer.reservation(t.key) or [])
        elif r is not None:
            out["reserved_by"] = [r.spec.uid, list(self.placer.reservation(r.key) or [])]
        if t.spec.colocate is not None and t.spec.colocate in self._colocated:
            out["group_node"] = self._colocated[t.spec.colocate]
        rank = self._rank.get(t.key)
        if rank is not None:
            out["plan_rank"] = rank
        return out

    # -- planning (policy "plan") -----------------------------------------------------------
    def plan_report(self, partition: int = 0) -> list[str]:
        """Planning outcomes since the last call, as JSON for the `queue_plan` event: why (planned,
        no gain, out of time), tasks, iterations, elapsed_s (CPU), the model's makespan for
        today's order and the best (baseline_s, best_s), and the learned estimates."""
        notes, self.plan_notes = self.plan_notes, []
        kinds = self.estimates.summary() if self.estimates is not None and notes else []
        return [
            json.dumps(
                {
                    "partition_index": partition,
                    "why": o.why,
                    "tasks": o.tasks,
                    "iterations": o.iterations,
                    "elapsed_s": round(o.elapsed_s, 4),
                    "made_at": round(o.made_at, 3),
                    "baseline_s": None if o.baseline_s is None else round(o.baseline_s, 3),
                    "best_s": None if o.best_s is None else round(o.best_s, 3),
                    "estimates": kinds[:32],
                }
            )
            for o in notes
        ]

    def expected(self, spec) -> Any:
        """What the scheduler expects of a task: estimates.Estimate (the user's duration, else
        the learned one) or None (policy "plan" only)."""
        return self.estimates.expected(spec) if self.estimates is not None else None

    def _plan_round(self, now: float) -> None:
        """Take a finished plan; start planning when the queue holds more than one wave of
        hard-to-place tasks and something changed (at most once per replan interval)."""
        planner = self.planner
        assert planner is not None  # called only when planning
        out = planner.poll()
        if out is not None:
            self._take(out)
        if planner.busy or not self._hard:
            return
        # again when tasks arrived, or a tenth of the last plan's queue started since
        # (and at least REPLAN_S after the last): between, the plan in force holds
        if now - self._last_plan_at < REPLAN_S or not (
            self._plan_added or self._started >= self._replan_at
        ):
            return
        if (
            sum(1 for sh in self._shapes.values() if sh.head() is not None) < 2
            or not self._more_than_a_wave()
        ):
            return  # nothing to choose between, or one wave: the plan in force runs out
        snap = self._snapshot(now)
        self._last_plan_at = now
        self._plan_added = False
        if snap is None:  # some expected duration is not known yet: today's order
            self._replan_at = self._started + 1
            return
        n = len(snap.queue)
        if self._too_many is not None and n > self._too_many // 2:
            self._replan_at = self._started + max(1, n - self._too_many // 2)
            return  # the last plan of about this many ran out of time: today's order
        self._replan_at = self._started + max(1, n // 10)
        out = planner.start(snap)
        if out is not None:  # inline (simulated pilots)
            self._take(out)

    _started = 0  # tasks placed so far (policy "plan")
    _added_at = -math.inf  # when tasks last arrived
    _replan_at = 0  # ... when to plan again
    _too_many: int | None = None  # queue length of the last plan that ran out of time

    def _more_than_a_wave(self) -> bool:
        waiting_c = waiting_g = 0
        for k in list(self._hard):
            shape = self._shapes.get(k)
            if shape is None:
                self._hard.discard(k)
                continue
            live = sum(1 for e in shape.heap if e[2].state is WAITING)
            waiting_c += live * k[0] * k[1]
            waiting_g += live * k[0] * k[2]
        if not waiting_c:
            return False
        run_c = run_g = 0
        hard = self._hard
        for t, _, _ in self._holding.values():
            s = t.spec
            if shape_key(s) in hard:
                run_c += s.ranks * s.cores_per_rank
                run_g += s.ranks * s.gpus_per_rank
        return waiting_c + run_c > self._cores_total or bool(
            self._gpus_total and waiting_g + run_g > self._gpus_total
        )

    def _snapshot(self, now: float) -> Snapshot | None:
        est = self.estimates
        assert est is not None  # planning: estimates kept
        live = []
        for shape in self._shapes.values():
            order = shape.order
            for e in shape.heap:
                t = e[2]
                if t.state is WAITING:
                    live.append((-t.spec.priority, order, t.seq, t))
        live.sort(key=lambda x: x[:3])  # today's order, each shape's tasks together
        start = None
        if self._rank:  # the plan in force: where the search starts (today's order: baseline)
            rank = self._rank
            pos = sorted(range(len(live)), key=lambda i: (rank.get(live[i][3].key, UNPLANNED), i))
            start = pos
        queue = []
        learned = 0
        for _, _, _, t in live:
            s = t.spec
            e = est.expected(s)
            if e is None:
                return None
            learned += e.source != "duration"
            queue.append(
                (t.key, s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank, e.seconds)
            )
        running = []
        for t, at, raw in self._holding.values():
            e = est.expected(t.spec)
            if e is None:
                return None
            left = max(e.seconds - (now - at), 0.05 * e.seconds)  # overdue: ends soon
            mpr = t.spec.mem_per_rank
            running.append((left, tuple((n, len(c), len(g), mpr) for n, c, g in raw)))
        free = []
        for n, (_, _, mem) in enumerate(self.capacity):
            c, g, m = self.placer.free(n)
            free.append([c, g, m if mem else 1 << 62])
        # a plan on learned estimates must gain more than their noise could make up
        margin = self.plan_margin if learned else self.plan_margin / 5
        return Snapshot(free, running, queue, now, est.version, start, margin)

    def _take(self, out) -> None:
        if out.why == "out of time":
            self._too_many = out.tasks
        self.plan_notes.append(out)
        if len(self.plan_notes) > 256:
            del self.plan_notes[:128]
        if out.plan is not None and out.made_at < self._added_at:
            return  # tasks arrived since its snapshot: it does not know them (planned again)
        self._set_ranks({} if out.plan is None else {k: i for i, k in enumerate(out.plan.order)})

    def _set_ranks(self, ranks: dict) -> None:
        """The plan in force changes: every shape's heap is ordered by it (O(waiting))."""
        if not ranks and not self._rank:
            return
        self._rank = ranks
        for shape in self._shapes.values():
            shape.heap = [
                (-t.spec.priority, self._sortval(t), t)
                for _, _, t in shape.heap
                if t.state is WAITING
            ]
            heapq.heapify(shape.heap)
        self.dirty = True

    def _sortval(self, t) -> int:
        r = self._rank.get(t.key)
        return r if r is not None else self._unplanned + t.seq

    # -- internals --------------------------------------------------------------------------
    def _count(self, spec, n: int) -> None:
        """n tasks of this spec joined (1) or left (-1) the queue: the counts follow."""
        self.waiting += n
        self.waiting_cores += n * spec.ranks * spec.cores_per_rank
        self.waiting_gpus += n * spec.ranks * spec.gpus_per_rank

    def _head_key(self, h, shape: ShapeQueue, planned: bool, aged_before: float) -> tuple:
        """A head's place in the utilization order (or the plan's)."""
        if planned:
            if h[1] < UNPLANNED:  # the plan's rank
                return (h[0], h[2].queued > aged_before, 0, h[1])
            return (h[0], h[2].queued > aged_before, 1) + shape.order + (h[1],)
        return (h[0], h[2].queued > aged_before) + shape.order + (h[1],)

    def _shape_of(self, t) -> ShapeQueue:
        return self._shapes[shape_key(t.spec)]

    def _place_shape(
        self, shape: ShapeQueue, room: int, placed: list, limit: float = math.inf
    ) -> int:
        heap = shape.heap
        batch: list = []
        while heap and len(batch) < room:
            if batch and heap[0][1] >= limit:
                self._limited = True  # the plan ranks another shape's task before this one
                break
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
        res = self.placer.place_batch(
            [t.key for t in batch], [ranks] * n, [cpr] * n, [gpr] * n, [mpr] * n, [hint] * n, False
        )
        count = 0
        for t, slots in zip(batch, res):
            if slots is None:
                heapq.heappush(heap, (-t.spec.priority, self._sortval(t), t))
                continue
            placed.append((t, slots))
            move(t, PLACED)
            count += 1
            self.waiting_cores -= ranks * cpr
            self.waiting_gpus -= ranks * gpr
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
        (slots,) = self.placer.place_batch(
            [t.key],
            [s.ranks],
            [s.cores_per_rank],
            [s.gpus_per_rank],
            [s.mem_per_rank],
            [hint],
            False,
        )
        if slots is None:
            return False
        placed.append((t, slots))
        move(t, PLACED)
        self._count(s, -1)
        if s.colocate is not None and s.colocate not in self._colocated:
            self._colocated[s.colocate] = slots[0][0]
            self._check_group(s.colocate, slots[0][0])
        return True

    def _fits_node(self, key: ShapeKey, node: int) -> bool:
        ranks, cpr, gpr, mpr = key[:4]
        cores, gpus, mem = self.capacity[node]
        return (
            ranks * cpr <= cores
            and ranks * gpr <= gpus
            and (not mem or not mpr or ranks * mpr <= mem)
        )

    def _check_group(self, colocate: str, node: int) -> None:
        """The group's node is fixed: its waiting tasks that can never fit there fail now."""
        for key, shape in list(self._shapes.items()):
            if key[4] == colocate and not self._fits_node(key, node):
                self._reject_shape(shape, [], node)

    def _reject_shape(self, shape: ShapeQueue, batch: list, node: int) -> None:
        ranks, cpr, gpr, mpr, colocate, _ = shape.key
        cores, gpus, mem = self.capacity[node]
        why = (
            f"colocation group {colocate!r} is on node {node} ({cores} cores, {gpus} GPUs"
            f"{f', {mem} MiB' if mem else ''}), which can never hold {ranks} x "
            f"({cpr} cores, {gpr} GPUs{f', {mpr} MiB' if mpr else ''})"
        )
        tasks = list(batch) + [e[2] for e in shape.heap if e[2].state is WAITING]
        shape.heap.clear()
        self._shapes.pop(shape.key, None)
        for t in tasks:
            move(t, DROPPED)  # out of the queue for good
            if self._reserved is t:
                self._unreserve()
            self.unplaceable.append((t, why))
            self._count(t.spec, -1)

    def _blocked(self, shape: ShapeQueue, now: float, starving: bool) -> None:
        shape.blocked_gen = self._gen
        if not starving:
            return
        if shape.blocked_since is None:
            shape.blocked_since = now
        elif self._reserved is None and now - shape.blocked_since >= (
            max(self.starvation_s, self.aging_s) if self._rank else self.starvation_s
        ):
            head = shape.head()
            if head is None:
                return
            colocate = shape.key[4]
            if colocate is not None and colocate in self._colocated:
                return  # its node is fixed: reserving other nodes would only idle them
            t = head[2]
            s = t.spec
            nodes = self.placer.reserve(
                t.key, s.ranks, s.cores_per_rank, s.gpus_per_rank, s.mem_per_rank
            )
            if nodes is not None:
                self._reserved = t

    def _unreserve(self) -> None:
        self.placer.unreserve(self._reserved.key)
        self._reserved = None
        self._gen += 1  # its nodes are open to every shape again
        self.dirty = True
