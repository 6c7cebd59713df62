"""Partitions: a pilot's nodes split into disjoint parts, each with its own launcher instance.

Seed 000: one launcher instance (a PRRTE DVM) cannot manage a large pilot, so its nodes are
partitioned, each partition with its own DVM -- started and stopped *concurrently* (RP did it
one after another: total overhead 52 s -> 830 s). A Partition owns its nodes, its placer
(the Rust core's, over its nodes only), its scheduler queue, its launcher instances and their
supervision. The agent's loop drives them; nothing here blocks.

A launcher instance (`Launcher`) is a small state machine the loop polls:

    starting --ready--> ready --daemon replaced--> degraded --ready--> ready ... --> stopped
        \\--cannot start (after the method's retries)--> failed

Tasks placed on a partition whose launcher is not ready wait for it, holding their slots
(`held`); relaunches by the supervisor wait the same way. A partition whose default launcher
fails is closed: its nodes are reported, its waiting tasks go to the other partitions.

The meta-scheduler (`bind`) sends each arriving task to the open partition where it can start
soonest: least bound work (running + queued, in core-seconds where `duration` is given) per
core, with a partition whose launcher is still starting behind a ready one at equal load --
never round robin. `rebalance` moves waiting tasks from a backed-up partition to one that has
free cores and nothing queued, so a bad early guess does not leave cores idle.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from .. import _events as E
from .._wire import RankSlot
from .._shapes import misfit
from ..launch.base import LaunchError, LaunchMethod
from .ports import Waiting
from .scheduler import Scheduler

log = logging.getLogger("pilotfish.agent")

STARTING, READY, DEGRADED, STOPPED, FAILED = "starting", "ready", "degraded", "stopped", "failed"


class Launcher:
    """One launch-method instance of a partition and where it is in its life."""

    __slots__ = ("name", "method", "partition", "state", "held", "reason")

    def __init__(self, name: str, method: LaunchMethod, partition: "Partition"):
        self.name = name
        self.method = method
        self.partition = partition
        self.state = STARTING
        self.held: list = []  # tasks placed (or to relaunch) that wait for it to be ready
        self.reason: str | None = None  # why it failed

    @property
    def detail(self) -> str:
        """Event detail: "<launcher> p<partition>" (analytics splits it at the space)."""
        return f"{self.name} p{self.partition.index}"

    def __repr__(self) -> str:
        return f"<Launcher {self.detail} {self.state}>"


class Partition:
    """Nodes, placer, scheduler, launchers and supervision of one part of the pilot.

    nodes: NodeInfo of its nodes; first: the global index of its first node (the pilot's
    node list is the concatenation of the partitions'); launcher: its default launch method.
    """

    def __init__(
        self,
        index: int,
        nodes: list,
        first: int,
        resources: Any,
        launcher: str,
        policy: str,
        clock: Any,
    ):
        from .. import _core

        self.index = index
        self.nodes = nodes
        self.names = [n.name for n in nodes]
        self.first = first
        self.resources = resources  # Resources over these nodes only (what launchers see)
        self.default_launcher = launcher
        self.shape = [(n.cores, n.gpus, n.mem) for n in nodes]
        self.cores = sum(n.cores for n in nodes)
        self.gpus = sum(n.gpus for n in nodes)
        self.placer = _core.Placer(
            [n.cores for n in nodes], [n.gpus for n in nodes], [n.mem for n in nodes]
        )
        self.scheduler = Scheduler(
            self.placer,
            capacity=self.shape,
            policy=policy,
            plan_sync=getattr(clock, "virtual", False),
        )  # simulated: inline
        self.clock = clock
        self.launchers: dict[str, Launcher] = {}
        self.supervisor: Any = None  # a Supervisor once a launcher of it needs watching
        self.open = True
        self.closed_reason: str | None = None
        # bound work, for the meta-scheduler: (cores, core-seconds) of tasks bound here and
        # not final; busy: cores of its placed tasks
        self.bound_work = 0.0
        self.class_work: dict[int, float] = {}  # the same per size class (size_class)
        self.busy_cores = 0
        self._fits: dict[tuple, bool] = {}
        self.is_ready = False  # its default launcher can launch now (kept by Launchers)
        # grown at run time (Pilot.grow): its unit's name and launcher options; draining: no
        # new placements, its tasks finish (or move) before its nodes go
        self.unit: str | None = None
        self.options: dict[str, dict] = {}
        self.draining = False

    def __repr__(self) -> str:
        return f"<Partition {self.index} {len(self.nodes)} nodes {self.default_launcher}>"

    # -- placement ----------------------------------------------------------------------------
    def to_slots(self, raw: list) -> list[RankSlot]:
        names, first = self.names, self.first
        return [RankSlot(names[n], first + n, tuple(c), tuple(g)) for n, c, g in raw]

    def fits(self, spec) -> bool:
        """Can this partition ever hold the request? (memoized per request shape: misfit is
        O(nodes), asked for every arriving task)"""
        key = (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)
        ok = self._fits.get(key)
        if ok is None:
            ok = self._fits[key] = misfit(*key, self.shape) is None
        return ok


def make_partitions(
    resources: Any, layout: Any, default_launcher: str, policy: str, clock: Any
) -> list[Partition]:
    """The pilot's partitions (one by default) from its description's `partitions`: each its
    nodes, placer, queue and default launcher."""
    from .._shapes import partition_layout
    from .resources import Resources

    nodes = resources.nodes
    out = []
    for i, (first, n, launcher) in enumerate(
        partition_layout(len(nodes), layout, default_launcher)
    ):
        part_nodes = nodes[first : first + n]
        res = Resources(part_nodes, resources.source, resources.overrides)
        out.append(
            Partition(i, part_nodes, first, res, launcher or default_launcher, policy, clock)
        )
    return out


def bind(partitions: list[Partition], spec, work: float) -> Partition | None:
    """The open partition where this task can start soonest (see the module docstring);
    None when no open partition can ever hold it.

    Per core, least work of the task's size class bound there, then least work of any
    class, then a ready launcher before a starting one. Balancing each size class on its
    own spreads big and small tasks evenly (a partition that took a big task is not then
    filled with small ones only), so tasks *and* core-seconds come out even."""
    best, best_key = None, None
    c = size_class(spec)
    shape = (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)
    for p in partitions:  # (inlined: this runs partitions x tasks times)
        if not p.open:
            continue
        ok = p._fits.get(shape)
        if ok is None:
            ok = p.fits(spec)
        if not ok:
            continue
        cores = p.cores
        key = (p.bound_work / cores, p.class_work.get(c, 0.0) / cores, not p.is_ready, p.index)
        if best_key is None or key < best_key:
            best, best_key = p, key
    return best


def size_class(spec) -> int:
    """Cores (and GPUs) per task by powers of two: tasks of one class are alike to place."""
    return (spec.ranks * spec.cores_per_rank).bit_length() * 8 + min(
        7, (spec.ranks * spec.gpus_per_rank).bit_length()
    )


def task_work(spec) -> float:
    """Core-seconds a task will take, as far as known: cores x duration (1 s if not given)."""
    return spec.ranks * spec.cores_per_rank * (spec.duration or 1.0)


def add_work(p: Partition, spec, work: float) -> None:
    p.bound_work += work
    c = size_class(spec)
    p.class_work[c] = p.class_work.get(c, 0.0) + work


def remove_work(p: Partition, spec, work: float) -> None:
    p.bound_work -= work
    c = size_class(spec)
    p.class_work[c] = p.class_work.get(c, 0.0) - work


def rebalance(partitions: list[Partition]) -> list[tuple[Partition, list]]:
    """Work stealing between partitions: an open, ready partition with free cores and an
    empty queue takes from the longest other queue as many waiting tasks as fill its free
    cores now (those that would start last there, of shapes it can hold). Returns
    [(partition, tasks moved to it)]; the caller re-binds them. Runs only when some
    partition idles, so it costs nothing while all are busy."""
    moves = []
    for p in partitions:
        if not (p.open and not p.scheduler.waiting and p.busy_cores < p.cores and p.is_ready):
            continue
        victims = [q for q in partitions if q is not p and q.scheduler.waiting > 1]
        if not victims:
            break
        q = max(victims, key=lambda q: q.scheduler.waiting)
        taken = q.scheduler.take(
            p.cores - p.busy_cores,
            lambda key, shape=p.shape: misfit(key[0], key[1], key[2], key[3], shape) is None,
        )
        if taken:
            moves.append((p, taken))
    return moves


class Launchers:
    """Starts, polls and stops the launcher instances of every partition -- concurrently:
    `begin` spawns a daemon and returns, `poll` moves each instance along its states."""

    def __init__(
        self,
        make: Callable[[Partition, str], LaunchMethod],
        spawn_aux: Callable,
        events: Any,
        pilot_uid: str,
        clock: Any,
    ):
        self.make = make  # (partition, name) -> a LaunchMethod over the partition's nodes
        self.spawn_aux = spawn_aux  # (launcher detail, argv, env, stdout, stderr) -> pid
        self.events = events
        self.uid = pilot_uid
        self.clock = clock
        self.starting: list[Launcher] = []  # instances to poll (starting or degraded)
        self.by_method: dict[int, Launcher] = {}  # id(launch method) -> its instance

    def get(self, p: Partition, name: str | None) -> Launcher:
        """The partition's instance of this launch method, begun now if it is new."""
        name = name or p.default_launcher
        lm = p.launchers.get(name)
        if lm is None:
            lm = self._begin(p, name)
        return lm

    def _begin(self, p: Partition, name: str) -> Launcher:
        now = self.clock.now()
        self.events.record(self.uid, E.LAUNCHER_START, f"{name} p{p.index}", now)
        try:
            method = self.make(p, name)
            lm = Launcher(name, method, p)
            p.launchers[name] = lm
            self.by_method[id(method)] = lm
            detail = lm.detail
            method.begin(
                lambda argv, env, stdout=None, stderr=None: self.spawn_aux(
                    detail, argv, env, stdout, stderr
                )
            )
        except (LaunchError, OSError) as e:
            lm = p.launchers.get(name) or Launcher(name, None, p)  # type: ignore[arg-type]  # a failed launcher: no resources to hold
            p.launchers[name] = lm
            self._failed(lm, str(e))
            return lm
        self.starting.append(lm)  # the loop polls it (a method without daemons: at once)
        return lm

    def degraded(self, method: LaunchMethod) -> None:
        """A supervised instance's daemon is being replaced: launches wait until it is ready."""
        lm = self.by_method.get(id(method))
        if lm is not None and lm.state == READY:
            self._set(lm, DEGRADED)
            self.starting.append(lm)

    @staticmethod
    def _set(lm: Launcher, state: str) -> None:
        lm.state = state
        p = lm.partition
        if lm.name == p.default_launcher:
            p.is_ready = state == READY

    def poll(self, which: list[Launcher] | None = None) -> list[Launcher]:
        """Move starting/degraded instances along; returns those that became ready or
        failed now (their held tasks are the agent's to launch or to move)."""
        changed = []
        for lm in list(self.starting if which is None else which):
            if lm.state not in (STARTING, DEGRADED):
                continue
            try:
                ok = lm.method.poll_ready()
            except (LaunchError, OSError) as e:
                self._drop(lm)
                self._failed(lm, str(e))
                changed.append(lm)
                continue
            if ok:
                self._drop(lm)
                now = self.clock.now()
                if lm.state == STARTING:
                    self.events.record(self.uid, E.LAUNCHER_READY, lm.detail, now)
                else:
                    self.events.record(self.uid, E.LAUNCHER_RECOVERED, lm.detail, now)
                self._set(lm, READY)
                changed.append(lm)
        return changed

    def _drop(self, lm: Launcher) -> None:
        try:
            self.starting.remove(lm)
        except ValueError:
            pass

    def _failed(self, lm: Launcher, why: str) -> None:
        self._set(lm, FAILED)
        lm.reason = why
        log.error("launcher %s: %s", lm.detail, why)
        self.events.record(self.uid, E.LAUNCHER_FAILED, f"{lm.detail}: {why}"[:500])

    def stop_all(self, partitions: list[Partition]) -> None:
        """Stop every instance; daemons are asked to stop first, all at once, then waited
        for (a DVM's stop is mostly waiting: P of them in about the time of one)."""
        instances = [
            lm
            for p in partitions
            for lm in p.launchers.values()
            if lm.method is not None and lm.state != STOPPED
        ]
        for lm in instances:
            try:
                lm.method.stop_begin()
            except Exception:
                log.exception("stopping launcher %s", lm.detail)
        for lm in instances:
            try:
                lm.method.stop()
            except Exception:
                log.exception("stopping launcher %s", lm.detail)
            self._set(lm, STOPPED)
            self.events.record(self.uid, E.LAUNCHER_STOP, lm.detail)


def by_partition(tasks: list) -> dict[Partition, list]:
    """Tasks grouped by their partition, in order."""
    out: dict[Partition, list] = {}
    for t in tasks:
        out.setdefault(t.partition, []).append(t)
    return out


def waiting(p: Partition) -> Waiting:
    """What waits in p's queue (the scheduler's counts) and what is free there."""
    sched = p.scheduler
    free_cores, free_gpus = p.placer.total_free()
    return Waiting(
        sched.waiting,
        sched.waiting_cores,
        sched.waiting_gpus,
        free_cores,
        free_gpus,
        bool(sched.waiting) and not sched.dirty,
    )
