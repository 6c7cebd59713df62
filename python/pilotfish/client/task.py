"""Tasks and the TaskManager that submits them and follows them.

A submit runs the pipeline of submit.py (plan: check, route by the manager's Routing, give
uids; encode; write_journal; register; send); the manager makes and keeps the tasks it
registers and hears when their frames leave (_ports.SubmitOwner). A TaskManager sees its
pilots through _ports.PilotPort (it never imports pilot.py: a Pilot runs tasks of its own,
prepare_env). News of its tasks comes from the session's task registry
(_registry.TaskRegistry, which the router hands every agent's Updates and the adopter a
keeper's finals) as calls of apply_updates and finish_locally (_ports.TaskOwner), on the IO
thread.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import threading
import time
from typing import Any, Callable, Iterable

import msgspec

from .. import _explain, _wire
from .. import states as S
from .._errors import PilotfishError
from .._journal import final_record
from .._util import gc_paused
from ..descriptions import TaskDescription
from . import _held, submit
from .submit import cores
from ._ports import PilotPort, TaskHolder
from ._transitions import TASK_LEGAL, check
from .progress import wait_with_progress
from .services import submit_group
from .session import Session

log = logging.getLogger("pilotfish.client")


class Task:
    """A task as the client sees it. Fields are filled in as the agent reports."""

    __slots__ = (
        "uid",
        "description",
        "state",
        "pilot",
        "exit_code",
        "signal",
        "stdout",
        "stderr",
        "reason",
        "slots",
        "partition",
        "launcher",
        "_hist",
        "_tmgr",
        "_cbs",
        "_result",
        "_decoded",
    )

    def __init__(self, tmgr: "TaskManager", uid: str, description: TaskDescription, pilot: str):
        self.uid = uid
        self.description = description
        self.pilot = pilot
        self.state = S.NEW  # changed by _move() only (_transitions.TASK_LEGAL)
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.stdout: str | None = None
        self.stderr: str | None = None
        self.reason: str | None = None  # why it failed or was canceled
        self.slots: list[_wire.RankSlot] | None = None  # per rank: node, cores, GPUs
        self.partition: int | None = None  # index of the pilot partition it ran in
        self.launcher: str | None = None  # the launch method that started it (pmi, srun, ...)
        self._hist: list = []  # state, t, state, t, ... (flat: no tuple per entry)
        self._tmgr = tmgr
        self._cbs: list | None = None  # this task's own callbacks (register_callback)
        self._result: bytes | None = None  # a function task's outcome, as the worker sent it
        self._decoded: tuple | None = None  # (value, exception) once looked at

    def _move(self, to: str, t: float) -> str:
        """The one place this task's state changes, with its history entry (at t); returns
        the state it left. The manager drops the wire's late and repeated news first; a move
        TASK_LEGAL lacks raises IllegalTransition (a bug in the client)."""
        old = self.state
        if to not in TASK_LEGAL[old]:
            check("task", self.uid, TASK_LEGAL, old, to)
        self.state = to
        self._hist += (to, t)
        return old

    def register_callback(self, cb: Callable[["Task", str], None]) -> None:
        """cb(task, state) on each of this task's state changes from now on (after the
        TaskManager's callbacks)."""
        if self._cbs is None:
            self._cbs = []
        self._cbs.append(cb)

    @property
    def sandbox(self) -> str | None:
        """The task's working directory on the pilot's side: its description's `sandbox`;
        else <pilot sandbox>/tasks/<uid>/ for a task that declares files (staging, output
        files, shell, pre/post_exec); else the shared <pilot sandbox>/tasks/."""
        from .._paths import TASKS_DIR, task_cwd

        pilot = self._tmgr._known.get(self.pilot) if self.pilot else None
        if pilot is None:
            return (
                self.description.sandbox if os.path.isabs(self.description.sandbox or "") else None
            )
        return task_cwd(self.description, self.uid, os.path.join(pilot.sandbox, TASKS_DIR))

    @property
    def result(self):
        """A function task's return value (None until it is DONE, and for executables);
        with ranks > 1, the list of the ranks' return values."""
        return self._outcome()[0]

    @property
    def exception(self) -> BaseException | None:
        """The exception a FAILED function task raised -- its own type where it could be
        pickled, else pf.RemoteError -- with the remote traceback as its __cause__; for a
        call that failed otherwise (its worker died, it was canceled), a RemoteError with
        the reason. None for a task that did not fail, and for executables."""
        return self._outcome()[1]

    def _outcome(self) -> tuple:
        if self._decoded is None:
            if self.description.values.get("function") is None or self.state not in S.FINAL:
                return (None, None)
            if self.state == S.DONE and self._result is None:  # (known from a journal)
                raise PilotfishError(
                    f"{self.uid}: the result of this call was not kept "
                    "(it ended before the session was resumed)"
                )
            self._decoded = decode_result(self._result, self.state, self.reason)
        return self._decoded

    @property
    def history(self) -> list[tuple[str, float]]:
        """[(state, time)] in the order the states were reached (or reported)."""
        h = self._hist
        return list(zip(h[::2], h[1::2]))

    @property
    def name(self) -> str | None:
        """The task's `name` from its description (None if it has none)."""
        return self.description.name

    @property
    def done(self) -> bool:
        """True once the task is in a final state (DONE, FAILED or CANCELED)."""
        return self.state in S.FINAL

    def wait(self, state: str | Iterable[str] | None = None, timeout: float | None = None) -> str:
        """Block until the task reaches `state` (default: a final state) or the timeout."""
        return self._tmgr.wait_tasks([self.uid], state=state, timeout=timeout)[0]

    def explain(self, timeout: float = 10.0) -> "_explain.Explanation":
        """Why is it where it is? Where the task is (not sent yet, queued, placed and
        waiting for its launcher, running, ended), what it waits for (no node with room for
        a rank now, a reservation for another task, its colocation group's node, its
        partition's launcher starting, a held service view, tasks ahead of it), which nodes
        could ever hold it, and the run time the scheduler expects of it (its `duration`,
        or one learned from finished tasks of its kind). A dict (keys: pilotfish._explain)
        whose str() reads as text. Asks the task's pilot, waiting at most `timeout` s."""
        X = _explain
        nodes = sorted({s.node for s in self.slots}) if self.slots else None
        state = self.state
        if state in S.FINAL or not self.pilot:
            e = X.from_history(
                self.uid, state, self.history, self.reason, self.pilot, nodes, self.launcher
            )
            if not self.pilot and state not in S.FINAL and self._tmgr.holder is not None:
                e[X.WAITS_FOR] = [self._tmgr.holder.why_waiting(self.uid)]  # (held)
            return e
        pilot = self._tmgr._known.get(self.pilot)
        answer = pilot.explain_tasks([self.uid], timeout) if pilot is not None else None
        if not answer:
            e = X.from_history(self.uid, self.state, self.history, self.reason, self.pilot, nodes)
            e[X.WAITS_FOR].append(
                f"its pilot {self.pilot} did not answer"
                + (f" (it is {pilot.state})" if pilot is not None else "")
            )
            return e
        return X.merge(answer[0], self.state, self.pilot)

    def cancel(self) -> None:
        """Cancel this task: it ends CANCELED (its processes are stopped if it runs); a task
        already final stays as it is. Returns at once; wait() waits."""
        self._tmgr.cancel_tasks([self.uid])

    def __repr__(self) -> str:
        extra = f" exit={self.exit_code}" if self.exit_code is not None else ""
        return f"<Task {self.uid} {self.state}{extra}>"


class TaskManager:
    """Submits tasks to pilots (in batches) and follows their states.

    Tasks are checked against every added pilot before anything is sent: a request no pilot
    can hold is rejected at submit, naming the field.
    """

    SCHEDULERS = submit.Routing.SCHEDULERS

    def __init__(self, session: Session, scheduler: str = "backfilling"):
        """scheduler: how tasks are routed over the manager's pilots --
        "backfilling" (default): to the pilot with the least outstanding work per core that
        can hold the task (work routed earlier in the same submit counts; work leaves as
        tasks end), so bulk submits spread by capacity and later ones fill pilots that ran
        dry; "round_robin": to the pilots in turn, skipping those that cannot hold it.
        A task that names its `pilot` goes there."""
        session.plane.check_open()
        self._pilots: dict[str, PilotPort] = {}  # where new tasks may go (add/remove_pilots)
        # every pilot ever added, removed ones too: their tasks still run there (cancel,
        # explain and sandbox reach them through it)
        self._known: dict[str, PilotPort] = {}
        # which pilot a task goes to (ValueError for an unknown scheduler), and the
        # outstanding cores per pilot it goes by
        self._routing = submit.Routing(scheduler, self._pilots, self._known)
        self._word = submit.Word(session.plane, self._known)  # (to simulated pilots)
        self.spec_extra: submit.SpecExtra | None = None
        """A compatibility layer's hook, no user's (pilotfish.rp: RP_TASK_ID and friends, a
        sandbox per task): (uid, description, pilot) -> TaskSpec fields to add to each task
        sent ("environment" is merged under the task's own); None: none."""
        self.holder: TaskHolder | None = None  # an allocation policy's (add_pilots(policy))
        self.session = session
        self._tasks: list[Task] = []  # in submit order (the session maps uids to tasks)
        self.counts: collections.Counter[str] = collections.Counter()  # tasks per state
        self._callbacks: list[Callable[[Task, str], None]] = []
        self._cond = threading.Condition()
        self._n_final = 0  # tasks of this manager in a final state
        self._wake_ats: list[int] = []  # final-count marks that "wait for all" waiters need
        self._general_waiters = 0  # waiters that must look at every change
        session.plane.task_closers.append(self._close)

    @property
    def scheduler(self) -> str:
        """How tasks are routed over the manager's pilots ("backfilling", "round_robin")."""
        return self._routing.scheduler

    # -- public API -------------------------------------------------------------------------
    def add_pilots(self, pilots: PilotPort | Iterable[PilotPort]) -> None:
        """Let this manager run tasks on these pilots (a Pilot or several): a submitted task
        goes to the pilot where it fits and can start soonest."""
        # (a pilot, which has a uid, or an iterable of pilots)
        if hasattr(pilots, "serve"):  # an allocation policy (autoalloc.py): it holds this
            return pilots.serve(self)  # manager's tasks for its pilots
        one = isinstance(getattr(pilots, "uid", None), str)
        many: Iterable[Any] = [pilots] if one else pilots  # type: ignore[assignment]  # (one)
        for p in many:
            self._pilots[p.uid] = p
            if p.uid not in self._known:  # (added again after remove_pilots: one listener)
                self._known[p.uid] = p
                p.when_final(self._on_pilot_final)

    def remove_pilots(self, pilot_ids: str | Iterable[str], drain: bool = False) -> None:
        """Take pilots (uids) from this manager, as RADICAL-Pilot's TaskManager.remove_pilots:
        they get none of its new tasks (a submit that names one in `pilot` is refused, naming
        it); its tasks already sent to them run on there, and are followed, canceled and
        explained as before. The pilots themselves go on (PilotManager.cancel_pilots ends
        them). drain=True returns only once this manager's tasks on them have ended.
        add_pilots adds one again. Raises ValueError naming an unknown uid (nothing is
        removed then)."""
        if not isinstance(drain, bool):
            raise ValueError(f"remove_pilots: drain {drain!r} must be True or False")
        uids = [pilot_ids] if isinstance(pilot_ids, str) else pilot_ids
        try:
            uids = list(uids)
        except TypeError:
            raise ValueError(
                f"remove_pilots: pilot_ids {pilot_ids!r} must be a pilot uid or a list of them"
            ) from None
        if not uids:
            raise ValueError("remove_pilots: pilot_ids [] names no pilot")
        for uid in uids:
            if uid not in self._pilots:
                why = (
                    "was removed from this TaskManager already"
                    if uid in self._known
                    else "is not a pilot of this TaskManager"
                )
                raise ValueError(
                    f"remove_pilots: pilot_ids {uid!r} {why} (its pilots: "
                    f"{', '.join(self._pilots) or 'none'})"
                )
        for uid in uids:
            del self._pilots[uid]
        if drain:
            gone = set(uids)
            left = [t.uid for t in self._tasks if t.pilot in gone and t.state not in S.FINAL]
            if left:
                self.wait_tasks(left)

    def list_pilots(self) -> list[str]:
        """The uids of the pilots added to this manager (and not removed)."""
        return list(self._pilots)

    def get_pilot(self, uid: str) -> PilotPort | None:
        """The pilot of this uid that was added to this manager -- one removed since too
        (its tasks still run there) -- else None."""
        return self._known.get(uid)

    def submit_tasks(self, descriptions):
        """Validate, route to pilots, send in batches. Returns Task (or list, given a list).

        Raises DescriptionError (field, value, why) before anything is sent.
        """
        with gc_paused(), self._word.submitting():  # (gc: a bulk submit builds objects by
            return self._submit_tasks(descriptions)  # the thousand, none cyclic)

    def _submit_tasks(self, descriptions):
        # the pipeline (submit.py): nothing is registered or sent unless every stage before
        # register went through
        session = self.session
        plane = session.plane
        single = isinstance(descriptions, (TaskDescription, dict))
        if self.holder is not None:  # an allocation policy holds them (_held.py)
            args = (plane, session.events, self._routing, self.holder)
            got = _held.hold([descriptions] if single else descriptions, self, *args)
            return got[0] if single else got
        plan = submit.plan(
            [descriptions] if single else descriptions, self._routing, plane, session.resumed
        )
        encoded = submit.encode(plan, self.spec_extra, plane.journal.enabled)
        submit.write_journal(encoded, plane)
        tasks = submit.register(plan, self, plane, session.events, self._routing)
        submit.send(encoded, tasks, plane, self)
        return tasks[0] if single else tasks

    def release_tasks(self, tasks: list[Task], pilot: PilotPort) -> list[Task]:
        """An allocation policy's, no user's: send held tasks to `pilot` (_held.release)."""
        self.add_pilots(pilot)
        with self._word.submitting():
            args = (self.session.plane, self.session.events, self._routing, self.spec_extra)
            return _held.release(tasks, pilot, self, *args)

    def make_tasks(
        self, uids: list[str], descs: list[TaskDescription], pilot_uids: list[str], now: float
    ) -> list[Task]:
        """The submit pipeline's (_ports.SubmitOwner), no user's: new Tasks in SCHEDULING."""
        tasks = []
        for uid, d, pilot_uid in zip(uids, descs, pilot_uids):
            t = Task(self, uid, d, pilot_uid)
            t._hist = [S.NEW, now]
            t._move(S.SCHEDULING, now)
            tasks.append(t)
        return tasks

    def keep_tasks(self, tasks: list[Task], resumed: dict[int, tuple[str, str | None]]) -> None:
        """The submit pipeline's (_ports.SubmitOwner), no user's: registered tasks into this
        manager's list and counts, a resumed session's put back in their state, then the
        callbacks of NEW and SCHEDULING (before any frame leaves)."""
        self._tasks.extend(tasks)
        with self._cond:
            self.counts[S.SCHEDULING] += len(tasks)
        if resumed:
            self._restore(tasks, resumed)
        if self._callbacks:  # the states before the agent's, in order, before any frame leaves
            self._run_callbacks([(t, S.NEW) for t in tasks] + [(t, S.SCHEDULING) for t in tasks])

    def submit_service_group(self, description, replicas: int = 1):
        """Start a group of `replicas` long-running members (a ServiceDescription or dict) on
        one of this manager's pilots (description.pilot, else the first live one); returns
        its ServiceGroup at once (group.wait_ready() for the endpoints). Raises
        DescriptionError (field, value, why) for a bad description or replicas < 1, or
        more members than the pilot holds."""
        self.session.plane.check_open()
        return submit_group(self, list(self._pilots.values()), description, replicas)

    def _restore(self, tasks: list[Task], resumed: dict[int, tuple[str, str | None]]) -> None:
        """Put journaled tasks back in the state the journal and their agents report."""
        r = self.session.resumed
        assert r is not None  # (called on a resumed session only)
        pairs: list[tuple[Task, Any]] = []
        for i, (uid, pilot_uid) in resumed.items():
            if pilot_uid is None:
                continue
            t = tasks[i]
            u = r.answers.pop(uid, None)
            if u is None and uid in r.finals:
                _, _, state, code, sig, reason, when = r.finals[uid]
                u = _wire.Update(uid, state, when, exit_code=code, signal=sig, reason=reason)
            if u is not None:
                pairs.append((t, u))
        with self._cond:  # they were sent before: not waiting to be sent now
            for i, (uid, pilot_uid) in resumed.items():
                if pilot_uid is not None and tasks[i].state == S.SCHEDULING:
                    tasks[i]._move(S.STAGING_INPUT, time.time())
                    self.counts[S.SCHEDULING] -= 1
                    self.counts[S.STAGING_INPUT] += 1
        if pairs:
            self.apply_updates(pairs, journal=False)
        kept: dict[str, list[Task]] = {}
        for i, (uid, pilot_uid) in resumed.items():
            if pilot_uid is not None and uid in r.adopted and tasks[i].state not in S.FINAL:
                kept.setdefault(r.adopted[uid], []).append(tasks[i])
        for sandbox, ts in kept.items():
            self.session.plane.adopter.watch(sandbox, ts)

    def wait_tasks(
        self,
        uids: Iterable[str] | str | None = None,
        state: str | Iterable[str] | None = None,
        timeout: float | None = None,
        return_when: str = "all",
        progress: bool = False,
    ) -> list[str]:
        """Block until the tasks reach `state` (default: a final state) or the timeout passes.

        return_when="all" (default) or "any" (the first one to get there). progress=True
        draws a live bar (done / failed / running, rate, ETA) while waiting for all tasks.
        Returns the states of the tasks waited for, in order.
        """
        if return_when not in ("all", "any"):
            raise ValueError("return_when must be 'all' or 'any'")
        if progress:
            if uids is not None or state is not None or return_when != "all":
                raise ValueError("progress=True waits for all tasks of the manager to end")
            return wait_with_progress(self, timeout=timeout)
        tasks = self._select(uids)
        targets = (
            S.FINAL
            if state is None
            else ({state} if isinstance(state, str) else set(state)) | S.FINAL
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        # Waiting for final states only needs to look at the tasks again once enough of the
        # manager's tasks have ended: the waiter sleeps until then (no O(tasks) scan per
        # update batch, which made waiting for 100k tasks cost more than running them).
        by_count = state is None and return_when == "all"
        with self._word.waiting(), self._cond:
            pending = [t for t in tasks if t.state not in targets]
            while pending:
                if return_when == "any" and len(pending) < len(tasks):
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if by_count:
                    mark = self._n_final + len(pending)
                    self._wake_ats.append(mark)
                    try:
                        self._cond.wait_for(lambda: self._n_final >= mark, left)  # noqa: B023 -- called in this iteration only
                    finally:
                        self._wake_ats.remove(mark)
                else:
                    self._general_waiters += 1
                    try:
                        self._cond.wait(left)
                    finally:
                        self._general_waiters -= 1
                pending = [t for t in pending if t.state not in targets]
        return [t.state for t in tasks]

    def _notify(self, ended: int) -> None:
        """Wake waiters that may be done (call with self._cond held)."""
        self._n_final += ended
        if self._general_waiters or (self._wake_ats and self._n_final >= min(self._wake_ats)):
            self._cond.notify_all()

    def cancel_tasks(self, uids: Iterable[str] | str | None = None) -> None:
        """Cancel: queued tasks never start; running ones have their process group killed."""
        by_pilot: dict[str, list[str]] = collections.defaultdict(list)
        for t in self._select(uids):
            if t.state in S.FINAL:
                continue
            pilot = self._known.get(t.pilot)
            if pilot is None or pilot.state in S.FINAL:
                self.finish_locally([t], S.CANCELED, "canceled by the user", journal=True)
            else:
                by_pilot[t.pilot].append(t.uid)
        for pilot_uid, batch in by_pilot.items():
            self.session.plane.bridge.send(pilot_uid, _wire.encode(_wire.Cancel(batch)))

    def get_tasks(self, uids: Iterable[str] | str | None = None) -> list[Task]:
        """The Task objects of these uids (None: all of this manager's), in that order."""
        return self._select(uids)

    def list_tasks(self) -> list[str]:
        """The uids of this manager's tasks, in submission order."""
        return [t.uid for t in self._tasks]

    @property
    def tasks(self) -> dict[str, Task]:
        """A snapshot {uid: Task} of this manager's tasks."""
        return {t.uid: t for t in self._tasks}

    def __len__(self) -> int:
        return len(self._tasks)

    def register_callback(self, cb: Callable[[Task, str], None]) -> None:
        """cb(task, state) after each state change, from pilotfish's IO thread: keep it short."""
        self._callbacks.append(cb)

    def unregister_callback(self, cb: Callable[[Task, str], None]) -> None:
        """cb is not called any more (once per register_callback of it); ValueError if it
        is not registered with this manager."""
        try:
            self._callbacks.remove(cb)
        except ValueError:
            raise ValueError(
                f"unregister_callback: cb {getattr(cb, '__qualname__', cb)!r} is not a "
                "callback of this TaskManager"
            ) from None

    # -- internals --------------------------------------------------------------------------
    def _select(self, uids) -> list[Task]:
        if uids is None:
            return list(self._tasks)
        if isinstance(uids, str):
            uids = [uids]
        entries = self.session.plane.registry.entries
        try:
            got = [entries[u] for u in uids]
        except KeyError as e:
            raise PilotfishError(f"no task {e.args[0]!r} in this session") from None
        for t, owner in got:
            if owner is not self:
                raise PilotfishError(f"task {t.uid!r} belongs to another TaskManager")
        return [t for t, _ in got]

    def tasks_sent(self, batch: list[Task], now: float) -> None:
        """The submit pipeline's (_ports.SubmitOwner), no user's: these tasks' frame left (IO
        thread)."""
        moved = 0
        with self._cond:
            for t in batch:
                if t.state == S.SCHEDULING:
                    t._move(S.STAGING_INPUT, now)
                    moved += 1
            self.counts[S.SCHEDULING] -= moved
            self.counts[S.STAGING_INPUT] += moved
            self._notify(0)
        if self.session.events.enabled:
            self.session.events.record_many([(now, t.uid, S.STAGING_INPUT, None) for t in batch])
        if self._callbacks:
            self._run_callbacks([(t, S.STAGING_INPUT) for t in batch])

    def apply_updates(
        self, pairs: list[tuple[Task, _wire.Update]], journal: bool = True
    ) -> None:  # IO thread
        """The session's task registry's (_ports.TaskOwner), no user's: apply the agents'
        news of this manager's tasks, (task, update) pairs in order; journal the finals
        unless journal=False (news a resume already holds)."""
        changed = []
        counts = self.counts
        load = self._routing.load  # (outstanding cores per pilot: a final gives its back)
        ended = 0
        finals = []
        with self._cond:
            for t, u in pairs:
                old = t.state
                if old in S.FINAL:
                    continue
                state = u.state
                if u.started is not None:  # a function call: its start comes with its end
                    t._hist += (S.EXECUTING, u.started)
                    t._result = u.result
                if u.slots is not None:  # (EXECUTING: the first launch, or again after a requeue)
                    t.slots = u.slots
                    t.partition = u.partition
                    t.launcher = u.launcher
                rank = S.TASK_RANK.get(state)
                if rank is None or rank <= S.TASK_RANK[old]:
                    t._hist += (state, u.t)  # a sub-event (e.g. launch_retry) or late news
                    continue
                t._move(state, u.t)
                counts[old] -= 1
                counts[state] += 1
                if state in S.FINAL:
                    t.exit_code = u.exit_code
                    t.signal = u.signal
                    t.stdout = u.stdout
                    t.stderr = u.stderr
                    t.reason = u.reason
                    load[t.pilot] -= cores(t.description)
                    ended += 1
                    finals.append(final_record(t.uid, state, u.exit_code, u.signal, u.reason, u.t))
                changed.append((t, state))
        self._acknowledge(changed, ended, finals if journal else None)

    def finish_locally(
        self, tasks: list[Task], state: str, reason: str, journal: bool = False
    ) -> None:
        """The task registry's and this manager's (_ports.TaskOwner), no user's: finalize
        tasks the agent will never report on (pilot gone, never sent). Not journaled unless
        asked: a task its pilot took down with it runs again on resume."""
        now = time.time()
        changed = []
        with self._cond:
            for t in tasks:
                if t.state in S.FINAL:
                    continue
                self.counts[t._move(state, now)] -= 1
                self.counts[state] += 1
                t.reason = reason
                self._routing.load[t.pilot] -= cores(t.description)
                changed.append((t, state))
        self.session.events.record_many([(now, t.uid, state, reason) for t, _ in changed])
        self._acknowledge(
            changed,
            len(changed),
            [final_record(t.uid, state, None, None, reason, now) for t, _ in changed]
            if journal
            else None,
        )

    def _acknowledge(
        self, changed: list[tuple[Task, str]], ended: int, finals: list | None
    ) -> None:
        """After a batch of state changes: journal the finals, run the callbacks, and only
        then wake the waiters -- wait() never returns a final state that a resume could lose
        or that the user's callbacks have not seen yet."""
        try:
            if finals:
                try:
                    self.session.journal.write(finals)
                except OSError as e:  # (a full disk) they did end: said, not raised
                    self.session.plane.journal_lost(e, len(finals))
            self._run_callbacks(changed)
        finally:  # even a callback that raises SystemExit must not leave a waiter asleep
            with self._cond:
                self._notify(ended)

    def _run_callbacks(self, changed: list[tuple[Task, str]]) -> None:
        own = [(cb, t, state) for t, state in changed if t._cbs for cb in t._cbs]
        calls = [(cb, t, state) for cb in self._callbacks for t, state in changed] + own
        for cb, t, state in calls:
            try:
                cb(t, state)
            except BaseException as e:  # sys.exit() in a callback too:
                # it runs on the client's IO thread, which must live on (it would stop
                # every update, every wait); reported, never raised
                log.error(
                    "task callback %r failed on %s -> %s: %s: %s",
                    getattr(cb, "__qualname__", cb),
                    t.uid,
                    state,
                    type(e).__name__,
                    e,
                    exc_info=not isinstance(e, SystemExit),
                )

    def _on_pilot_final(self, pilot: PilotPort) -> None:
        left = [t for t in self._tasks if t.pilot == pilot.uid and t.state not in S.FINAL]
        if not left:
            return
        if pilot.state == S.FAILED:
            # what its dead agent's keeper still runs ends with the keeper's word, not here
            kept = self.session.plane.adopter.take(pilot.sandbox, left)
            left = [t for t in left if t not in kept]
            if left:
                self.finish_locally(left, S.FAILED, f"pilot {pilot.uid} failed: {pilot.reason}")
        else:
            self.finish_locally(
                left,
                S.CANCELED,
                f"pilot {pilot.uid} ended ({pilot.state}) before the task finished",
            )

    def _close(self) -> None:
        pass


def decode_result(payload: bytes | None, state: str, reason: str | None) -> tuple:
    """(value, exception) from a function call's payload (agent/worker.py's tags)."""
    from .._errors import RemoteError

    tag = payload[:1] if payload else None
    if tag == _wire.RESULT_OK:
        return (pickle.loads(payload[1:]), None)  # type: ignore[index]  # a bytes payload
    if tag == _wire.RESULT_IN_FILE:  # a large result, in a file next to the pilot's
        with open(payload[1:].decode(), "rb") as f:  # type: ignore[index]  # a bytes payload
            return (pickle.load(f), None)
    if tag == _wire.RESULT_ERROR:
        name, message, tb, exc = msgspec.msgpack.decode(payload[1:])  # type: ignore[index]  # a bytes payload
        e = None
        if exc is not None:
            try:
                e = pickle.loads(exc)
            except Exception:  # noqa: BLE001 -- its class is not importable here
                e = None
        if not isinstance(e, BaseException):
            e = RemoteError(name, message, tb)
        e.__cause__ = RemoteTraceback(tb)
        return (None, e)
    if state == S.DONE:
        return (None, None)
    return (None, RemoteError("TaskFailed", reason or state, ""))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a function task (shown as its cause)."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'
