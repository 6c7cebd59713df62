"""Allocations that follow the work: pilots requested and ended from what waits.

    policy = pmgr.autoalloc(pf.PilotDescription(resource="slurm", nodes=2, runtime="1h",
                                                 queue="debug"),
                            max_pilots=3, idle_timeout="30s")
    tmgr.add_pilots(policy)          # its tasks wait in the client until a pilot has room
    tmgr.submit_tasks(...)           # -> pilots are requested, fed, and ended when idle

An AutoAlloc serves the TaskManagers it is added to: what they submit is held in the client
(_held.py: registered, SCHEDULING, not sent) and goes to one of the policy's running pilots
once it has room there. The decisions are _alloc_core.Policy's (demand in, decisions out;
its docstring has the rules: dispatch, demand, size, walltime, idle, failures); this module
is their I/O: it builds what the policy sees from the pilots and the held tasks, and carries
out each step -- sends tasks (TaskBooks.release_tasks), submits pilots of the template
(PilotManager.submit_pilots, the template's nodes set to the request's size), ends idle ones
DONE and cancels queued ones no longer needed (PilotManager.end_pilots) -- on a thread of its
own, which steps every `tick` seconds and whenever a task is submitted or ends.

The same settings come from a workload file's `autoalloc:` section (`pilotfish run`,
`pilotfish simulate --autoalloc`: the model of _alloc_sim.py), pf.Executor(autoalloc=...)
and Parsl's blocks (pilotfish.parsl: max_blocks, min_blocks, init_blocks, parallelism,
max_idletime).

Every decision is an event of the session (uid alloc.NNNN: _events' ALLOC_*; a held task's
ROUTED when it is sent), and where the policy stands is in <session>/autoalloc.json (0600),
which `pilotfish explain` and the dashboard read. task.explain() of a held task says
"waiting for an allocation (1 queued, 2 of 3 running)", and why no request goes out (paused
after failures, backing off, a limit). A resumed session cannot use a policy yet.

Pilots of the user's own, added to a TaskManager the policy serves (before or after the
policy), take that manager's held tasks as the policy's running pilots do (a queued one
counts against the demand); the policy never ends or cancels them and counts them in no
limit (_alloc_core's "kept").

A submission the batch system rejects fails its pilot at once with the batch system's words
(launching.start_agent); the policy counts it, backs off, and pauses after max_failures in
a row (resume() goes on). The held tasks are not touched: nothing is lost, they wait.
Tasks that ask for a pilot by name or a named environment, or that no allocation within
the limits can hold, are refused at submit, naming the field.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from typing import Any

from .. import _events as E
from .. import states as S
from .._errors import DescriptionError, PilotfishError
from .._inert import one_line
from .._util import parse_duration, read_private, write_private
from ..descriptions import PilotDescription, check_descriptions
from . import _alloc_core as core
from ._alloc_core import ENDED, QUEUED, RUNNING, Limits, Need, Policy, View

log = logging.getLogger("pilotfish.client")

STATUS_FILE = "autoalloc.json"  # in the session directory: where each policy stands
WORDS_MAX = 2000  # characters of a failed request's words kept (events, explain, the file)

_KINDS = {  # _alloc_core's event kinds -> _events' names
    core.SUBMIT: E.ALLOC_SUBMIT,
    core.FAIL: E.ALLOC_FAIL,
    core.PAUSE: E.ALLOC_PAUSE,
    core.RESUME: E.ALLOC_RESUME,
    core.END: E.ALLOC_END,
    core.CANCEL: E.ALLOC_CANCEL,
    core.LIMIT: E.ALLOC_LIMIT,
}
_uids = itertools.count()


def _seconds(field: str, v: Any, lo: float = 0.0) -> float:
    try:
        x = parse_duration(v)
    except ValueError as e:
        raise DescriptionError("AutoAlloc", field, v, str(e)) from None
    if not x >= lo:
        raise DescriptionError("AutoAlloc", field, v, f"must be at least {lo:g} s")
    return x


def _count(field: str, v: Any, lo: int, none: bool = False) -> Any:
    if v is None and none:
        return None
    if type(v) is not int or v < lo:
        raise DescriptionError(
            "AutoAlloc", field, v, f"must be an integer >= {lo}" + (" or None" if none else "")
        )
    return v


def _fraction(field: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise DescriptionError("AutoAlloc", field, v, f"must be a number in [{lo:g}, {hi:g}]")
    return float(v)


def limits_of(template: PilotDescription, max_pilots: Any, idle_timeout: Any, **kw: Any) -> Limits:
    """The policy's Limits from the user's settings, each checked (DescriptionError naming
    the field, the value and why)."""
    known = {
        "max_queued",
        "max_nodes",
        "min_nodes",
        "parallelism",
        "prefetch",
        "margin",
        "max_failures",
        "backoff",
        "backoff_max",
        "min_pilots",
        "init_pilots",
    }
    unknown = sorted(set(kw) - known)
    if unknown:
        raise DescriptionError(
            "AutoAlloc",
            unknown[0],
            kw[unknown[0]],
            f"unknown setting (known: {', '.join(sorted(known))})",
        )
    lim = Limits(
        max_pilots=_count("max_pilots", max_pilots, 1),
        max_queued=_count("max_queued", kw.get("max_queued"), 1, none=True),
        max_nodes=_count("max_nodes", kw.get("max_nodes"), 1, none=True),
        nodes=template.nodes,
        min_nodes=_count("min_nodes", kw.get("min_nodes", 1), 1),
        runtime=template.runtime,
        cores_per_node=template.cores_per_node,
        gpus_per_node=template.gpus_per_node,
        idle_timeout=_seconds("idle_timeout", idle_timeout),
        parallelism=_fraction("parallelism", kw.get("parallelism", 1.0), 0.01, 1.0),
        prefetch=_fraction("prefetch", kw.get("prefetch", 0.25), 0.0, 10.0),
        margin=_seconds("margin", kw.get("margin", "10s")),
        max_failures=_count("max_failures", kw.get("max_failures", 3), 1),
        backoff=_seconds("backoff", kw.get("backoff", "5s"), 0.1),
        backoff_max=_seconds("backoff_max", kw.get("backoff_max", "5m"), 0.1),
        min_pilots=_count("min_pilots", kw.get("min_pilots", 0), 0),
        init_pilots=_count("init_pilots", kw.get("init_pilots", 0), 0),
    )
    for name in ("min_pilots", "init_pilots"):
        if getattr(lim, name) > lim.max_pilots:
            raise DescriptionError(
                "AutoAlloc", name, getattr(lim, name), f"more than max_pilots ({lim.max_pilots})"
            )
    if lim.min_nodes > lim.nodes:
        raise DescriptionError(
            "AutoAlloc", "min_nodes", lim.min_nodes, f"more than the template's nodes ({lim.nodes})"
        )
    if lim.max_nodes is not None and lim.max_nodes < lim.min_nodes:
        raise DescriptionError(
            "AutoAlloc", "max_nodes", lim.max_nodes, f"less than min_nodes ({lim.min_nodes})"
        )
    return lim


class AutoAlloc:
    """An allocation policy on a PilotManager (PilotManager.autoalloc makes it)."""

    def __init__(
        self,
        pmgr: Any,
        template: Any,
        max_pilots: int = 3,
        idle_timeout: Any = "30s",
        tick: Any = "1s",
        **settings: Any,
    ) -> None:
        session = pmgr.session
        session.plane.check_open()
        if session.resumed is not None:
            raise PilotfishError(
                "autoalloc: a resumed session cannot use an allocation policy yet (its "
                "journal's tasks keep their pilots); resume with pilots submitted by hand"
            )
        (self.template,) = check_descriptions([template], PilotDescription)
        self.limits = limits_of(self.template, max_pilots, idle_timeout, **settings)
        self.tick = _seconds("tick", tick, 0.05)
        self.uid = f"alloc.{next(_uids):04d}"
        self.pilots: list[Any] = []
        """The pilots it requested, in order (ended ones too)."""
        self._pmgr = pmgr
        self._session = session
        self._policy = Policy(self.limits)
        self._lock = threading.Lock()
        self._held: list[tuple[Any, Any, Need]] = []  # (task, its manager, its Need), in order
        self._sent: dict[str, list[Any]] = {}  # pilot uid -> the tasks sent there, not ended
        self._served: list[Any] = []
        self._failed_submits: list[View] = []  # submit_pilots raised: counted as failures
        self._wake = threading.Event()
        self._closed = False
        self._status_text: dict | None = None  # what autoalloc.json says of it
        self._said: str | None = None
        self._written = float("-inf")
        if self.template.resource not in ("local", "simulated"):
            try:  # (PSI/J warns when it is first imported on another thread than the main one)
                import psij  # noqa: F401 -- imported for its side effect only
            except ImportError:
                pass  # (said when a pilot is submitted)
        self._thread = threading.Thread(target=self._run, name=f"pilotfish-{self.uid}", daemon=True)
        L = self.limits
        session.events.record(
            self.uid,
            E.ALLOC_POLICY,
            json.dumps(
                {
                    "resource": self.template.resource,
                    "nodes": L.nodes,
                    "runtime": L.runtime,
                    "max_pilots": L.max_pilots,
                    "max_queued": L.max_queued,
                    "max_nodes": L.max_nodes,
                    "idle_timeout": L.idle_timeout,
                }
            ),
        )
        session.plane.task_closers.append(self.close)
        pmgr.register_callback(self._on_pilot)
        self._thread.start()

    # -- the user's ------------------------------------------------------------------------
    @property
    def status(self) -> dict:
        """Where it stands: queued, running, waiting (tasks held), unserved, paused (why),
        limit (what holds the next request back), failures, requested, ended."""
        s = self._policy.status
        return {
            "queued": s.queued,
            "running": s.running,
            "waiting": s.waiting,
            "unserved": s.unserved,
            "paused": s.paused,
            "limit": s.limit,
            "failures": s.failures,
            "requested": s.requested,
            "ended": s.ended,
            "max_pilots": self.limits.max_pilots,
        }

    def resume(self) -> None:
        """Request allocations again after it paused on failures."""
        if self._policy.resume():
            self._session.events.record(self.uid, E.ALLOC_RESUME, "resumed by the user")
        self.poke()

    def why_waiting(self, uid: str) -> str:
        """Why a task it holds waits (Task.explain adds it)."""
        return self._policy.why_waiting(uid)

    def close(self) -> None:
        """Stop deciding (the session's close calls it first): held tasks end CANCELED; its
        pilots end with the session (or with PilotManager.cancel_pilots)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = [(t, o) for t, o, _ in self._held]
            self._held = []
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        views = [self._view(p, time.time()) for p in self.pilots]  # its last look: the ends
        for kind, detail in self._policy.step(time.monotonic(), [], views).events:  # counted
            self._session.events.record(self.uid, _KINDS[kind], detail)  # (no decision taken)
        self._written = float("-inf")  # (its last counts, said)
        self._write_status()
        by_owner: dict[int, tuple[Any, list]] = {}
        for t, owner in held:
            by_owner.setdefault(id(owner), (owner, []))[1].append(t)
        for owner, tasks in by_owner.values():
            owner.finish_locally(
                tasks, S.CANCELED, "the policy closed before an allocation took it"
            )

    # -- a TaskManager's (_ports.TaskHolder) -----------------------------------------------
    def serve(self, tmgr: Any) -> None:
        """TaskManager.add_pilots(policy): hold what tmgr submits, for this policy's pilots."""
        if tmgr.holder is self:
            return
        if tmgr.holder is not None:
            raise PilotfishError(f"{tmgr!r} is served by {tmgr.holder.uid} already")
        if tmgr.session is not self._session:
            raise PilotfishError(f"{self.uid} serves TaskManagers of its own session only")
        tmgr.holder = self
        tmgr.register_callback(self._on_task)
        self._served.append(tmgr)

    def check(self, descs: list) -> None:
        """A task no allocation within the limits can ever hold is refused at submit."""
        L = self.limits
        pol = self._policy
        for i, d in enumerate(descs):
            v = d.values
            if v.get("pilot") is not None:
                raise DescriptionError(
                    "TaskDescription",
                    "pilot",
                    d.pilot,
                    f"a task of a TaskManager that {self.uid} serves goes "
                    "where the policy sends it: name no pilot",
                    index=i,
                )
            if v.get("named_env") is not None:
                raise DescriptionError(
                    "TaskDescription",
                    "named_env",
                    d.named_env,
                    "the policy's pilots have no prepared environments",
                    index=i,
                )
            dur = v.get("duration")
            if self.template.resource == "simulated" and dur is None:
                raise DescriptionError(
                    "TaskDescription",
                    "duration",
                    None,
                    "required: the policy's pilots are simulated",
                    index=i,
                )
            if dur is not None and dur + L.margin > L.runtime:
                raise DescriptionError(
                    "TaskDescription",
                    "duration",
                    dur,
                    f"longer than the policy's allocations' runtime "
                    f"{L.runtime:g} s less the margin {L.margin:g} s",
                    index=i,
                )
            n = Need("", v.get("ranks", 1), v.get("cores_per_rank", 1), v.get("gpus_per_rank", 0))
            need = core.node_need(
                n.ranks, n.cores_per_rank, n.gpus_per_rank, pol.node_cores, pol.node_gpus
            )
            if need is None:
                raise DescriptionError(
                    "TaskDescription",
                    "cores_per_rank",
                    n.cores_per_rank,
                    f"a rank fits no node of the policy's pilots "
                    f"({pol.node_cores} cores, {pol.node_gpus} GPUs)",
                    index=i,
                )
            if L.max_nodes is not None and need > L.max_nodes:
                raise DescriptionError(
                    "TaskDescription",
                    "ranks",
                    n.ranks,
                    f"needs {need} nodes, more than max_nodes={L.max_nodes}",
                    index=i,
                )

    def held(self, owner: Any, tasks: list) -> None:
        with self._lock:
            if not self._closed:
                self._held.extend((t, owner, _need(t)) for t in tasks)
                tasks = []
        if tasks:  # (closed: finished here, outside the lock)
            owner.finish_locally(
                tasks, S.CANCELED, "the policy closed before an allocation took it"
            )
        self._wake.set()

    def poke(self) -> None:
        """Step soon (a task was submitted or ended, a pilot changed)."""
        self._wake.set()

    def _on_task(self, task: Any, state: str) -> None:  # IO thread
        if state in S.FINAL:
            self._wake.set()

    # -- the loop --------------------------------------------------------------------------
    def _run(self) -> None:
        took = 0.0
        while True:
            self._wake.wait(self.tick)
            if self._closed:
                return
            # pokes come with every task that ends: steps at most every 0.05 s, and never
            # more than a quarter of the time (a step reads every held task: 50,000 ~ 50 ms)
            time.sleep(max(0.05, 3 * took))
            self._wake.clear()
            t0 = time.monotonic()
            try:
                self.step()
            except Exception:  # the policy lives on; said in the log
                log.exception("%s: a step failed", self.uid)
            took = time.monotonic() - t0

    def step(self) -> None:
        """One round: what the policy sees, its decisions, carried out."""
        now = time.monotonic()
        wall = time.time()
        with self._lock:
            if self._closed:
                return
            held = self._held = [h for h in self._held if h[0].state == S.SCHEDULING]
        needs = [n for _, _, n in held]
        kept = self._kept()
        views = [self._view(p, wall) for p in self.pilots] + self._failed_submits
        views += [self._view(p, wall).as_kept() for p in kept]
        self._failed_submits = []
        step = self._policy.step(now, needs, views)
        ev = self._session.events
        for kind, detail in step.events:
            ev.record(self.uid, _KINDS[kind], detail)
        by_uid = {t.uid: (t, o) for t, o, _ in held} if step.dispatch else {}
        pilots = {p.uid: p for p in self.pilots + kept}
        for puid, uids in step.dispatch.items():
            self._send(pilots[puid], [by_uid[u] for u in uids])
        for uid, why in step.end:
            self._pmgr.end_pilots([uid], f"{self.uid}: {why}", S.DONE)
        for uid, why in step.cancel:
            self._pmgr.end_pilots([uid], f"{self.uid}: {why}", S.CANCELED)
        for nodes, why in step.submit:
            if not self._submit(nodes, why):
                break  # the batch system said no: the policy hears it before asking again
        self._write_status()

    def _kept(self) -> list:
        """The user's own pilots: those added to a TaskManager this policy serves."""
        mine = {p.uid for p in self.pilots}
        out: dict[str, Any] = {}
        for tmgr in self._served:
            for uid in tmgr.list_pilots():
                if uid not in mine and uid not in out:
                    out[uid] = tmgr.get_pilot(uid)
        return [p for p in out.values() if p is not None]

    def _send(self, pilot: Any, pairs: list) -> None:
        if pilot not in self.pilots:  # a user's pilot takes the tasks of its own managers
            pairs = [(t, o) for t, o in pairs if pilot.uid in o.list_pilots()]
        sent_uids = {t.uid for t, _ in pairs}
        with self._lock:
            self._held = [h for h in self._held if h[0].uid not in sent_uids]
        by_owner: dict[int, tuple[Any, list]] = {}
        for t, owner in pairs:
            by_owner.setdefault(id(owner), (owner, []))[1].append(t)
        out = self._sent.setdefault(pilot.uid, [])
        for owner, tasks in by_owner.values():
            out.extend(owner.release_tasks(tasks, pilot))

    def _submit(self, nodes: int, why: str) -> bool:
        """Request one allocation of `nodes` nodes; False if it failed at once."""
        d = self.template.as_dict()
        d["nodes"] = nodes
        if d.get("partitions") not in (None, 1):  # (a layout of the template's nodes)
            d.pop("partitions")
        try:
            pilot = self._pmgr.submit_pilots(PilotDescription(d))
        except Exception as e:  # noqa: BLE001 -- a failed request, counted as one
            words = one_line(f"{type(e).__name__}: {e}", WORDS_MAX)
            self._session.events.record(self.uid, E.ALLOC_SUBMIT, f"({nodes} nodes): {why}")
            self._policy.status.requested += 1
            self._failed_submits.append(
                View(
                    f"request.{self._policy.status.requested}", ENDED, nodes, failed=True, why=words
                )
            )
            self._wake.set()
            return False
        self.pilots.append(pilot)
        self._policy.status.requested += 1
        self._session.events.record(self.uid, E.ALLOC_SUBMIT, f"{pilot.uid} ({nodes} nodes): {why}")
        if pilot.state in S.FINAL:
            self._wake.set()  # (rejected at once: counted at the next step)
            return False
        return True

    def _on_pilot(self, pilot: Any, state: str) -> None:
        if state == S.ACTIVE or state in S.FINAL:
            self._wake.set()

    def _view(self, p: Any, wall: float) -> View:
        """A pilot as the policy sees it."""
        ran = any(s == S.ACTIVE for s, _ in p.history)
        if p.state in S.FINAL:
            return View(  # (the batch system's words: a peer's, made inert and bounded)
                p.uid,
                ENDED,
                p.description.nodes,
                ran=ran,
                failed=p.state == S.FAILED,
                why=one_line(f"{p.state}: {p.reason}", WORDS_MAX),
            )
        if p.state != S.ACTIVE:
            return View(p.uid, QUEUED, p.description.nodes)
        shape = p.shape or []
        out = [t for t in self._sent.get(p.uid, ()) if t.state not in S.FINAL]
        self._sent[p.uid] = out
        busy = sum(
            t.description.values.get("ranks", 1) * t.description.values.get("cores_per_rank", 1)
            for t in out
        )
        since = next((t for s, t in p.history if s == S.ACTIVE), wall)
        runtime = p.description.runtime
        left = since + runtime - min(60.0, max(1.0, 0.1 * runtime)) - wall  # (its drain)
        return View(
            p.uid,
            RUNNING,
            len(shape) or p.description.nodes,
            min((c for c, _, _ in shape), default=None),
            min((g for _, g, _ in shape), default=None),
            busy,
            left,
            ran=True,
        )

    def _write_status(self) -> None:
        """<session>/autoalloc.json: each policy's sentence, for `pilotfish explain`."""
        text = self._policy.why_waiting()
        mine = {"text": text, **self.status}
        now = time.monotonic()  # (the counts at most once a second; a new sentence at once)
        if mine == self._status_text or (text == self._said and now - self._written < 1.0):
            return
        self._status_text, self._said, self._written = mine, text, now
        path = os.path.join(self._session.path, STATUS_FILE)
        try:
            kept = json.loads(read_private(path))
            if not isinstance(kept, dict):
                kept = {}
        except (OSError, ValueError):
            kept = {}
        kept[self.uid] = mine
        try:
            write_private(path, json.dumps(kept).encode())
        except OSError as e:
            log.warning("%s: cannot write %s: %s", self.uid, path, e)

    def __repr__(self) -> str:
        s = self._policy.status
        return f"<AutoAlloc {self.uid} {s.queued} queued, {s.running} running, {s.waiting} waiting>"


def _need(t: Any) -> Need:
    """A held task as the policy sees it."""
    v = t.description.values
    return Need(
        t.uid,
        v.get("ranks", 1),
        v.get("cores_per_rank", 1),
        v.get("gpus_per_rank", 0),
        v.get("duration"),
    )


def waiting_text(session_dir: str) -> list[str]:
    """What the session's policies say about the tasks they hold (`pilotfish explain`)."""
    try:
        kept = json.loads(read_private(os.path.join(session_dir, STATUS_FILE)))
    except (OSError, ValueError):
        return []
    if not isinstance(kept, dict):
        return []
    return [
        f"{uid}: {v['text']}"
        for uid, v in sorted(kept.items())
        if isinstance(v, dict) and isinstance(v.get("text"), str)
    ]
