"""The allocation policy (_alloc_core.Policy) against a model of a batch queue, on a virtual
clock: what `pilotfish simulate --autoalloc` shows, what the policy's tests run on, and the
model side of bench/bench_autoalloc.py -- so limits can be chosen before anything is spent.

The model (Cluster): `nodes` nodes of `cores_per_node` cores; a job submitted waits
`queue_wait` seconds, then starts as soon as enough nodes are free (first come, first
served); `reject` (the batch system's words) makes every submission fail at once, as an
`sbatch` that says no; `reject_first` only the first n. A running job is a pilot: its tasks
start first-fit on its nodes' free cores (a rank never spans nodes), each lasts its
`duration`; the job ends at its walltime (what runs then is killed and counted), or
`end_delay` seconds after the policy ends it. The policy steps every `tick` seconds and at
each task end, as the real one is poked.

What comes back (Result): the makespan, core-seconds allocated (running jobs' cores x time),
busy (tasks' cores x time) and idle (the difference), the idle core-seconds of pilots that
ran nothing while a task waited that fits them, the most jobs in the queue at once, each
job's life, and the policy's events.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from ._alloc_core import ENDED, QUEUED, RUNNING, SUBMIT, Limits, Need, Policy, View, node_need


@dataclass
class SimTask:
    uid: str
    ranks: int = 1
    cores_per_rank: int = 1
    duration: float = 1.0
    submit_at: float = 0.0
    gpus_per_rank: int = 0
    runs_for: float | None = None  # how long it really runs (default: its duration)
    declared: bool = True  # whether the policy is told its duration


@dataclass
class Cluster:
    nodes: int = 4
    cores_per_node: int = 16
    queue_wait: float = 10.0
    reject: str | None = None
    reject_first: int | None = None  # reject only the first n submissions
    end_delay: float = 2.0


@dataclass
class Job:
    uid: str
    nodes: int
    submitted: float
    started: float | None = None
    ended: float | None = None
    why: str | None = None
    failed: bool = False
    free: list[int] = field(default_factory=list)  # free cores per node (running)
    queue: list[SimTask] = field(default_factory=list)  # its tasks not started yet
    running: dict[str, tuple[SimTask, list[tuple[int, int]]]] = field(default_factory=dict)
    busy: int = 0  # cores of its tasks not ended
    last_task_end: float | None = None
    ending_at: float | None = None


@dataclass
class Result:
    makespan: float = 0.0
    allocated_core_s: float = 0.0
    busy_core_s: float = 0.0
    idle_core_s: float = 0.0
    idle_while_waiting_core_s: float = 0.0
    max_jobs: int = 0
    done: int = 0
    killed: int = 0
    never: int = 0
    waiting: int = 0  # tasks still held at the end
    jobs: list[Job] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)


def simulate(
    tasks: list[SimTask],
    limits: Limits,
    cluster: Cluster,
    tick: float = 1.0,
    until: float = 86400.0,
    policy: Policy | None = None,
) -> Result:
    """Run the tasks (each held from its submit_at) under the policy's limits on the model."""
    pol = policy or Policy(limits)
    L, C = limits, cluster
    res = Result()
    arrivals = sorted(tasks, key=lambda t: t.submit_at)
    ai = 0
    waiting: dict[str, SimTask] = {}  # held in the client, in order
    jobs: dict[str, Job] = {}
    by_task: dict[str, Job] = {}
    ends: list[tuple[float, int, str]] = []  # (when, seq, task uid) of running tasks
    seq = itertools.count()
    free_nodes = C.nodes
    n_submitted = 0
    now = 0.0
    next_tick = 0.0
    todo = len(tasks)
    while now <= until:
        # what happens at `now`: arrivals, task ends, job ends, job starts
        while ai < len(arrivals) and arrivals[ai].submit_at <= now:
            waiting[arrivals[ai].uid] = arrivals[ai]
            ai += 1
        while ends and ends[0][0] <= now:
            _, _, uid = heapq.heappop(ends)
            j = by_task.pop(uid)
            t, slots = j.running.pop(uid)
            for node, c in slots:
                j.free[node] += c
            j.busy -= t.ranks * t.cores_per_rank
            j.last_task_end = now
            res.done += 1
            todo -= 1
        for j in jobs.values():
            if j.started is not None and j.ended is None:
                end_at = j.started + L.runtime
                if j.ending_at is not None and j.ending_at <= now:  # (the policy ended it:
                    k = _end(j, now, j.why or "ended", res, ends, by_task)  # none, if idle)
                    todo -= k
                    res.killed += k
                elif end_at <= now:
                    k = _end(j, now, "walltime", res, ends, by_task)
                    todo -= k
                    res.killed += k
                if j.ended is not None:
                    free_nodes += j.nodes
        for j in sorted(jobs.values(), key=lambda j: j.submitted):
            if j.started is None and j.ended is None and j.submitted + C.queue_wait <= now:
                if j.nodes > free_nodes:
                    break  # first come, first served
                free_nodes -= j.nodes
                j.started = now
                j.free = [C.cores_per_node] * j.nodes
        # the policy
        views = [_view(j, now, L, C) for j in jobs.values()]
        needs = [
            Need(
                t.uid,
                t.ranks,
                t.cores_per_rank,
                t.gpus_per_rank,
                t.duration if t.declared else None,
            )
            for t in waiting.values()
        ]
        step = pol.step(now, needs, views)
        for kind, detail in step.events:
            res.events.append((now, kind, detail))
        for puid, uids in step.dispatch.items():
            j = jobs[puid]
            for uid in uids:
                t = waiting.pop(uid)
                j.queue.append(t)
                j.busy += t.ranks * t.cores_per_rank
                by_task[uid] = j
        for uid, why in step.end:
            j = jobs[uid]
            j.ending_at, j.why = now + C.end_delay, f"DONE: {why}"
        for uid, why in step.cancel:
            j = jobs[uid]
            j.ended, j.why = now, f"CANCELED: {why}"
        for nodes, why in step.submit:
            uid = f"job.{len(jobs):04d}"
            j = jobs[uid] = Job(uid, nodes, now)
            res.events.append((now, SUBMIT, f"{uid} ({nodes} nodes): {why}"))
            n_submitted += 1
            pol.status.requested += 1
            if C.reject is not None and (C.reject_first is None or n_submitted <= C.reject_first):
                j.ended, j.why, j.failed = now, f"FAILED: {C.reject}", True
                break  # (as autoalloc.py: no more requests before the policy hears of it)
        for j in jobs.values():  # each pilot starts what fits, first come first
            if j.started is not None and j.ended is None and j.queue:
                _start(j, now, ends, seq, C)
        present = sum(1 for j in jobs.values() if j.ended is None)
        res.max_jobs = max(res.max_jobs, present)
        # never-fitting tasks leave the count of what is still to do
        for uid in list(waiting):
            if uid in pol.status.never:
                del waiting[uid]
                res.never += 1
                todo -= 1
        if todo <= 0 and ai >= len(arrivals) and not any(j.ended is None for j in jobs.values()):
            break
        # the next instant: the next tick, task end, arrival, or job event
        nxt = [next_tick + tick]
        if ends:
            nxt.append(ends[0][0])
        if ai < len(arrivals):
            nxt.append(arrivals[ai].submit_at)
        for j in jobs.values():
            if j.ended is None:
                if j.started is None:
                    nxt.append(j.submitted + C.queue_wait)
                else:
                    nxt.append(j.started + L.runtime)
                    if j.ending_at is not None:
                        nxt.append(j.ending_at)
        later = min(x for x in nxt if x > now)
        # account the interval [now, later)
        dt = later - now
        for j in jobs.values():
            if j.started is not None and j.ended is None:
                cap = j.nodes * C.cores_per_node
                used = sum(t.ranks * t.cores_per_rank for t, _ in j.running.values())
                res.allocated_core_s += cap * dt
                res.busy_core_s += used * dt
                if not j.running and any(
                    (
                        node_need(t.ranks, t.cores_per_rank, t.gpus_per_rank, C.cores_per_node, 0)
                        or j.nodes + 1
                    )
                    <= j.nodes
                    for t in waiting.values()
                ):
                    res.idle_while_waiting_core_s += cap * dt
        if later >= next_tick + tick:
            next_tick = later
        now = later
    res.makespan = now
    res.idle_core_s = res.allocated_core_s - res.busy_core_s
    res.waiting = len(waiting)
    res.jobs = list(jobs.values())
    return res


def _view(j: Job, now: float, L: Limits, C: Cluster) -> View:
    if j.ended is not None:
        return View(j.uid, ENDED, j.nodes, ran=j.started is not None, failed=j.failed, why=j.why)
    if j.started is None:
        return View(j.uid, QUEUED, j.nodes)
    return View(
        j.uid, RUNNING, j.nodes, C.cores_per_node, 0, j.busy, j.started + L.runtime - now, ran=True
    )


def _start(j: Job, now: float, ends: list, seq, C: Cluster) -> None:
    left = []
    for t in j.queue:
        slots = _place(j.free, t.ranks, t.cores_per_rank)
        if slots is None:
            left.append(t)
            continue
        for node, c in slots:
            j.free[node] -= c
        j.running[t.uid] = (t, slots)
        runs = t.runs_for if t.runs_for is not None else t.duration
        heapq.heappush(ends, (now + runs, next(seq), t.uid))
    j.queue = left


def _place(free: list[int], ranks: int, cpr: int) -> list[tuple[int, int]] | None:
    out, avail = [], list(free)
    for _ in range(ranks):
        for i, f in enumerate(avail):
            if f >= cpr:
                avail[i] -= cpr
                out.append((i, cpr))
                break
        else:
            return None
    return out


def _end(j: Job, now: float, why: str, res: Result, ends: list, by_task: dict) -> int:
    """End a running job; returns how many of its tasks it killed (running or queued there)."""
    killed = len(j.running) + len(j.queue)
    for uid in list(j.running):
        by_task.pop(uid, None)
    dead = set(j.running)
    ends[:] = [e for e in ends if e[2] not in dead]
    heapq.heapify(ends)
    for t in j.queue:
        by_task.pop(t.uid, None)
    j.running, j.queue, j.busy = {}, [], 0
    j.ended = now
    j.why = j.why or why
    return killed


def from_descriptions(descs: list) -> list[SimTask]:
    """The model's tasks of TaskDescriptions (each needs a duration: ValueError naming the
    first that has none), all submitted at 0."""
    out = []
    for i, d in enumerate(descs):
        v = d.values
        if v.get("duration") is None:
            raise ValueError(f"task {i} ({d.name or 'no name'}): duration is required to simulate")
        out.append(
            SimTask(
                f"task.{i:06d}",
                v.get("ranks", 1),
                v.get("cores_per_rank", 1),
                v["duration"],
                0.0,
                v.get("gpus_per_rank", 0),
            )
        )
    return out


def summary(r: Result, limits: Limits) -> list[str]:
    """A few lines for `pilotfish simulate --autoalloc`."""
    lines = [
        f"makespan {r.makespan:.0f} s; {r.done} tasks done"
        + (f", {r.killed} killed at a walltime" if r.killed else "")
        + (f", {r.never} can never start" if r.never else "")
        + (f", {r.waiting} still waiting" if r.waiting else ""),
        f"allocations: {len(r.jobs)} requested, at most {r.max_jobs} at once "
        f"(max_pilots={limits.max_pilots}, idle_timeout {limits.idle_timeout:g} s)",
        f"core-seconds: {r.allocated_core_s:.0f} allocated, {r.busy_core_s:.0f} busy, "
        f"{r.idle_core_s:.0f} idle ({100 * r.idle_core_s / max(1.0, r.allocated_core_s):.1f} %)",
    ]
    for j in r.jobs:
        lines.append(
            f"  {j.uid}: {j.nodes} nodes, queued {j.submitted:.0f} s, "
            + (f"ran {j.started:.0f}-{j.ended:.0f} s" if j.started is not None else "never ran")
            + f": {j.why}"
        )
    return lines
