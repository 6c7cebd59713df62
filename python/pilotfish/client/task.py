"""The TaskManager: the user's API to run tasks on pilots and follow them -- add_pilots /
remove_pilots, submit_tasks, wait_tasks, cancel_tasks, get_tasks / list_tasks, callbacks,
submit_service_group.

A submit runs the pipeline of submit.py with the manager's books (task_books.TaskBooks) as the
owner of its tasks: they make, keep and follow them (the registry's news, an allocation
policy's releases) and this class reads them. A TaskManager sees its pilots through
_ports.PilotPort (it never imports pilot.py: a Pilot runs tasks of its own, prepare_env).
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Iterable

from .. import _wire
from .. import states as S
from .._errors import PilotfishError
from .._util import gc_paused
from ..descriptions import TaskDescription
from . import _held, submit
from ._ports import PilotPort, TaskHolder
from .progress import wait_with_progress
from .services import submit_group
from .session import Session
from .task_books import Task, TaskBooks


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
        # its tasks, their counts, callbacks and waiters: the owner the submit pipeline, the
        # task registry and an allocation policy meet (task_books.TaskBooks)
        self._books = TaskBooks(self, session, self._routing, self._word)
        self.counts = self._books.counts  # tasks per state (a collections.Counter)
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
                p.when_final(self._books.on_pilot_final)

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
            left = [t.uid for t in self._books.tasks if t.pilot in gone and t.state not in S.FINAL]
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
            got = _held.hold([descriptions] if single else descriptions, self._books, *args)
            return got[0] if single else got
        plan = submit.plan(
            [descriptions] if single else descriptions, self._routing, plane, session.resumed
        )
        encoded = submit.encode(plan, self.spec_extra, plane.journal.enabled)
        submit.write_journal(encoded, plane)
        tasks = submit.register(plan, self._books, plane, session.events, self._routing)
        submit.send(encoded, tasks, plane, self._books)
        return tasks[0] if single else tasks

    def submit_service_group(self, description, replicas: int = 1):
        """Start a group of `replicas` long-running members (a ServiceDescription or dict) on
        one of this manager's pilots (description.pilot, else the first live one); returns
        its ServiceGroup at once (group.wait_ready() for the endpoints). Raises
        DescriptionError (field, value, why) for a bad description or replicas < 1, or
        more members than the pilot holds."""
        self.session.plane.check_open()
        return submit_group(self, list(self._pilots.values()), description, replicas)

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
        with self._word.waiting():
            self._books.wait(tasks, targets, deadline, return_when == "any", by_count)
        return [t.state for t in tasks]

    def cancel_tasks(self, uids: Iterable[str] | str | None = None) -> None:
        """Cancel: queued tasks never start; running ones have their process group killed."""
        by_pilot: dict[str, list[str]] = collections.defaultdict(list)
        for t in self._select(uids):
            if t.state in S.FINAL:
                continue
            pilot = self._known.get(t.pilot)
            if pilot is None or pilot.state in S.FINAL:
                self._books.finish_locally([t], S.CANCELED, "canceled by the user", journal=True)
            else:
                by_pilot[t.pilot].append(t.uid)
        for pilot_uid, batch in by_pilot.items():
            self.session.plane.bridge.send(pilot_uid, _wire.encode(_wire.Cancel(batch)))

    def get_tasks(self, uids: Iterable[str] | str | None = None) -> list[Task]:
        """The Task objects of these uids (None: all of this manager's), in that order."""
        return self._select(uids)

    def list_tasks(self) -> list[str]:
        """The uids of this manager's tasks, in submission order."""
        return [t.uid for t in self._books.tasks]

    @property
    def tasks(self) -> dict[str, Task]:
        """A snapshot {uid: Task} of this manager's tasks."""
        return {t.uid: t for t in self._books.tasks}

    def __len__(self) -> int:
        return len(self._books.tasks)

    def register_callback(self, cb: Callable[[Task, str], None]) -> None:
        """cb(task, state) after each state change, from pilotfish's IO thread: keep it short."""
        self._books.callbacks.append(cb)

    def unregister_callback(self, cb: Callable[[Task, str], None]) -> None:
        """cb is not called any more (once per register_callback of it); ValueError if it
        is not registered with this manager."""
        try:
            self._books.callbacks.remove(cb)
        except ValueError:
            raise ValueError(
                f"unregister_callback: cb {getattr(cb, '__qualname__', cb)!r} is not a "
                "callback of this TaskManager"
            ) from None

    # -- internals --------------------------------------------------------------------------
    def _select(self, uids) -> list[Task]:
        if uids is None:
            return list(self._books.tasks)
        if isinstance(uids, str):
            uids = [uids]
        entries = self.session.plane.registry.entries
        try:
            got = [entries[u] for u in uids]
        except KeyError as e:
            raise PilotfishError(f"no task {e.args[0]!r} in this session") from None
        for t, owner in got:
            if owner is not self._books:
                raise PilotfishError(f"task {t.uid!r} belongs to another TaskManager")
        return [t for t, _ in got]

    def _close(self) -> None:
        pass
