"""Tasks, and the books a TaskManager keeps of them (TaskBooks): the owner of its tasks that
the client's rooms meet, apart from the manager's user API (task.py's TaskManager).

A submit runs the pipeline of submit.py (plan: check, route by the manager's Routing, give
uids; encode; write_journal; register; send); the books make and keep the tasks it registers
and hear when their frames leave (_ports.SubmitOwner). News of the tasks comes from the
session's task registry (_registry.TaskRegistry, which the router hands every agent's
Updates and the adopter a keeper's finals) as calls of apply_updates and finish_locally
(_ports.TaskOwner), on the IO thread; an allocation policy sends the tasks it held through
release_tasks. A Task's wait, cancel and explain go to its TaskManager.
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
from ..descriptions import TaskDescription
from . import _held, submit
from .submit import cores
from ._ports import PilotPort
from ._transitions import TASK_LEGAL, check
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

    def __init__(self, tmgr: Any, uid: str, description: TaskDescription, pilot: str):
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
        self._tmgr = tmgr  # (task.TaskManager: wait, cancel, explain go there)
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

        pilot = self._tmgr.get_pilot(self.pilot) if self.pilot else None
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
        pilot = self._tmgr.get_pilot(self.pilot)
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


class TaskBooks:
    """A TaskManager's books: its tasks (in submit order), their counts per state, the
    callbacks, and the waiters' marks -- the owner the client's rooms meet, apart from the
    manager's user API (task.TaskManager holds one). The submit pipeline makes and
    keeps tasks here and says when their frames left (_ports.SubmitOwner: make_tasks,
    keep_tasks, tasks_sent); the session's task registry and the adopter bring the agents'
    news and local ends (_ports.TaskOwner: apply_updates, finish_locally, on the IO thread);
    an allocation policy sends the tasks it held (release_tasks). It is the one writer of
    its tasks' states (Task._move)."""

    def __init__(self, manager: Any, session: Session, routing: submit.Routing, word: Any):
        self.manager = manager  # (task.TaskManager: a Task's user API goes there)
        self.session = session
        self.routing = routing  # (its load: the outstanding cores per pilot)
        self.word = word  # (submit.Word: to simulated pilots)
        self.tasks: list[Task] = []  # in submit order (the session maps uids to tasks)
        self.counts: collections.Counter[str] = collections.Counter()  # tasks per state
        self.callbacks: list[Callable[[Task, str], None]] = []
        self.cond = threading.Condition()
        self.n_final = 0  # tasks of this manager in a final state
        self.wake_ats: list[int] = []  # final-count marks that "wait for all" waiters need
        self.general_waiters = 0  # waiters that must look at every change

    def list_pilots(self) -> list[str]:
        """The manager's pilots (an allocation policy sends a held task to one of them)."""
        return self.manager.list_pilots()

    def release_tasks(self, tasks: list[Task], pilot: PilotPort) -> list[Task]:
        """An allocation policy's: send held tasks to `pilot` (_held.release), which joins
        the manager's pilots."""
        self.manager.add_pilots(pilot)
        with self.word.submitting():
            args = (self.session.plane, self.session.events, self.routing, self.manager.spec_extra)
            return _held.release(tasks, pilot, self, *args)

    def make_tasks(
        self, uids: list[str], descs: list[TaskDescription], pilot_uids: list[str], now: float
    ) -> list[Task]:
        """The submit pipeline's (_ports.SubmitOwner): new Tasks in SCHEDULING."""
        tasks = []
        for uid, d, pilot_uid in zip(uids, descs, pilot_uids):
            t = Task(self.manager, uid, d, pilot_uid)
            t._hist = [S.NEW, now]
            t._move(S.SCHEDULING, now)
            tasks.append(t)
        return tasks

    def keep_tasks(self, tasks: list[Task], resumed: dict[int, tuple[str, str | None]]) -> None:
        """The submit pipeline's (_ports.SubmitOwner): registered tasks into this
        manager's list and counts, a resumed session's put back in their state, then the
        callbacks of NEW and SCHEDULING (before any frame leaves)."""
        self.tasks.extend(tasks)
        with self.cond:
            self.counts[S.SCHEDULING] += len(tasks)
        if resumed:
            self._restore(tasks, resumed)
        if self.callbacks:  # the states before the agent's, in order, before any frame leaves
            self._run_callbacks([(t, S.NEW) for t in tasks] + [(t, S.SCHEDULING) for t in tasks])

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
        with self.cond:  # they were sent before: not waiting to be sent now
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

    def notify(self, ended: int) -> None:
        """Wake waiters that may be done (call with self.cond held)."""
        self.n_final += ended
        if self.general_waiters or (self.wake_ats and self.n_final >= min(self.wake_ats)):
            self.cond.notify_all()

    def tasks_sent(self, batch: list[Task], now: float) -> None:
        """The submit pipeline's (_ports.SubmitOwner): these tasks' frame left (IO thread)."""
        moved = 0
        with self.cond:
            for t in batch:
                if t.state == S.SCHEDULING:
                    t._move(S.STAGING_INPUT, now)
                    moved += 1
            self.counts[S.SCHEDULING] -= moved
            self.counts[S.STAGING_INPUT] += moved
            self.notify(0)
        if self.session.events.enabled:
            self.session.events.record_many([(now, t.uid, S.STAGING_INPUT, None) for t in batch])
        if self.callbacks:
            self._run_callbacks([(t, S.STAGING_INPUT) for t in batch])

    def apply_updates(
        self, pairs: list[tuple[Task, _wire.Update]], journal: bool = True
    ) -> None:  # IO thread
        """The session's task registry's (_ports.TaskOwner): apply the agents'
        news of this manager's tasks, (task, update) pairs in order; journal the finals
        unless journal=False (news a resume already holds)."""
        changed = []
        counts = self.counts
        load = self.routing.load  # (outstanding cores per pilot: a final gives its back)
        ended = 0
        finals = []
        with self.cond:
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
        """The task registry's and the manager's (_ports.TaskOwner): finalize
        tasks the agent will never report on (pilot gone, never sent). Not journaled unless
        asked: a task its pilot took down with it runs again on resume."""
        now = time.time()
        changed = []
        with self.cond:
            for t in tasks:
                if t.state in S.FINAL:
                    continue
                self.counts[t._move(state, now)] -= 1
                self.counts[state] += 1
                t.reason = reason
                self.routing.load[t.pilot] -= cores(t.description)
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
            with self.cond:
                self.notify(ended)

    def _run_callbacks(self, changed: list[tuple[Task, str]]) -> None:
        own = [(cb, t, state) for t, state in changed if t._cbs for cb in t._cbs]
        calls = [(cb, t, state) for cb in self.callbacks for t, state in changed] + own
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

    def on_pilot_final(self, pilot: PilotPort) -> None:
        left = [t for t in self.tasks if t.pilot == pilot.uid and t.state not in S.FINAL]
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

    def wait(
        self,
        tasks: list[Task],
        targets: "set[str] | frozenset[str]",
        deadline: float | None,
        any_: bool,
        by_count: bool,
    ) -> None:
        """TaskManager.wait_tasks' wait: until the tasks are in `targets` (any_: one of them),
        or the (monotonic) deadline passed; by_count: final states only, looked at again once
        enough of the manager's tasks have ended."""
        with self.cond:
            pending = [t for t in tasks if t.state not in targets]
            while pending:
                if any_ and len(pending) < len(tasks):
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if by_count:
                    mark = self.n_final + len(pending)
                    self.wake_ats.append(mark)
                    try:
                        self.cond.wait_for(lambda: self.n_final >= mark, left)  # noqa: B023 -- called in this iteration only
                    finally:
                        self.wake_ats.remove(mark)
                else:
                    self.general_waiters += 1
                    try:
                        self.cond.wait(left)
                    finally:
                        self.general_waiters -= 1
                pending = [t for t in pending if t.state not in targets]


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
