"""Planning over the known queue: a bounded search for the order in which to start the
waiting tasks, judged by a model of the pilot that runs them on expected durations.

The scheduler's `plan` policy asks for a plan when its queue holds more than one wave of
hard-to-place tasks (more of them waiting and running than fit at once: a decision about
how many to start now and what fills around them). A plan is made from a snapshot:

    nodes     free (cores, GPUs, memory) per node now
    running   per placed task: expected seconds left, and what it holds on which node
    queue     every waiting task: its shape and expected seconds (its `duration`, else the
              learned estimate -- estimates.py), in the order today's policy takes them

The model is a list schedule that does what the planned scheduler does: at each expected end,
the waiting tasks in plan order, each placed first fit (ranks packed onto a node as far as
they fit, then the next) if it fits now, later ones backfilling (a shape that failed is not
tried again in that round). Its makespan for today's order is the baseline. The search is a
local search over the order (half the moves start the task that ends last earlier, the
others move one to three tasks up to a window away; a move is kept if the model's makespan
is no worse), for `budget_s` of CPU time; plateau moves are kept, so it
walks across equal makespans. It stops early after `patience` moves without improvement.

Why a search of our own and not a solver (HiGHS, CP-SAT): what the agent can carry out is
an order for its own list schedule (first fit, backfill at every end); a time-indexed MILP or
CP model would give start times and node choices that the placer's first fit and the real
ends would not reproduce, and would need a repair step back into an order, plus a solver
dependency in every agent. Judging orders by the model of the scheduler itself means a plan's
predicted makespan is what the scheduler then does (to the digit on a virtual clock), and the
search can stop at any moment with the best order so far. (A solver was not tried here.)

The answer is a plan only if the model's makespan beats the baseline by more than `margin`
(relative: the estimates' own noise must not be what it found); else None, and the scheduler
keeps today's order. Running out of time -- before the baseline itself was simulated (a queue
too large for the budget) -- is also None: today's policy. Planning never blocks the agent's
loop on a real pilot: `Planner.start` hands the snapshot to one worker thread and
`Planner.poll` picks the answer up in a later round (the scheduler drops a plan made before
tasks arrived: it does not know them; tasks that started meanwhile simply are not waiting).
A simulated pilot plans inline (`sync=True`), so a simulation is
deterministic and `pilotfish simulate` predicts the planned schedule.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Snapshot:
    """What a plan is made from (all lists are the planner's own copies)."""

    free: list  # per node [cores, gpus, mem]
    running: list  # (seconds left, [(node, cores, gpus, mem) per rank])
    queue: list  # (key, ranks, cores/rank, gpus/rank, mem/rank, seconds), today's order
    made_at: float = 0.0  # the scheduler's clock when it was taken
    version: int = 0  # estimates.version then
    start: list | None = None  # the plan in force, as indices into queue: the search's start
    margin: float | None = None  # the gain a plan must show (None: the planner's)


@dataclass
class Plan:
    order: list  # task keys, in the order to start them
    makespan_s: float  # the model's makespan for that order (seconds from made_at)
    baseline_s: float  # ... and for today's order
    elapsed_s: float  # planning time (thread CPU time)
    iterations: int  # schedules the model ran
    made_at: float = 0.0
    version: int = 0
    tasks: int = 0


@dataclass
class Outcome:
    """One planning attempt: a plan, or why none (for the scheduler's counters and notes)."""

    plan: Plan | None
    why: str  # "planned", "no gain", "out of time"
    elapsed_s: float
    iterations: int
    tasks: int
    baseline_s: float | None = None
    best_s: float | None = None
    made_at: float = 0.0
    version: int = 0


def simulate(
    snap: Snapshot,
    order: list[int],
    deadline: float = float("inf"),
    clock=time.thread_time,
    last: list | None = None,
) -> float | None:
    """The model's makespan (seconds from the snapshot) of starting snap.queue in `order`
    (indices into queue); None if the deadline (of `clock`) passed first. last: a list that
    gets the queue index of the task that ends last (the search moves it).

    Each round (at each expected end) goes through the waiting tasks in `order` as the
    planned scheduler does: shapes by the position of their next task (a heap), a shape
    that does not fit is done for the round -- so a round costs O((placed + shapes) log
    shapes), not O(waiting)."""
    free = [list(f) for f in snap.free]
    nodes = len(free)
    ends: list = []
    seq = 0
    for left, holds in snap.running:
        seq += 1
        ends.append((max(0.0, left), seq, holds))
    heapq.heapify(ends)
    queue = snap.queue
    sids, shapes = _shape_ids(snap)
    per: dict[int, list[int]] = {}  # shape id -> positions in `order` of its tasks
    for pos, i in enumerate(order):
        per.setdefault(sids[i], []).append(pos)
    ptr = dict.fromkeys(per, 0)  # shape id -> its next task's index in per[sid]
    waiting = len(order)
    now = 0.0
    makespan = max((e[0] for e in ends), default=0.0)
    last_i = -1
    rounds = placed = 0
    while waiting:
        rounds += 1
        if not rounds & 63 and clock() > deadline:
            return None
        maxc = max(f[0] for f in free)
        heads = [(p[ptr[sid]], sid) for sid, p in per.items() if ptr[sid] < len(p)]
        heapq.heapify(heads)
        while heads and maxc > 0:
            pos, sid = heapq.heappop(heads)
            ranks, cpr, gpr, mpr = shapes[sid]
            if cpr > maxc:
                continue
            holds = _place(free, nodes, ranks, cpr, gpr, mpr)
            if holds is None:
                continue  # the shape does not fit: done for this round
            i = order[pos]
            seq += 1
            end = now + queue[i][5]
            heapq.heappush(ends, (end, seq, holds))
            if end > makespan:
                makespan = end
                last_i = i
            waiting -= 1
            placed += 1
            if not placed & 255 and clock() > deadline:
                return None
            k = ptr[sid] = ptr[sid] + 1
            if k < len(per[sid]):
                heapq.heappush(heads, (per[sid][k], sid))
            maxc = max(f[0] for f in free)
        if not waiting:
            break
        if not ends:
            return float("inf")  # what waits can never start in the model (bigger than a node)
        now, _, holds = heapq.heappop(ends)
        _free(free, holds)
        while ends and ends[0][0] <= now:
            _free(free, heapq.heappop(ends)[2])
    if last is not None:
        last.append(last_i)
    return makespan


def _shape_ids(snap: Snapshot) -> tuple[list[int], list[tuple]]:
    """Per queue entry its shape's id, and the shapes (cached on the snapshot)."""
    cached = snap.__dict__.get("_sids")
    if cached is not None:
        return cached
    ids: dict[tuple, int] = {}
    sids = []
    for _, ranks, cpr, gpr, mpr, _ in snap.queue:
        sids.append(ids.setdefault((ranks, cpr, gpr, mpr), len(ids)))
    out = (sids, list(ids))
    snap.__dict__["_sids"] = out
    return out


def _place(free: list, nodes: int, ranks: int, cpr: int, gpr: int, mpr: int):
    if ranks == 1:
        for n in range(nodes):
            f = free[n]
            if f[0] >= cpr and f[1] >= gpr and f[2] >= mpr:
                f[0] -= cpr
                f[1] -= gpr
                f[2] -= mpr
                return ((n, cpr, gpr, mpr),)
        return None
    got = []
    left = ranks
    for n in range(nodes):
        f = free[n]
        k = min(
            left,
            f[0] // cpr if cpr else left,
            f[1] // gpr if gpr else left,
            f[2] // mpr if mpr else left,
        )
        if k > 0:
            got.append((n, k * cpr, k * gpr, k * mpr))
            left -= k
            if not left:
                break
    if left:
        return None
    for n, c, g, m in got:
        f = free[n]
        f[0] -= c
        f[1] -= g
        f[2] -= m
    return tuple(got)


def _free(free: list, holds) -> None:
    for n, c, g, m in holds:
        f = free[n]
        f[0] += c
        f[1] += g
        f[2] += m


def search(
    snap: Snapshot,
    budget_s: float,
    margin: float = 0.005,
    patience: int = 400,
    seed: int = 0,
    clock=time.thread_time,
) -> Outcome:
    """The best order the budget finds (see the module docstring)."""
    t0 = clock()
    deadline = t0 + budget_s
    n = len(snap.queue)
    base_order = list(range(n))
    base = simulate(snap, base_order, deadline, clock)
    if base is None:
        return Outcome(
            None, "out of time", clock() - t0, 0, n, made_at=snap.made_at, version=snap.version
        )
    rng = random.Random(seed)
    best, order = base, base_order
    it = 1
    if snap.start is not None and len(snap.start) == n:  # go on from the plan in force
        m = simulate(snap, snap.start, deadline, clock)
        it += 1
        if m is not None and m <= best:
            best, order = m, list(snap.start)
    since = 0
    window = max(8, n // 8)
    crit: list = []  # the task that ends last under the best order so far
    simulate(snap, order, deadline, clock, crit)
    while n > 1 and since < patience and clock() < deadline:
        cand = list(order)
        if crit and crit[-1] >= 0 and rng.random() < 0.5:
            # the task that ends last: start it earlier
            a = cand.index(crit[-1])
            if a:
                cand.insert(max(0, a - rng.randint(1, window)), cand.pop(a))
        else:
            for _ in range(rng.randint(1, 3)):
                a = rng.randrange(n)
                b = min(n - 1, max(0, a + rng.randint(-window, window)))
                cand.insert(b, cand.pop(a))
        last: list = []
        m = simulate(snap, cand, deadline, clock, last)
        it += 1
        if m is None:
            break
        if m <= best:
            since = 0 if m < best - 1e-9 else since + 1
            best, order, crit = m, cand, last
        else:
            since += 1
    elapsed = clock() - t0
    if best < base * (1 - margin):
        plan = Plan(
            [snap.queue[i][0] for i in order],
            best,
            base,
            elapsed,
            it,
            snap.made_at,
            snap.version,
            n,
        )
        return Outcome(plan, "planned", elapsed, it, n, base, best, snap.made_at, snap.version)
    return Outcome(None, "no gain", elapsed, it, n, base, best, snap.made_at, snap.version)


def _margin(snap: Snapshot, default: float) -> float:
    return default if snap.margin is None else snap.margin


@dataclass
class Planner:
    """Runs `search` on snapshots: inline (sync) or on one worker thread."""

    budget_s: float = 0.5
    margin: float = 0.005
    sync: bool = False
    outcomes: list = field(default_factory=list)  # every finished attempt (kept short)
    _thread: Any = None
    _result: Any = None
    _lock: Any = field(default_factory=threading.Lock)

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def start(self, snap: Snapshot) -> Outcome | None:
        """Begin planning; sync: the outcome now; else None (poll() gives it later)."""
        if self.sync:
            out = search(snap, self.budget_s, _margin(snap, self.margin))
            self._note(out)
            return out
        if self._thread is not None:
            return None

        def work():
            out = search(snap, self.budget_s, _margin(snap, self.margin))
            with self._lock:
                self._result = out

        self._thread = threading.Thread(target=work, name="pilotfish-planner", daemon=True)
        self._thread.start()
        return None

    def poll(self) -> Outcome | None:
        """The outcome of the attempt started last, once it is done (once)."""
        if self._thread is None:
            return None
        with self._lock:
            out, self._result = self._result, None
        if out is None:
            return None
        self._thread = None
        self._note(out)
        return out

    def _note(self, out: Outcome) -> None:
        self.outcomes.append(out)
        if len(self.outcomes) > 64:
            del self.outcomes[:32]
