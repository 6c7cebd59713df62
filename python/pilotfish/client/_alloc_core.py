"""The allocation policy's decisions, apart from any I/O: demand in, decisions out.

client/autoalloc.py feeds a Policy what it sees -- the tasks that wait in the client, held
by no pilot (Need, first submitted first), and the policy's pilots as they stand (View) --
and carries out what one step() decides (Step): which waiting tasks go to which running
pilot, which allocations to request and of what size, which idle pilots to end and which
queued ones to cancel, and an event for each decision. _alloc_sim.py runs the same Policy
against a model of a batch queue on a virtual clock (tests, `pilotfish simulate
--autoalloc`, bench/bench_autoalloc.py): the rules below are those of the real thing.

The rules, each step (at `now`, seconds on any clock that only goes forward):
  dispatch   a waiting task goes to a running pilot that can hold it (its shape; a task
             with a `duration` only where duration + margin fits the walltime left) and has
             room: capacity x (1 + prefetch) cores less what it has outstanding. The pilot
             with the most room takes it. A task that fits a pilot but finds no room holds
             that pilot (the one with the most room) for itself: tasks behind it do not go
             there, so a large task is not starved by small ones.
  demand     what waits after dispatch, less what the queued pilots will take (each up to
             its capacity, of the tasks that fit it) -- the tasks no pilot, running or
             queued, will take. While there are such tasks, allocations are requested up to
             the limits: max_pilots (queued and running together), max_queued, max_nodes
             (all the policy's pilots' nodes together).
  size       a request covers what is unserved (its cores x parallelism, in nodes) between
             min_nodes and `nodes` (the template's), and never less than the largest
             unserved task needs (a task of 8 nodes gets an allocation of at least 8); never
             beyond what max_nodes leaves.
  walltime   a pilot within a task's duration (+ margin) of its end does not take it: the
             task goes to another pilot or is unserved, so its allocation is requested
             while the running pilots still run.
  idle       a running pilot with nothing outstanding for idle_timeout is ended (it holds no
             task: nothing is lost; not one this step sends a task) -- but never the last
             running one while tasks wait, nor one of the min_pilots. A
             queued pilot that no waiting task fits for idle_timeout is canceled.
  floor      min_pilots are kept (queued or running) whatever waits, and init_pilots are
             requested at the first step (Parsl's min_blocks, init_blocks).
  kept       pilots of the user's own (View.kept: added to a TaskManager the policy serves)
             take waiting tasks as the policy's running pilots do, and a queued one counts
             against the demand; they are never ended or canceled and count in no limit.
  failures   a pilot that ends without ever running (a rejected submission, a job that
             failed in the queue) is a failure: the next request waits a back-off
             (backoff x 2^(n-1), at most backoff_max) and goes alone, a probe, until a pilot
             runs again; after max_failures in a row the policy
             pauses and says why, until resume(). A pilot that runs ends the series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

QUEUED, RUNNING, ENDED = "queued", "running", "ended"

# event names are _events.py's; the I/O side records (name, detail) pairs it gets back under
# these keys (this module imports nothing of the package: the simulator needs none of it)
SUBMIT, FAIL, PAUSE, RESUME, END, CANCEL, LIMIT = (
    "submit",
    "fail",
    "pause",
    "resume",
    "end",
    "cancel",
    "limit",
)


@dataclass(frozen=True)
class Limits:
    """What a policy may do (autoalloc.AutoAlloc checks each field and says which is wrong)."""

    max_pilots: int = 3
    max_queued: int | None = None  # None: max_pilots
    max_nodes: int | None = None  # all the policy's pilots' nodes together; None: no limit
    nodes: int = 1  # the template's: the largest request for ordinary work
    min_nodes: int = 1
    runtime: float = 3600.0  # the template's walltime, seconds
    cores_per_node: int | None = None  # the template's (None: learned from the first pilot)
    gpus_per_node: int | None = None
    idle_timeout: float = 30.0
    parallelism: float = 1.0  # the share of the unserved work a request covers
    prefetch: float = 0.25  # a running pilot's room: capacity x (1 + prefetch)
    margin: float = 10.0  # seconds a task's duration must leave before a pilot's end
    max_failures: int = 3
    backoff: float = 5.0
    backoff_max: float = 300.0
    min_pilots: int = 0  # kept (queued or running) even when nothing waits: Parsl's min_blocks
    init_pilots: int = 0  # requested at the first step, whatever waits: Parsl's init_blocks


class Need(NamedTuple):
    """A task that waits in the client, held by no pilot."""

    uid: str
    ranks: int = 1
    cores_per_rank: int = 1
    gpus_per_rank: int = 0
    duration: float | None = None

    @property
    def cores(self) -> int:
        return self.ranks * self.cores_per_rank


class View(NamedTuple):
    """One of the policy's pilots as it stands."""

    uid: str
    state: str  # QUEUED (submitted, its agent not running yet), RUNNING, ENDED
    nodes: int
    node_cores: int | None = None  # per node (None: not known yet)
    node_gpus: int | None = None
    busy: int = 0  # cores of the tasks the policy sent it that have not ended
    left: float | None = None  # RUNNING: seconds of walltime left (None: unknown)
    ran: bool = False  # its agent ran (it was RUNNING once)
    failed: bool = False  # ENDED FAILED (not canceled, not done)
    why: str | None = None  # ENDED: its final state and reason
    kept: bool = False  # the user's, not the policy's: fed, never ended, never counted

    def as_kept(self) -> "View":
        """The same pilot as one of the user's own."""
        return self._replace(kept=True)


class Step(NamedTuple):
    """What one step decided."""

    dispatch: dict[str, list[str]]  # pilot uid -> the uids of the waiting tasks it takes
    submit: list[tuple[int, str]]  # (nodes, why) per allocation to request
    end: list[tuple[str, str]]  # (pilot uid, why): idle, drained, end it
    cancel: list[tuple[str, str]]  # (pilot uid, why): queued and no longer needed
    events: list[tuple[str, str]]  # (kind above, detail) for each decision


@dataclass
class Status:
    """Where the policy stands: what `explain` and the dashboard say."""

    queued: int = 0
    running: int = 0
    waiting: int = 0  # tasks held in the client
    unserved: int = 0  # of them, those no pilot (running or queued) will take
    paused: str | None = None  # why it is paused
    backoff_until: float | None = None  # no request before then (a failure's back-off)
    limit: str | None = None  # the limit that holds the next request back
    failures: int = 0  # submissions that failed in a row
    requested: int = 0  # allocations requested so far (counted by who requests them)
    ended: int = 0  # allocations ended (idle, canceled, failed, at their walltime)
    never: dict[str, str] = field(default_factory=dict)  # task uid -> why no allocation can


def node_need(
    ranks: int,
    cores_per_rank: int,
    gpus_per_rank: int,
    node_cores: int | None,
    node_gpus: int | None,
) -> int | None:
    """Nodes a task of this shape needs at the least on nodes of (node_cores, node_gpus): 1
    while the shape is unknown, None if one rank fits no node."""
    if node_cores is None:
        return 1
    per = node_cores // cores_per_rank
    if gpus_per_rank:
        per = min(per, (node_gpus or 0) // gpus_per_rank)
    if per < 1:
        return None
    return -(-ranks // per)


class Policy:
    """The decisions of one allocation policy; its state is what it remembers between steps
    (idle clocks, failures in a row, the pilots it is ending)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.node_cores = limits.cores_per_node
        self.node_gpus = (
            limits.gpus_per_node
            if limits.gpus_per_node is not None
            else (0 if limits.cores_per_node is not None else None)
        )
        self.status = Status()
        self._idle_since: dict[str, float] = {}  # running pilot -> since when nothing runs
        self._unwanted_since: dict[str, float] = {}  # queued pilot -> since when none fits
        self._ending: set[str] = set()  # pilots it ended or canceled
        self._seen: set[str] = set()  # pilots whose end was counted
        self._said_limit: str | None = None
        self._first = True  # (init_pilots: the first step's)
        self._said_never: set[str] = set()

    # -- the user's ------------------------------------------------------------------------
    def resume(self) -> bool:
        """Unpause (after failures); True if it was paused."""
        s = self.status
        was = s.paused is not None
        s.paused, s.failures, s.backoff_until = None, 0, None
        return was

    # -- one step --------------------------------------------------------------------------
    def step(self, now: float, waiting: list[Need], views: list[View]) -> Step:
        s = self.status
        events: list[tuple[str, str]] = []
        kept = [v for v in views if v.kept and v.state != ENDED]
        views = [v for v in views if not v.kept]
        self._learn(views)  # (the template's node shape: never from a kept pilot)
        live = [v for v in views if v.state != ENDED and v.uid not in self._ending]
        self._count_ends(now, views, events)
        running = [v for v in live if v.state == RUNNING]
        queued = [v for v in live if v.state == QUEUED]
        if any(v.state == RUNNING for v in views) and s.failures:
            s.failures, s.backoff_until = 0, None  # the batch system said yes
        # the user's own pilots (kept) take tasks first, as the policy's running ones do; a
        # queued one counts against the demand; none is ended, canceled or counted in a limit
        kept_running = [v for v in kept if v.state == RUNNING]
        dispatch, left = self._dispatch(waiting, kept_running + running)
        end = self._idle(now, running, left, dispatch)
        unserved = self._unserved(left, [v for v in kept if v.state == QUEUED] + queued)
        present = [v for v in views if v.state != ENDED]  # (ending ones hold their job)
        cancel = self._unwanted(
            now, queued, left, len(present) - len(self._ending & {v.uid for v in present})
        )
        for uid, _ in cancel:
            queued = [v for v in queued if v.uid != uid]
        submit = self._requests(now, unserved, present, queued, cancel, events)
        for uid, why in end:
            events.append((END, f"{uid}: {why}"))
        for uid, why in cancel:
            events.append((CANCEL, f"{uid}: {why}"))
        self._ending.update(u for u, _ in end + cancel)
        s.queued = len(queued) + len(submit)
        s.running = len([v for v in running if v.uid not in self._ending])
        s.waiting, s.unserved = len(left), len(unserved)
        return Step(dispatch, submit, end, cancel, events)

    def _learn(self, views: list[View]) -> None:
        """The node shape, from the first running pilot, where the template did not say it."""
        if self.node_cores is None:
            for v in views:
                if v.state == RUNNING and v.node_cores:
                    self.node_cores, self.node_gpus = v.node_cores, v.node_gpus or 0
                    break

    def _count_ends(self, now: float, views: list[View], events: list) -> None:
        L, s = self.limits, self.status
        for v in views:
            if v.state != ENDED or v.uid in self._seen:
                continue
            self._seen.add(v.uid)
            s.ended += 1
            self._idle_since.pop(v.uid, None)
            self._unwanted_since.pop(v.uid, None)
            if v.ran or not v.failed or v.uid in self._ending:
                continue
            s.failures += 1  # it never ran, and not because it was canceled here
            wait = min(L.backoff_max, L.backoff * 2 ** (s.failures - 1))
            s.backoff_until = now + wait
            words = v.why or "ended before its agent ran"
            if s.failures >= L.max_failures and s.paused is None:
                s.paused = f"{s.failures} submissions failed in a row; the last: {v.uid}: {words}"
                events.append((FAIL, f"{v.uid}: {words}"))
                events.append((PAUSE, s.paused + " (AutoAlloc.resume() goes on)"))
            elif s.paused is None:
                events.append(
                    (
                        FAIL,
                        f"{v.uid}: {words}; failure {s.failures} of {L.max_failures} in a "
                        f"row, next request in {wait:g} s at the earliest",
                    )
                )

    def fits(self, n: Need, v: View, left: float | None) -> bool:
        """Whether pilot v can ever hold n, with `left` seconds of walltime (None: unknown)."""
        cores = v.node_cores if v.node_cores is not None else self.node_cores
        gpus = v.node_gpus if v.node_cores is not None else self.node_gpus
        need = node_need(n.ranks, n.cores_per_rank, n.gpus_per_rank, cores, gpus)
        if need is None or need > v.nodes:
            return False
        return n.duration is None or left is None or n.duration + self.limits.margin <= left

    def capacity(self, v: View) -> int:
        """A pilot's cores (as many as it has nodes while its shape is unknown)."""
        cores = v.node_cores if v.node_cores is not None else self.node_cores
        return v.nodes * (cores or 1)

    def _dispatch(
        self, waiting: list[Need], running: list[View]
    ) -> tuple[dict[str, list[str]], list[Need]]:
        L = self.limits
        room = {v.uid: self.capacity(v) * (1 + L.prefetch) - v.busy for v in running}
        held: set[str] = set()  # pilots held for a task that waits for room there
        out: dict[str, list[str]] = {}
        left: list[Need] = []
        for n in waiting:
            cands = [v for v in running if v.uid not in held and self.fits(n, v, v.left)]
            if not cands:
                left.append(n)
                continue
            best = max(cands, key=lambda v: room[v.uid])
            if room[best.uid] >= n.cores:
                out.setdefault(best.uid, []).append(n.uid)
                room[best.uid] -= n.cores
            else:
                held.add(best.uid)
                left.append(n)
        return out, left

    def _idle(
        self, now: float, running: list[View], left: list[Need], sent: dict[str, list[str]]
    ) -> list[tuple[str, str]]:
        L = self.limits
        out: list[tuple[str, str]] = []
        alive = len(running)
        for v in running:
            if v.busy > 0 or v.uid in sent:  # (sent: what this step gives it)
                self._idle_since.pop(v.uid, None)
                continue
            since = self._idle_since.setdefault(v.uid, now)
            if now - since < L.idle_timeout:
                continue
            if left and alive - len(out) <= 1:
                continue  # never the last running pilot while tasks wait
            if alive - len(out) <= L.min_pilots:
                continue  # (min_pilots: kept)
            out.append((v.uid, f"idle for {now - since:.0f} s (idle_timeout {L.idle_timeout:g} s)"))
        return out

    def _unserved(self, left: list[Need], queued: list[View]) -> list[Need]:
        """What waits that no queued pilot will take (each takes its capacity of what fits)."""
        room = {v.uid: self.capacity(v) for v in queued}
        out = []
        for n in left:
            for v in queued:
                if room[v.uid] >= n.cores and self.fits(n, v, self.limits.runtime):
                    room[v.uid] -= n.cores
                    break
            else:
                out.append(n)
        return out

    def _unwanted(
        self, now: float, queued: list[View], left: list[Need], kept: int
    ) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for v in queued:
            if kept - len(out) <= self.limits.min_pilots:
                break  # (min_pilots: kept)
            if any(self.fits(n, v, self.limits.runtime) for n in left):
                self._unwanted_since.pop(v.uid, None)
                continue
            since = self._unwanted_since.setdefault(v.uid, now)
            if now - since >= self.limits.idle_timeout:
                out.append((v.uid, f"queued, and no waiting task needs it for {now - since:.0f} s"))
        return out

    def _requests(
        self,
        now: float,
        unserved: list[Need],
        live: list[View],
        queued: list[View],
        cancel: list,
        events: list,
    ) -> list[tuple[int, str]]:
        L, s = self.limits, self.status
        s.limit = None
        s.backoff_until = s.backoff_until if s.backoff_until and s.backoff_until > now else None
        if s.paused is not None or s.backoff_until is not None:
            return []
        n_live = len(live)  # (those ending and canceled too: their job is still there)
        n_queued = len(queued)
        held = sum(v.nodes for v in live)
        max_queued = L.max_queued if L.max_queued is not None else L.max_pilots
        out: list[tuple[int, str]] = []
        first, self._first = self._first, False
        floor = max(L.min_pilots, L.init_pilots if first else 0)
        while n_live < min(floor, L.max_pilots):  # (prewarmed: their nodes the template's)
            if L.max_nodes is not None and held + L.nodes > L.max_nodes:
                break
            which = "init_pilots" if first and L.init_pilots >= L.min_pilots else "min_pilots"
            out.append((L.nodes, f"{which}={floor}: {n_live} allocations are held"))
            n_live, n_queued, held = n_live + 1, n_queued + 1, held + L.nodes
            rest_q = self._unserved(unserved, [View("", QUEUED, L.nodes)])
            unserved = rest_q
            if s.failures:
                return out
        rest = self._drop_never(unserved, events)
        while rest:
            if n_live >= L.max_pilots:
                self._hold(f"max_pilots={L.max_pilots} allocations are queued or running", events)
                break
            if n_queued >= max_queued:
                self._hold(f"max_queued={max_queued} allocations wait in the batch queue", events)
                break
            free = None if L.max_nodes is None else L.max_nodes - held
            size = self._size(rest, free)
            if size is None:
                self._hold(f"max_nodes={L.max_nodes}: {held} nodes are held", events)
                break
            nodes, served = size
            cores = sum(n.cores for n in rest)
            why = f"{len(rest)} tasks ({cores} cores) wait that no pilot will take"
            late = sum(
                1
                for n in rest
                if n.duration is not None
                and any(
                    v.state == RUNNING and self.fits(n, v, None) and not self.fits(n, v, v.left)
                    for v in live
                )
            )
            if late:
                why += f" ({late} would outlive the walltime the running pilots have left)"
            need = max(self._need(n) for n in served)
            if need > 1:
                why += f"; the largest needs {need} nodes"
            out.append((nodes, why))
            n_live, n_queued, held = n_live + 1, n_queued + 1, held + nodes
            if s.failures:
                break  # after a failure, one request at a time: a probe, not a storm
            fake = View("", QUEUED, nodes)  # what it will take, the next request needs not
            rest = self._unserved(rest, [fake])
        if s.limit is None:
            self._said_limit = None
        return out

    def _need(self, n: Need) -> int:
        return (
            node_need(n.ranks, n.cores_per_rank, n.gpus_per_rank, self.node_cores, self.node_gpus)
            or 0
        )

    def _drop_never(self, unserved: list[Need], events: list) -> list[Need]:
        """The tasks an allocation within the limits can hold (the others are said once)."""
        L, out = self.limits, []
        for n in unserved:
            need = node_need(
                n.ranks, n.cores_per_rank, n.gpus_per_rank, self.node_cores, self.node_gpus
            )
            why = None
            if need is None:
                why = (
                    f"a rank ({n.cores_per_rank} cores, {n.gpus_per_rank} GPUs) fits no node "
                    f"({self.node_cores} cores, {self.node_gpus} GPUs)"
                )
            elif L.max_nodes is not None and need > L.max_nodes:
                why = f"it needs {need} nodes, more than max_nodes={L.max_nodes}"
            elif n.duration is not None and n.duration + L.margin > L.runtime:
                why = (
                    f"its duration {n.duration:g} s (+ {L.margin:g} s margin) exceeds the "
                    f"allocations' runtime {L.runtime:g} s"
                )
            if why is None:
                out.append(n)
                continue
            self.status.never[n.uid] = why
            if n.uid not in self._said_never:
                self._said_never.add(n.uid)
                events.append((LIMIT, f"{n.uid} can never start: {why}"))
        return out

    def _size(self, rest: list[Need], free: int | None) -> tuple[int, list[Need]] | None:
        """(nodes, the tasks sized for) of the next request, or None if max_nodes leaves
        room for none of them."""
        L = self.limits
        fitting = [n for n in rest if free is None or self._need(n) <= free]
        if not fitting:
            return None
        cores = sum(n.cores for n in fitting) * L.parallelism
        per = self.node_cores or 0
        by_work = math.ceil(cores / per) if per else L.nodes
        nodes = max(min(max(by_work, L.min_nodes), L.nodes), max(self._need(n) for n in fitting))
        if free is not None:
            nodes = min(nodes, free)
        return max(1, nodes), fitting

    def _hold(self, why: str, events: list) -> None:
        self.status.limit = why
        if self._said_limit != why:
            self._said_limit = why
            events.append((LIMIT, f"tasks wait, but no request: {why}"))

    # -- what explain says -----------------------------------------------------------------
    def why_waiting(self, uid: str | None = None) -> str:
        """The sentence for a task the policy holds."""
        s, L = self.status, self.limits
        text = (
            f"waiting for an allocation ({s.queued} queued, {s.running} of {L.max_pilots} running)"
        )
        if uid is not None and uid in s.never:
            return text + f": no allocation can hold it: {s.never[uid]}"
        if s.paused:
            return text + f"; the policy is paused: {s.paused}"
        if s.backoff_until is not None:
            return text + f"; after {s.failures} failed submission(s), backing off"
        if s.limit:
            return text + f"; no new request: {s.limit}"
        return text
