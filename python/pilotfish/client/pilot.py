"""Pilots: placeholder jobs, each running one agent, and the manager that submits them.

A pilot's messages reach it through the session's router: the manager attaches a listener
per pilot (Hello, Bye, Heartbeat, Missing, Resized); its tasks' Updates go to the session's
task registry and its service groups' news to the groups, without passing here.

The manager is the one writer of its pilots' states (_advance, then Pilot._move, guarded by
_transitions.PILOT_LEGAL). What it needs besides is in rooms of their own, met through what
they declare: launching.py starts a pilot's agent (its configuration, its batch job) and
follows the batch jobs (JobWatcher, told what it may do through launching.WatchHost);
resume.py reads a resumed session's journal and says which journaled pilot a description
submitted again matches, and whether its agent may still live. A Pilot's grown units (grow,
shrink) and the resizes it waits for are elastic.py's GrownUnits; what it keeps on its side
for its tasks (stage_in/out, prepare_env's venvs, pilot.json) is _pilot_data.py's.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import threading
import time
from typing import Callable, Iterable

from .. import _events as E
from .. import _wire
from .. import states as S
from .._errors import PilotfishError
from .._journal import pilot_record
from .._util import machine_shape
from ..batch import BatchJob
from ..descriptions import (
    PilotDescription,
    check_descriptions,
    declared_shape,
    misfit_partitions,
    partition_layout,
)
from ._transitions import PILOT_LEGAL, check
from ._pilot_data import ENV_KEYS, make_env, stage_shared, write_pilot_info
from .elastic import GrownUnits
from .launching import Followed, JobWatcher, WatchHost, agent_config, start_agent
from .resume import local_agent, stop_stale_agent
from .session import Session

log = logging.getLogger("pilotfish.client")


class Pilot:
    """One pilot: its description, state, history and (once ACTIVE) its nodes."""

    def __init__(self, pmgr: "PilotManager", uid: str, description: PilotDescription, sandbox: str):
        self.uid = uid
        self.description = description
        self.sandbox = sandbox
        self.state = S.NEW  # changed by _move() only (_transitions.PILOT_LEGAL)
        self.history: list[tuple[str, float]] = []
        self.reason: str | None = None
        # the end asked for (cancel, close: final state, reason); the first request wins
        self._wanted: tuple[str, str] | None = None
        self._nodes: list[_wire.NodeInfo] = []  # what the agent said (Hello, Resized)
        self.launcher: str | None = None
        self._pmgr = pmgr
        self._job: BatchJob | None = None
        self._bye: _wire.Bye | None = None
        self._shape = _declared_shape(description)  # per-node (cores, gpus, mem) or None
        self._parts: tuple | None = None  # (the _shape they were cut from, partition shapes)
        self._misfits: dict[tuple, tuple[str, str] | None] = {}  # request shape -> misfit
        self._resync: list[str] | None = None  # re-attaching: the tasks to ask the agent about
        self._resynced = threading.Event()  # the agent answered (Missing came)
        self._resync_asked = float("-inf")  # when we last asked (monotonic)
        self._missing: set[str] = set()
        self.envs: dict[str, dict] = {}  # prepared environments: name -> {type, path, pre_exec}
        self.simulated = description.resource == "simulated"
        """Its resource is "simulated": no agent runs, tasks last their `duration`."""
        self._final_listeners: list[Callable[["Pilot"], None]] = []  # (when_final)
        self.fn_sent: set[bytes] = set()
        """Digests of the callables its agent was sent (TaskManager.submit_tasks, under
        session.plane.fn_lock): a call of one of them names it instead of carrying it."""
        self._grown = GrownUnits(uid)  # grown units (grow, shrink) and their resizes
        self._replies = threading.Condition()  # the agent's answers to Explain
        self._explained: dict[str, list[dict]] = {}  # Explain token -> the agent's answer

    @property
    def nodes(self) -> list[_wire.NodeInfo]:
        """The pilot's nodes (name, cores, gpus, mem MiB), grown ones included. They are known
        once the agent runs (the pilot is ACTIVE): right after submit_pilots this waits for
        that -- bound the wait with `pilot.wait(pf.ACTIVE, timeout=...)` first. Raises
        PilotfishError, with the pilot's reason, if it ended before its agent ran; and inside a
        pilot or task callback (which runs on the thread that would bring the nodes) if they
        are not known yet, instead of waiting for ever."""
        if self._nodes:
            return self._nodes
        if self.state not in S.FINAL:
            if threading.current_thread().name == "pilotfish-bridge":
                raise PilotfishError(
                    f"{self.uid} is {self.state}: its nodes are known once it "
                    f"is ACTIVE (a callback cannot wait for that: it would "
                    f"block the thread that brings them)"
                )
            self.wait([S.ACTIVE])
        if not self._nodes:
            raise PilotfishError(
                f"{self.uid} ended {self.state} before its agent ran, so its "
                f"nodes were never known: {self.reason or 'no reason given'}"
            )
        return self._nodes

    @property
    def shape(self) -> list[tuple[int, int, int]] | None:
        """Per-node (cores, gpus, mem MiB): declared, or as discovered once ACTIVE."""
        return self._shape

    @property
    def partition_shapes(self) -> list[list[tuple[int, int, int]]] | None:
        """The shape of each partition (see PilotDescription.partitions): a task must fit
        one of them."""
        shape = self._shape
        if shape is None:
            return None
        if self._parts is None or self._parts[0] is not shape:  # cut once per shape
            d = self.description
            units = self._grown.node_lists()
            grown = sum(len(nodes) for nodes in units)
            own = shape[: len(shape) - grown]  # the pilot's own nodes, then each grown unit's
            parts = [
                own[first : first + n]
                for first, n, _ in partition_layout(len(own), d.partitions, d.launcher)
            ]
            parts += [[(n.cores, n.gpus, n.mem) for n in nodes] for nodes in units]
            self._parts = (shape, parts)
            self._misfits = {}
        return self._parts[1]

    def misfit(
        self, ranks: int, cores_per_rank: int, gpus_per_rank: int, mem_per_rank: int
    ) -> tuple[str, str] | None:
        """(field, why) if no partition of this pilot can ever hold the request, else None
        (None also while its shape is unknown). Memoized per request shape: misfit is
        O(nodes), and a bulk submit asks for every task."""
        shapes = self.partition_shapes
        if shapes is None:
            return None
        key = (ranks, cores_per_rank, gpus_per_rank, mem_per_rank)
        try:
            return self._misfits[key]
        except KeyError:
            r = self._misfits[key] = misfit_partitions(*key, shapes)
            return r

    @property
    def shared(self) -> str:
        """The pilot's shared data directory, <sandbox>/tasks/shared/: what pilot:///path in a
        task's staging names."""
        return os.path.join(self.sandbox, "tasks", "shared")

    def stage_in(self, directives) -> list[str]:
        """Copy (or link, move) client-side files into the pilot's shared directory, where
        tasks stage them from with pilot:///name. directives: paths or {source, target,
        action} dicts, as in TaskDescription.input_staging (target relative to the shared
        directory, or pilot:///target). The pilot's sandbox must be on a file system the
        client sees (local pilots; batch pilots on a shared file system). Returns the paths
        written."""
        return stage_shared(self.shared, self.sandbox, directives, inbound=True)

    def stage_out(self, directives) -> list[str]:
        """Copy files from the pilot's shared directory to the client's side (sources:
        relative to it or pilot:///name; targets: client paths). Returns the paths written."""
        return stage_shared(self.shared, self.sandbox, directives, inbound=False)

    ENV_KEYS = ENV_KEYS  # (prepare_env's spec keys)

    def prepare_env(self, name: str, spec: dict | None = None) -> dict:
        """Prepare a named environment on the pilot's nodes, for tasks that say
        TaskDescription(named_env=name). Blocks until it is ready; returns its record.

        spec: {"type": "venv" (default) | "shell", "pre_exec": [shell lines run before every
        task in it], "packages": [pip requirements, installed into the venv], "python": the
        interpreter the venv is made from (default: this client's), "system_site_packages":
        bool (default False), "timeout": seconds (default 600)}. A venv is made by a task on
        this pilot (so on its nodes, under <sandbox>/env/<name>) and activated before each
        task's pre_exec. Raises ValueError for a bad name or spec, PilotfishError (with the
        setup task's stderr) when the setup fails."""
        record = make_env(self._pmgr.session, self, name, spec)
        self.envs[name] = record
        return record

    def wait(self, state: str | Iterable[str] | None = None, timeout: float | None = None) -> str:
        """Block until the pilot reaches `state` (a state or several, e.g. pf.ACTIVE) or any
        final state (DONE, FAILED, CANCELED) -- state None: a final state only -- or until
        `timeout` seconds passed; returns the state it is in then (`reason` says why it ended)."""
        return self._pmgr.wait_pilots([self.uid], state=state, timeout=timeout)[0]

    # -- elasticity --------------------------------------------------------------------------
    def grow(self, nodes: int = 1, timeout: float | None = 600.0) -> list[str]:
        """Add `nodes` nodes to the running pilot; returns their names once the agent can
        place tasks on them. A local (or emulated) pilot adds nodes of its declared shape; a
        Slurm pilot submits a batch job of that many nodes (PSI/J) whose nodes join this
        pilot's agent as a partition of their own, launched into with srun. Each grow is a
        unit that shrink() gives back whole."""
        from .._errors import DescriptionError

        if type(nodes) is not int or nodes < 1:
            raise DescriptionError("Pilot.grow", "nodes", nodes, "must be an integer >= 1")
        if self.state != S.ACTIVE:
            raise PilotfishError(f"grow: {self.uid} is {self.state}, not ACTIVE")
        d = self.description
        if d.resource == "simulated":
            raise PilotfishError("grow: a simulated pilot does not grow")
        unit = self._grown.name_next()
        job = None
        launcher, options = None, {}
        deadline = None if timeout is None else time.monotonic() + timeout
        from ..batch import batch_system

        if d.resource == "local":
            cores, gpus, mem = self._shape[0] if self._shape else machine_shape()
            infos = [
                _wire.NodeInfo(f"{self.uid}.{unit}.n{i}", cores, gpus, mem) for i in range(nodes)
            ]
        elif batch_system(d.resource).grows:
            from ..batch.holder import submit_holder

            job, infos = submit_holder(self, unit, nodes, deadline)
            launcher, options = "srun", {"srun": {"jobid": job.native_id}}
        else:
            raise PilotfishError(f"grow: a {d.resource} pilot does not grow (local and slurm do)")
        self._grown.add(unit, infos, job)
        try:
            r = self._resize(_wire.Grow(unit, infos, launcher, options), unit, deadline)
        except BaseException:
            self._grown.drop(unit)
            if job is not None:
                job.cancel()
            raise
        if r.error:
            self._grown.drop(unit)
            if job is not None:
                job.cancel()
            raise PilotfishError(f"grow of {self.uid}: {r.error}")
        return [n.name for n in infos]

    def shrink(self, nodes: int | list[str] = 1, timeout: float | None = 600.0) -> list[str]:
        """Give back grown nodes: `nodes` is a count (the newest grown units that add up to
        it) or their names (whole units). Their nodes are drained first -- nothing new is
        placed there; restartable tasks (TaskDescription(restartable=True)) are stopped and
        queued again elsewhere, service members leave and are replaced elsewhere, other
        tasks finish -- then released (a Slurm unit's job ends). Returns the names given
        back. A pilot's own nodes are its batch job's and are not shrunk."""
        from .._errors import DescriptionError

        units = self._grown.select(nodes, {n.name for n in self._nodes})
        if self.state != S.ACTIVE:
            raise PilotfishError(f"shrink: {self.uid} is {self.state}, not ACTIVE")
        deadline = None if timeout is None else time.monotonic() + timeout
        self._grown.expect(units)
        self._send(_wire.Shrink(units))
        names = []
        errors = []
        for u in units:  # (each unit's job ends as its Resized arrives: GrownUnits.answered)
            infos = self._grown.nodes_of(u)
            r = self._grown.wait(u, deadline, self._state)
            if r.error:
                errors.append(r.error)
            else:
                names += [n.name for n in infos]
        if errors:
            raise DescriptionError("Pilot.shrink", "nodes", nodes, "; ".join(errors))
        return names

    def _send(self, msg) -> None:
        self._pmgr.session.plane.bridge.send(self.uid, _wire.encode(msg))

    @property
    def missing(self) -> set[str]:
        """Re-attached on resume: the tasks asked about that its agent did not know."""
        return self._missing

    @property
    def resync(self) -> list[str] | None:
        """Re-attached on resume: the tasks its agent was asked about (None: a pilot of
        this run, not re-attached)."""
        return self._resync

    def explain_tasks(self, uids: list[str], timeout: float) -> list[dict] | None:
        """The agent's explanations of these tasks (agent/explain.py; Task.explain reads
        them), or None if it did not answer within timeout (or the pilot is not ACTIVE)."""
        if self.state != S.ACTIVE:
            return None
        token = secrets.token_hex(8)
        self._send(_wire.Explain(token, list(uids)))
        deadline = time.monotonic() + timeout
        with self._replies:
            while token not in self._explained:
                left = deadline - time.monotonic()
                if left <= 0 or self.state in S.FINAL:
                    return None
                self._replies.wait(min(left, 1.0))
            return self._explained.pop(token)

    def _move(self, to: str, t: float | None = None, reason: str | None = None) -> None:
        """The one place this pilot's state changes, with its history entry (at t, else
        now) and its reason, if given. The manager drops late and repeated news first
        (PilotManager._advance); a move PILOT_LEGAL lacks raises IllegalTransition (a bug in
        the client)."""
        check("pilot", self.uid, PILOT_LEGAL, self.state, to)
        self.state = to
        self.history.append((to, time.time() if t is None else t))
        if reason:
            self.reason = reason

    def _on_hello(self, msg: _wire.Hello) -> None:  # IO thread: its agent runs
        """What the agent found: its nodes, launcher and shape (pilot.json records them, for
        analytics and resume)."""
        self._nodes = msg.nodes
        self.launcher = msg.launcher
        self._shape = [(n.cores, n.gpus, n.mem) for n in msg.nodes]
        write_pilot_info(self.sandbox, self.uid, self.description, msg)

    def _on_bye(self, msg: _wire.Bye) -> None:  # IO thread: its agent has ended
        self._bye = msg

    def _ended(self) -> None:
        """After its final state: grown units go with it; resize and explain waits wake."""
        self._grown.end()
        with self._replies:
            self._replies.notify_all()

    def _on_explained(self, msg: _wire.Explained) -> None:  # IO thread
        with self._replies:
            self._explained[msg.token] = msg.items
            if len(self._explained) > 64:  # answers nobody waits for any more
                self._explained.pop(next(iter(self._explained)))
            self._replies.notify_all()

    def when_final(self, listener: Callable[["Pilot"], None]) -> None:
        """listener(pilot) once this pilot reaches a final state (a TaskManager it was added
        to ends the tasks it had there), before the pilot's callbacks run."""
        self._final_listeners.append(listener)

    def _resize(self, msg, unit: str, deadline: float | None) -> _wire.Resized:
        self._grown.expect([unit])
        self._send(msg)
        return self._grown.wait(unit, deadline, self._state)

    def _state(self) -> str:
        return self.state

    def _on_resized(self, msg: _wire.Resized) -> None:  # IO thread
        self._grown.resized(msg)  # (a unit whose nodes are gone leaves)
        if msg.error is None:
            self._nodes = list(msg.nodes)
            self._shape = [(n.cores, n.gpus, n.mem) for n in msg.nodes]
            self._pmgr.session.events.record(self.uid, E.PILOT_NODES, str(len(msg.nodes)), msg.t)
        self._grown.answered(msg)  # (then its waiter wakes)

    def cancel(self) -> None:
        """Cancel this pilot (PilotManager.cancel_pilots): its agent stops, its running tasks
        end CANCELED, its batch job ends. Returns at once; wait() waits."""
        self._pmgr.cancel_pilots([self.uid])

    def __repr__(self) -> str:
        return f"<Pilot {self.uid} {self.state}>"


_declared_shape = declared_shape  # (descriptions.py: the one rule, validate's too)


class PilotManager:
    """Submits pilots through batch adapters and follows their state."""

    poll_interval = 0.2  # seconds between batch-job polls while a pilot starts or stops
    idle_poll_interval = 2.0  # while every pilot is ACTIVE (the agent's connection is live)

    def __init__(self, session: Session):
        session.plane.check_open()
        self.session = session
        self.pilots: dict[str, Pilot] = {}
        self._callbacks: list[Callable[[Pilot, str], None]] = []
        self._cond = threading.Condition()
        plane = session.plane
        self._watcher = JobWatcher(  # follows the batch jobs; says what it saw, here
            WatchHost(
                pilots=lambda: list(self.pilots.values()),
                view=self._view,
                finish=self._finish,
                lost=self._lost,
                last_seen=lambda: plane.bridge.last_seen,
                agent_timeout=session.agent_timeout,
                intervals=lambda: (self.poll_interval, self.idle_poll_interval),
            )
        )
        plane.pilot_closers.append(self._close)

    # -- public API -------------------------------------------------------------------------
    def submit_pilots(self, descriptions):
        """Validate and submit; returns a Pilot (or a list, given a list).

        In a resumed session the pilots are matched, in order, with those the session
        started before: one whose agent is still alive is re-attached (its tasks keep
        running), one that is gone is replaced by a new pilot of the same description.
        """
        self.session.plane.check_open()
        single = isinstance(descriptions, (PilotDescription, dict))
        descs = check_descriptions([descriptions] if single else descriptions, PilotDescription)
        pilots = []
        for d in descs:
            pilot, replaced = self._reattach(d)
            if pilot is None:
                uid = self.session.plane.next_pilot_uid()
                sandbox = d.sandbox or os.path.join(self.session.path, uid)
                pilot = Pilot(self, uid, d, sandbox)
                try:  # journaled before it exists: a journal that cannot take it (a full disk)
                    self.session.journal.write([pilot_record(uid, d.as_dict(), sandbox, replaced)])
                except OSError as e:  # fails the call, nothing started
                    raise self.session.plane.journal_error(
                        e, f"journal pilot {uid} (it was not started) in"
                    ) from e
                self.pilots[uid] = pilot
                self._advance(pilot, S.NEW)
                self._launch(pilot)
            pilots.append(pilot)
        self._watcher.start()
        return pilots[0] if single else pilots

    def wait_pilots(
        self,
        uids: Iterable[str] | str | None = None,
        state: str | Iterable[str] | None = None,
        timeout: float | None = None,
    ) -> list[str]:
        """Block until the pilots reach `state` (default ACTIVE... or any final state)."""
        pilots = self._select(uids)
        targets = {state} if isinstance(state, str) else set(state or S.FINAL)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if all(p.state in targets or p.state in S.FINAL for p in pilots):
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
        return [p.state for p in pilots]

    def cancel_pilots(self, uids: Iterable[str] | str | None = None) -> None:
        """Cancel these pilots (uids; None: all of this manager's): their agents stop, their
        tasks end CANCELED, their batch jobs end. Returns at once; wait_pilots() waits."""
        for p in self._select(uids):
            self._shutdown(p, S.CANCELED, "canceled by the user")

    def register_callback(self, cb: Callable[[Pilot, str], None]) -> None:
        """cb(pilot, state) after every state change (from a pilotfish thread)."""
        self._callbacks.append(cb)

    def unregister_callback(self, cb: Callable[[Pilot, str], None]) -> None:
        """cb is not called any more (once per register_callback of it); ValueError if it
        is not registered with this manager."""
        try:
            self._callbacks.remove(cb)
        except ValueError:
            raise ValueError(
                f"unregister_callback: cb {getattr(cb, '__qualname__', cb)!r} is not a "
                "callback of this PilotManager"
            ) from None

    def get_pilots(self, uids=None) -> list[Pilot]:
        """The Pilot objects of these uids (None: all of this manager's), in that order;
        PilotfishError for a uid this manager does not have."""
        return self._select(uids)

    def autoalloc(self, template, max_pilots: int = 3, idle_timeout="30s", **settings):
        """An allocation policy (autoalloc.AutoAlloc): pilots of `template` (a
        PilotDescription or dict) requested while tasks wait that no pilot will take, at most
        max_pilots at once, each ended once idle for idle_timeout. Add it to a TaskManager
        (tmgr.add_pilots(policy)); `settings` are AutoAlloc's. Returns the policy."""
        from .autoalloc import AutoAlloc

        return AutoAlloc(self, template, max_pilots, idle_timeout, **settings)

    def end_pilots(self, uids, reason: str, state: str = S.DONE) -> None:
        """End these pilots in `state` (DONE, or CANCELED) with `reason`: an allocation
        policy's pilot that is idle, or queued and no longer needed. Returns at once."""
        for p in self._select(uids):
            self._shutdown(p, state, reason)

    # -- internals --------------------------------------------------------------------------
    def _select(self, uids) -> list[Pilot]:
        if uids is None:
            return list(self.pilots.values())
        if isinstance(uids, str):
            uids = [uids]
        try:
            return [self.pilots[u] for u in uids]
        except KeyError as e:
            raise PilotfishError(f"no pilot {e.args[0]!r} in this manager") from None

    def _advance(
        self, pilot: Pilot, state: str, reason: str | None = None, t: float | None = None
    ) -> bool:
        with self._cond:
            if pilot.state in S.FINAL or (
                state != S.NEW and S.pilot_state_rank(state) <= S.pilot_state_rank(pilot.state)
            ):
                return False
            t = time.time() if t is None else t
            pilot._move(state, t, reason)
            self._cond.notify_all()
        self.session.events.record(pilot.uid, state, reason, t)
        if state in S.FINAL:
            for listener in list(pilot._final_listeners):
                listener(pilot)
            self.session.router.pilot_final(pilot.uid)  # its service groups
            pilot._ended()
        for cb in self._callbacks:
            try:
                cb(pilot, state)
            except Exception:
                log.exception("pilot callback failed")
        return True

    def _reattach(self, d: PilotDescription) -> tuple[Pilot | None, str | None]:
        """Resumed session: (the journaled pilot this description matches, re-attached if its
        agent answers within a few heartbeats, or None to start a new one; the uid of the
        journaled pilot a new one replaces, if any). What the journal says is resume.py's;
        the wiring of the re-attaching pilot is here."""
        r = self.session.resumed
        if r is None:
            return None, None
        m, replaced = r.match_pilot(d)
        if m is None:
            return None, replaced
        uid, sandbox = m.uid, m.sandbox
        local_pid, may_live = local_agent(sandbox)
        if not may_live:
            self.session.events.record(uid, S.FAILED, "agent gone while the client was away")
            if local_pid:  # its orphaned tasks must not finish unseen beside a replacement
                stop_stale_agent(local_pid, sandbox)
            r.learn(sandbox)  # what the agent journaled is known whatever happens next
            return None, uid
        pilot = Pilot(self, uid, m.description, sandbox)
        pilot._resync = r.unfinished_on(uid)
        pilot._move(S.NEW)  # (its first history entry: no event, no callback)
        self.pilots[uid] = pilot
        # until its agent answers, whatever it says is a cue to ask it again
        self.session.router.watch(uid, functools.partial(self._heard, pilot))
        self._attach(pilot, m.public_key)
        self._advance(pilot, S.LAUNCHING)
        # the agent beats every heartbeat_s; give it three, and the answer time
        if not pilot._resynced.wait(3 * self.session.heartbeat_s + 5):
            self.session.plane.bridge.forget(uid)
            del self.pilots[uid]
            self.session.events.record(uid, S.FAILED, "agent did not answer the resumed client")
            if local_pid:  # a replacement must not run what this one still runs
                stop_stale_agent(local_pid, sandbox)
            r.learn(sandbox)  # what it finished, up to now
            return None, uid
        self.session.events.record(uid, E.REATTACHED, f"{len(pilot._resync)} tasks asked")
        if m.changed is not None:
            log.warning(
                "resume: pilot %s still runs as it was submitted (%s); the changed "
                "description applies to the pilots this resume starts",
                uid,
                m.changed,
            )
        self._watcher.start()
        return pilot, None

    def _launch(self, pilot: Pilot) -> None:
        """Start a new pilot's agent: its configuration, its batch job (launching.py)."""
        config, public = agent_config(self.session, pilot.uid, pilot.description, pilot.sandbox)
        self._attach(pilot, public)
        try:
            pilot._job = start_agent(config, pilot.description)
        except Exception as e:  # noqa: BLE001 -- the pilot fails alone, with the reason
            self._advance(pilot, S.FAILED, f"cannot start the pilot: {e}")
            return
        self._advance(pilot, S.LAUNCHING)

    def _attach(self, pilot: Pilot, public_key: bytes | None) -> None:
        """Route the pilot's own messages here, then let its agent in."""
        self.session.router.attach(pilot.uid, functools.partial(self._on_agent, pilot))
        self.session.plane.bridge.allow(pilot.uid, public_key)

    def _heard(self, pilot: Pilot, msg) -> None:  # IO thread: a re-attaching pilot's watcher
        if not pilot._resynced.is_set() and not isinstance(msg, (_wire.Missing, _wire.Hello)):
            # a re-attaching agent speaks (a busy one streams updates and never needs to
            # beat): ask what became of our tasks, again each heartbeat until it answers
            now = time.monotonic()
            if now - pilot._resync_asked >= self.session.heartbeat_s:
                pilot._resync_asked = now
                self.session.plane.bridge.mark_connected(pilot.uid)
                self.session.plane.bridge.send(pilot.uid, _wire.encode(_wire.Resync(pilot._resync)))  # type: ignore[arg-type]  # set when re-attaching

    def _on_agent(self, pilot: Pilot, msg) -> None:  # IO thread: the pilot's own messages
        if isinstance(msg, _wire.Heartbeat):  # (only before a hello reaches the router)
            return
        if isinstance(msg, _wire.Missing):
            pilot._missing = set(msg.uids)
            pilot._resynced.set()
            self.session.router.unwatch(pilot.uid)  # answered: no more asking
            return
        if isinstance(msg, _wire.Hello):
            pilot._on_hello(msg)
            self._advance(pilot, S.ACTIVE, t=msg.t)
        elif isinstance(msg, _wire.Resized):
            pilot._on_resized(msg)
        elif isinstance(msg, _wire.Explained):
            pilot._on_explained(msg)
        elif isinstance(msg, _wire.Bye):
            pilot._on_bye(msg)
            self._watcher.poke()

    def _shutdown(self, pilot: Pilot, final: str, reason: str) -> None:
        """Ask the agent to stop; it cancels what runs and says bye. The watcher finishes up."""
        if pilot.state in S.FINAL:
            return
        if pilot._wanted is None:  # the first request wins: a pilot canceled then closed is
            pilot._wanted = (final, reason)  # CANCELED
        self._watcher.poke()
        if pilot.state == S.ACTIVE:
            if pilot._bye is None:  # (after its bye the agent is gone: nothing to tell it)
                self.session.plane.bridge.send(pilot.uid, _wire.encode(_wire.Shutdown(reason)))
        elif pilot._job is not None:  # not up yet: take the job away
            try:
                pilot._job.cancel()
            except Exception as e:  # noqa: BLE001 -- whatever the batch system says: logged
                log.warning("cancel of %s failed: %s", pilot.uid, e)
            self._advance(pilot, final, reason)

    def _view(self, pilot: Pilot) -> Followed:
        """The pilot as its JobWatcher sees it (launching.WatchHost.view)."""
        return Followed(
            pilot.uid,
            pilot.state,
            pilot.sandbox,
            pilot._job,
            pilot._bye is not None,
            pilot._wanted is not None,
        )

    def _lost(self, pilot: Pilot, reason: str) -> None:
        if pilot._job is not None:
            try:
                pilot._job.cancel()
            except Exception as e:  # noqa: BLE001 -- whatever the batch system says: logged
                log.warning("cancel of %s failed: %s", pilot.uid, e)
        else:  # re-attached: no job object to end it; a local agent's leftovers go here
            pid, _ = local_agent(pilot.sandbox)
            if pid:
                stop_stale_agent(pid, pilot.sandbox)
        self._advance(pilot, S.FAILED, reason)
        self.session.plane.bridge.forget(pilot.uid)

    def _finish(self, pilot: Pilot, job_state: str, message: str | None) -> None:
        bye = pilot._bye
        wanted = pilot._wanted
        if (
            wanted is not None
            and (bye is not None or job_state != "FAILED")
            and (bye is None or bye.reason == wanted[1])
        ):  # (else it had stopped on its own)
            self._advance(pilot, wanted[0], wanted[1])  # what the user asked for
        elif bye is not None:
            self._advance(pilot, bye.state, bye.reason)  # the agent ended on its own
        elif job_state == "CANCELED":
            self._advance(pilot, S.CANCELED, message or "batch job canceled")
        else:
            self._advance(
                pilot,
                S.FAILED,
                message or f"batch job ended ({job_state}) without the agent reporting",
            )
        self.session.plane.bridge.forget(pilot.uid)

    def _close(self, terminate: bool = True, grace: float = 30.0) -> None:
        live = [p for p in self.pilots.values() if p.state not in S.FINAL]
        for p in live:
            self._shutdown(p, S.DONE, "session closed")
        deadline = time.monotonic() + grace
        for p in live:
            left = max(0.0, deadline - time.monotonic())
            if p.wait(timeout=left) not in S.FINAL:
                if p._job is not None:
                    p._job.cancel()
                self._finish(p, "CANCELED", "did not stop within the grace period")
        self._watcher.stop(join=2)
