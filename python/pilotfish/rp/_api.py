"""RP's TaskManager over pilotfish's, and RaptorPort (what a RAPTOR master's bookkeeping may
do with it); the module kept _api.py, its name from before each facade had its own.

A TaskManager translates RP's descriptions at submit (_describe.py), wraps each pilotfish
task in an rp Task (mapped states, _states.py), gives callbacks the rp Tasks and RP's
states, and holds tasks naming a pilot not added yet (RP's early binding) until it is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from .. import client as _pf
from .. import states as S
from .._errors import DescriptionError
from .._util import gc_paused
from . import _states as RS
from ._callbacks import TASK_STATE, Registered, listify, unregister, wrap_callback
from ._describe import RAPTOR_MASTER, RAPTOR_WORKER, TASK_EXECUTABLE, TaskDescription
from ._layout import task_extra
from ._pilot import Pilot, attach, wait_set_up
from ._session import Session, add_task_manager, linker, pf_session
from ._task import (
    Early,
    RaptorMaster,
    RaptorTask,
    Task,
    wait_early,
    write_launch_failure_err,
    write_profile,
)

log = logging.getLogger("pilotfish.rp")

SCHEDULER_ROUND_ROBIN = "round_robin"
SCHEDULER_BACKFILLING = "backfilling"
SCHEDULER_DEFAULT = SCHEDULER_ROUND_ROBIN  # RP's default (pilotfish's own: backfilling)


class RaptorPort:
    """What a RAPTOR master's bookkeeping (_masters.RaptorState) may do with the TaskManager
    it was submitted to: the one place _masters.py and a RaptorMaster (_task.py) meet the
    manager's insides."""

    __slots__ = ("tmgr",)

    def __init__(self, tmgr: "TaskManager"):
        self.tmgr = tmgr

    def uid_taken(self, uid: str) -> bool:
        """A task or a master of the manager has this uid."""
        return uid in self.tmgr._tasks or uid in self.tmgr._raptors

    def note_uid(self, uid) -> None:
        """A uid the user gave (TaskManager._note_uid)."""
        self.tmgr._note_uid(uid)

    def add_task(self, uid: str, task: "Task") -> None:
        """A master's worker: one of the manager's tasks (get_tasks, wait_tasks)."""
        self.tmgr._tasks[uid] = task

    @staticmethod
    def pf_task(task: "Task"):
        """The pilotfish task behind an rp Task."""
        return task._pf

    def pilot_uids(self) -> list[str]:
        """The pilots the manager routes to now."""
        return self.tmgr._pf.list_pilots()

    def cancel(self, pf_uids: list[str]) -> None:
        """Cancel these pilotfish tasks of the manager."""
        self.tmgr._pf.cancel_tasks(pf_uids)

    def submit_hidden(self, raptor, pf_descs: list, rp_descs: list, waiter) -> None:
        """A master's own tasks: run on its pilot, not listed in the manager."""
        self.tmgr._submit_hidden(raptor, pf_descs, rp_descs, waiter)

    def submit_calls(self, raptor, descs: list) -> list | None:
        """raptor.submit_tasks' hot path (TaskManager._submit_calls): None if not plain."""
        return self.tmgr._submit_calls(raptor, descs)


class TaskManager:
    def __init__(
        self,
        session: Session,
        cfg: dict | None = None,
        scheduler: str | None = None,
        uid: str | None = None,
    ):
        self.session = session
        self._pf = _pf.TaskManager(pf_session(session), scheduler=scheduler or SCHEDULER_DEFAULT)
        self._pf.spec_extra = self._spec_extra
        self._pilots: dict[str, Pilot] = {}
        self._tasks: dict[str, Task] = {}  # rp uid -> task
        # pilotfish uid -> task, for the tasks whose rp uid is not their pilotfish uid (the
        # others are found in _tasks: _of_pf)
        self._by_pf: dict[str, Task] = {}
        # id(pf description) -> its RP description, while a submit is under way: the IO
        # thread may report a task before submit_tasks returns (_wrap makes it then)
        self._rp_desc: dict[int, TaskDescription] = {}
        self._lock = threading.Lock()
        self._during_setup = False
        self.uid = uid or "tmgr.0000"
        self._raptors: dict = {}  # raptor uid -> _masters.RaptorState
        # id(pf description) -> (RaptorState, rp description, waiter) of a master's own
        # tasks: not the client's (no rp Task in this manager), their ends go to the master
        self._hidden: dict[int, tuple] = {}
        self._n_raptors = 0
        self._relaying = False
        self._registered: list[Registered] = []
        self._linker = linker(session)  # RP's <pilot sandbox>/<uid> links (_layout)
        add_task_manager(session, self._session_closing, self._session_closed, self._profiles)
        # a uid given by the user that looks like pilotfish's own (task.000042): plain RAPTOR
        # calls then take the general path (their uids are pilotfish's there: no clash)
        self._pf_like_uids = False
        # RP's early-bound tasks: pilot uid -> the rp Tasks that name it before it is added
        # (their _pf an Early), and the condition their waiters wait on
        self._early: dict[str, list[Task]] = {}
        self._early_cond = threading.Condition()
        self._were_early: set[str] = set()  # rp uids: NEW/SCHEDULING were reported early
        self._adopting: dict[int, Task] = {}  # id(pf description) -> its early rp Task

    def _note_uid(self, uid) -> None:
        """A uid the user gave: does it look like pilotfish's own task uids?"""
        if isinstance(uid, str) and uid.startswith("task.") and uid[5:].isdigit():
            self._pf_like_uids = True

    def _user_uid(self, key: int, uid: str) -> str:
        """The uid the user gave the RP description of pf description `key`, else uid."""
        d = self._rp_desc.get(key)
        return (d.get("uid") if d is not None else None) or uid

    def _wrap(self, t) -> Task:
        with self._lock:
            return self._wrap_locked(t)

    def _wrap_all(self, ts: list) -> list[Task]:
        """The rp Tasks of a submit's pilotfish tasks (one lock for the batch)."""
        with self._lock:
            wrap = self._wrap_locked
            return [wrap(t) for t in ts]

    def _of_pf(self, pf_uid: str) -> Task | None:
        """The rp Task of a pilotfish task (None: not one of this manager's)."""
        task = self._by_pf.get(pf_uid)
        if task is None:
            task = self._tasks.get(pf_uid)
            if task is not None and task._pf.uid != pf_uid:  # (a worker's: its master's)
                return None
        return task

    def _wrap_locked(self, t) -> Task:
        task = self._of_pf(t.uid)
        if task is None:
            key = id(t.description)
            task = self._adopting.get(key)
            if task is not None:  # an early-bound task, submitted now: its pilotfish task
                task._pf = t
                self._by_pf[t.uid] = task
                return task
            d = self._rp_desc[key]
            if d.get("mode") == RAPTOR_MASTER:
                uid = self._user_uid(key, t.uid)
                task = RaptorMaster(self, t, d, uid, self._raptors[uid])
            elif d.get("raptor_id"):
                task = RaptorTask(self, t, d, d.get("uid") or t.uid)
                d["uid"] = task.uid  # (RP sets it; a callback may look before submit returns)
            else:
                task = Task(self, t, d, d.get("uid") or t.uid)
            self._tasks[task.uid] = task
            if task.uid != t.uid:
                self._by_pf[t.uid] = task
        return task

    def _spec_extra(self, uid: str, d, pilot) -> dict:
        """RP's per-task variables, and a sandbox of its own for every task (_layout)."""
        resource = getattr(self._pilots.get(pilot.uid), "resource", None)
        return task_extra(
            self._user_uid(id(d), uid), uid, d, pilot, self.session.uid, resource, self._linker
        )

    def add_pilots(self, pilots) -> None:
        sel, _ = listify(pilots)
        for p in sel:
            if p.uid in self._pilots:
                raise ValueError(f"pilot {p.uid} was added already")
            self._pilots[p.uid] = p
            if not self._during_setup:
                attach(p, self)
        self._pf.add_pilots([p._pf for p in sel])
        for p in sel:
            self._release_early(p.uid)

    def _release_early(self, pilot_uid: str) -> None:
        """Submit the early-bound tasks that waited for this pilot (RP schedules them once
        it is added); one that cannot be submitted ends FAILED, saying why."""
        with self._early_cond:
            tasks = [t for t in self._early.pop(pilot_uid, ()) if t._pf.state not in S.FINAL]
        if not tasks:
            return
        pf_descs = [t._pf.description for t in tasks]
        keys = [id(pd) for pd in pf_descs]
        with self._lock:
            self._adopting.update(zip(keys, tasks))
        try:
            self._submit([t.description for t in tasks], pf_descs)
        except Exception as e:  # noqa: BLE001 -- each task ends FAILED with the reason
            why = f"submitted once pilot {pilot_uid} was added: {type(e).__name__}: {e}"
            for t in tasks:
                if type(t._pf) is Early:
                    self._end_early(t, S.FAILED, why)
        finally:
            with self._lock:
                for k in keys:
                    self._adopting.pop(k, None)
            with self._early_cond:
                self._early_cond.notify_all()

    def _hold_early(self, rp_descs: list, pf_descs: list) -> list[Task]:
        """RP's early binding: tasks naming a pilot not added (yet) wait in TMGR_SCHEDULING
        for add_pilots, with a uid of the session's own series (RP warns in its log)."""
        plane = pf_session(self.session).plane
        uids = iter(plane.next_task_uids(sum(1 for d in rp_descs if not d.get("uid"))))
        now = time.time()
        out = []
        with self._lock:
            for d, pd in zip(rp_descs, pf_descs):
                uid = d.get("uid") or next(uids)
                d["uid"] = uid  # (RP_TASK_ID, once it runs)
                task = Task(self, Early(uid, pd, pd.pilot, now), d, uid)
                self._tasks[uid] = task
                self._were_early.add(uid)
                out.append(task)
        with self._early_cond:
            for t in out:
                self._early.setdefault(t._pf.pilot, []).append(t)
        for t in out:
            log.warning("task %s: %s", t.uid, t._pf.reason)
            for reg in list(self._registered):
                for state in (S.NEW, S.SCHEDULING):
                    reg.relay(t._pf, state)
        return out

    def _end_early(self, task: Task, state: str, reason: str) -> None:
        """An early-bound task that never reached its pilot ends (canceled, failed)."""
        with self._early_cond:
            if type(task._pf) is not Early or task._pf.state in S.FINAL:
                return
            task._pf.end(state, reason)
            self._early_cond.notify_all()
        for reg in list(self._registered):
            reg.relay(task._pf, state)

    def _close_early(self) -> None:
        """The session closes: the tasks still waiting for a pilot end CANCELED (RP's close
        cancels what is left)."""
        with self._early_cond:
            waiting = [t for ts in self._early.values() for t in ts]
            self._early.clear()
        for t in waiting:
            self._end_early(t, S.CANCELED, f"the session closed: {t._pf.reason}")

    def list_pilots(self) -> list[str]:
        return list(self._pilots)

    def get_pilots(self) -> list[Pilot]:
        return list(self._pilots.values())

    def submit_tasks(self, descriptions):
        """RP's submit_tasks: executables (and function tasks) to the pilots, RAPTOR tasks
        (raptor_id set, or through raptor.submit_tasks) to their master, RAPTOR_MASTER
        descriptions to submit_raptors; one list back, in order."""
        with gc_paused():  # (thousands of objects, none cyclic)
            return self._submit_tasks(descriptions)

    def _submit_tasks(self, descriptions):
        descs, many = listify(descriptions)
        rp_descs = [d if isinstance(d, TaskDescription) else TaskDescription(d) for d in descs]
        given: set[str] = set()
        for i, d in enumerate(rp_descs):
            uid = d.get("uid")
            if uid is not None and (uid in self._tasks or uid in given):
                raise ValueError(f"rp.TaskDescription[{i}].uid = {uid!r}: already used")
            if uid is not None:
                given.add(uid)
                self._note_uid(uid)
        if any(
            d.get("raptor_id") or d.get("mode") in (RAPTOR_MASTER, RAPTOR_WORKER) for d in rp_descs
        ):
            out = self._submit_mixed(rp_descs)
        else:
            pf_descs = [d.to_pf(i) for i, d in enumerate(rp_descs)]
            out = self._submit(rp_descs, pf_descs)
        return out if many else out[0]

    def _submit_calls(self, r, descs: list) -> list | None:
        """RAPTOR's hot path: a batch of plain calls to one master (rp.TaskDescriptions with
        no field but mode and function -- a pythontask, or a worker method's name --, no
        uid, no request_cb to ask) in one pass, none of the general path's per-task sorting
        and lookups. Each call's uid is its pilotfish task's (RP numbers client tasks so
        too). None: not such a batch (the general path takes it, and says what is wrong
        with it), or this manager holds a uid a user gave that looks like one of those."""
        if r.stopped or r.wants_requests or not descs or self._pf_like_uids:
            return None
        pf_descs = r.plain_calls(descs)
        if pf_descs is None:
            return None
        if self._registered or self._relaying:  # (its pilotfish callbacks: one may see a
            # task before submit returns)
            tasks = self._submit(descs, pf_descs)  # (_wrap_locked sets each uid)
        else:  # nothing else makes rp Tasks: paired with their descriptions by position
            self._pilots_ready()
            pf_tasks = self._pf.submit_tasks(pf_descs)
            with self._lock:
                mine = self._tasks  # (rp uid = pilotfish uid: no _by_pf entry)
                tasks = []
                add = tasks.append
                for t, d in zip(pf_tasks, descs):
                    uid = d["uid"] = t.uid
                    task = mine[uid] = RaptorTask(self, t, d, uid)
                    add(task)
            r.track(pf_tasks)
            return tasks
        r.track([t._pf for t in tasks])
        return tasks

    def _pilots_ready(self) -> None:
        """Wait for the pilots' setup (services, prepared environments) or raise its
        problem."""
        for p in self._pilots.values():
            if self._during_setup:
                break
            wait_set_up(p)

    def _submit(self, rp_descs: list, pf_descs: list) -> list:
        pilots = self._pilots
        if any(pd.pilot is not None and pd.pilot not in pilots for pd in pf_descs):
            early = [pd.pilot is not None and pd.pilot not in pilots for pd in pf_descs]
            held = iter(
                self._hold_early(
                    [d for d, e in zip(rp_descs, early) if e],
                    [pd for pd, e in zip(pf_descs, early) if e],
                )
            )
            now = [(d, pd) for d, pd, e in zip(rp_descs, pf_descs, early) if not e]
            sent = iter(self._submit([d for d, _ in now], [pd for _, pd in now]) if now else [])
            return [next(held) if e else next(sent) for e in early]
        self._pilots_ready()
        keys = [id(pd) for pd in pf_descs]
        rp_desc = self._rp_desc
        try:
            rp_desc.update(zip(keys, rp_descs))
            return self._wrap_all(self._pf.submit_tasks(pf_descs))
        finally:
            pop = rp_desc.pop
            for k in keys:
                pop(k, None)

    def _submit_mixed(self, rp_descs: list) -> list:
        """Descriptions of several kinds: each translated (all checked before any is sent),
        RAPTOR tasks through their master's request_cb, then one submit."""
        out: list = [None] * len(rp_descs)
        plain: list[tuple[int, TaskDescription, Any]] = []
        by_raptor: dict[str, list] = {}
        for i, d in enumerate(rp_descs):
            mode = d.get("mode")
            if mode == RAPTOR_MASTER:
                pilot = d.get("pilot") or (
                    next(iter(self._pilots)) if len(self._pilots) == 1 else None
                )
                if pilot is None:
                    raise ValueError(
                        f"rp.TaskDescription[{i}]: a RAPTOR_MASTER needs "
                        "'pilot' when the TaskManager has several pilots"
                    )
                out[i] = self.submit_raptors([d], pilot)[0]
                continue
            if mode == RAPTOR_WORKER:
                r = self._raptor_of(d, i)
                out[i] = r.add_workers([d])[0]
                continue
            rid = d.get("raptor_id")
            if rid and (mode or TASK_EXECUTABLE) != TASK_EXECUTABLE:
                by_raptor.setdefault(rid, []).append(i)
                continue
            if rid:  # an executable through a master: an ordinary task on its pilot
                r = self._raptor_of(d, i)
                d = TaskDescription({k: x for k, x in d.items() if k != "raptor_id"})
                d["pilot"] = d.get("pilot") or r.pilot.uid
            plain.append((i, d, d.to_pf(i)))
        rp_sub: list = []
        pf_sub: list = []
        where: list[int | None] = []
        for i, d, pd in plain:
            rp_sub.append(rp_descs[i] if rp_descs[i] is d else d)
            pf_sub.append(pd)
            where.append(i)
        dropped: list = []
        for rid, idx in by_raptor.items():
            r = self._raptor_of(rp_descs[idx[0]], idx[0])
            if r.stopped:
                raise ValueError(f"raptor {rid} was stopped: submit to a running master")
            fresh = iter(r.next_uids(sum(1 for i in idx if not rp_descs[i].get("uid"))))
            pairs = [(rp_descs[i].get("uid") or next(fresh), rp_descs[i]) for i in idx]
            keep, left = r.request(pairs, "client")
            pos = {uid: i for (uid, _), i in zip(pairs, idx)}
            for uid, d in keep:
                at = pos.get(uid)
                d["uid"] = uid
                d["raptor_id"] = rid
                pd = r.to_pf(d, at if at is not None else 0, uid)
                rp_sub.append(d)
                pf_sub.append(pd)
                where.append(at)  # (None: a task request_cb made up: the master's own)
            for uid in left:
                d = rp_descs[pos[uid]]
                d["uid"] = uid
                rp_sub.append(d)
                pf_sub.append(r.refused(uid))
                where.append(pos[uid])
                dropped.append(uid)
        own = [(k, d, pd) for k, (d, pd, i) in enumerate(zip(rp_sub, pf_sub, where)) if i is None]
        if own:  # returned by request_cb without having been submitted: the master's
            by: dict[str, list] = {}
            for k, d, pd in own:
                by.setdefault(d["raptor_id"], []).append((d, pd))
            for rid, items in by.items():
                self._submit_hidden(
                    self._raptors[rid], [pd for _, pd in items], [d for d, _ in items], None
                )
            keepk = {k for k, _, _ in own}
            rp_sub = [d for k, d in enumerate(rp_sub) if k not in keepk]
            pf_sub = [d for k, d in enumerate(pf_sub) if k not in keepk]
            where = [w for k, w in enumerate(where) if k not in keepk]
        tasks = self._submit(rp_sub, pf_sub) if pf_sub else []
        new: dict[Any, list] = {}  # raptor id -> its new tasks
        # (every None -- the master's own -- left `where` above)
        for at, t in zip([w for w in where if w is not None], tasks):
            if type(t) is RaptorTask:
                new.setdefault(t.description.get("raptor_id"), []).append(t._pf)
            out[at] = t
        for rid, pf_tasks in new.items():
            r = self._raptors.get(rid)
            if r is not None:
                r.track(pf_tasks)
        return out

    def _raptor_of(self, d, i: int):
        rid = d.get("raptor_id")
        r = self._raptors.get(rid)
        if r is None:
            raise DescriptionError(
                "rp.TaskDescription",
                "raptor_id",
                rid,
                f"no RAPTOR master of that uid in this TaskManager "
                f"(its masters: {sorted(self._raptors) or 'none'})",
                index=i,
            )
        return r

    def submit_raptors(self, descriptions, pilot_id: str | None = None) -> list:
        """RP's submit_raptors: RAPTOR masters (mode rp.RAPTOR_MASTER), each a task holding
        its cores on the pilot until rpc('stop'), with the hooks of rp.raptor.Master or of
        the subclass named by raptor_class (in raptor_file, or in the script)."""
        from . import _masters

        descs, _ = listify(descriptions)
        if pilot_id is None:
            if len(self._pilots) != 1:
                raise ValueError("submit_raptors: name the pilot (pilot.submit_raptors)")
            pilot_id = next(iter(self._pilots))
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            raise ValueError(f"pilot {pilot_id} is not added to this TaskManager")
        rp_descs, pf_descs, states = [], [], []
        for i, td in enumerate(descs):
            td = td if isinstance(td, TaskDescription) else TaskDescription(td)
            _masters.check_master_mode(td)
            with self._lock:
                uid = td.get("uid") or f"raptor.{self._n_raptors:04d}"
                self._note_uid(td.get("uid"))
                self._n_raptors += 1
            if uid in self._tasks or uid in self._raptors:
                raise ValueError(f"rp.TaskDescription[{i}].uid = {uid!r}: already used")
            td["uid"], td["pilot"] = uid, pilot_id
            hold = _masters.master_task(td, uid, pilot_id, i)
            pf_descs.append(hold.to_pf(i))
            master = _masters.master_instance(td, i)
            states.append(_masters.RaptorState(RaptorPort(self), uid, pilot, master, td, Task))
            rp_descs.append(td)
        for st in states:
            self._raptors[st.uid] = st
        if any(st.hooks is not None for st in states):  # results go to its hooks
            self._ensure_relay()
        try:
            out = self._submit(rp_descs, pf_descs)
        except BaseException:
            for st in states:
                self._raptors.pop(st.uid, None)
            raise
        for st in states:
            st.master.start()
        return out

    def submit_workers(self, descriptions) -> list:
        """RP's tmgr.submit_workers: RAPTOR_WORKER descriptions naming their raptor_id."""
        descs, _ = listify(descriptions)
        out = []
        for i, d in enumerate(descs):
            d = d if isinstance(d, TaskDescription) else TaskDescription(d)
            if not d.get("raptor_id"):
                raise ValueError("RAPTOR_WORKER descriptions need `raptor_id`")
            out += self._raptor_of(d, i).add_workers([d])
        return out

    def _submit_hidden(self, raptor, pf_descs: list, rp_descs: list, waiter) -> None:
        """A master's own tasks: run on its pilot, not listed in this manager."""
        for pd, d in zip(pf_descs, rp_descs):
            self._hidden[id(pd)] = (raptor, d, waiter)
        self._ensure_relay()
        raptor.track(self._pf.submit_tasks(pf_descs))

    def _ensure_relay(self) -> None:
        """One pilotfish callback for RAPTOR bookkeeping (ends to the masters)."""
        with self._lock:
            if self._relaying:
                return
            self._relaying = True
        self._pf.register_callback(self._raptor_relay)

    def _raptor_relay(self, t, state: str) -> None:
        if state not in S.FINAL:
            return
        task = self._of_pf(t.uid)
        if task is None and id(t.description) in self._rp_desc:
            task = self._wrap(t)  # (it ended before its submit made its rp Task)
        if task is None:
            h = self._hidden.pop(id(t.description), None)
            if h is None:
                return
            raptor, d, waiter = h
            task = RaptorTask(None, t, d, d.get("uid") or t.uid)
            raptor.ended(task, state, waiter)
            return
        if type(task) is RaptorTask:
            r = self._raptors.get(task.description.get("raptor_id"))
            if r is not None:
                r.ended(task, state)

    def _selected(self, uids) -> tuple[list[Task], bool]:
        if uids is None:
            return list(self._tasks.values()), True
        sel, many = listify(uids)
        tasks = self._tasks
        try:
            return [tasks[u] for u in sel], many
        except KeyError as e:
            raise ValueError(f"no task {e.args[0]!r} in this TaskManager") from None

    def wait_tasks(self, uids=None, state=None, timeout: float | None = None):
        sel, many = self._selected(uids)
        pf_states = None if state is None else RS.task_states_to_pf(state)
        if self._were_early:
            timeout = wait_early(self._early_cond, sel, pf_states, timeout)
        self._pf.wait_tasks(
            [t._pf.uid for t in sel if type(t._pf) is not Early], state=pf_states, timeout=timeout
        )
        self._linker.flush()  # (RP's layout is there once a wait returns)
        names = RS.TASK_STATE  # (Task.state, inlined: a wait may name a million tasks)
        out = [names[t._pf.state] for t in sel]
        return out if many else out[0]

    def cancel_tasks(self, uids=None) -> None:
        sel, _ = self._selected(uids)
        early = [t for t in sel if type(t._pf) is Early]
        for t in early:
            self._end_early(t, S.CANCELED, f"canceled by the user: it {t._pf.reason}")
        self._pf.cancel_tasks([t._pf.uid for t in sel if type(t._pf) is not Early])

    def get_tasks(self, uids=None):
        if uids is None:
            return list(self._tasks.values())
        sel, many = listify(uids)
        missing = [u for u in sel if u not in self._tasks]
        if missing:
            raise ValueError(f"no task {missing[0]!r} in this TaskManager")
        out = [self._tasks[u] for u in sel]
        return out if many else out[0]

    def list_tasks(self) -> list[str]:
        return list(self._tasks)

    def register_callback(
        self, cb: Callable, cb_data=None, metric: str | None = None, uid: str | None = None
    ) -> None:
        """cb(task, state) -- or cb(task, state, cb_data) -- on every state change (of task
        `uid` only, if given), in order, from pilotfish's IO thread. An exception there
        (sys.exit() too) is logged and never stops the client."""
        metrics = [TASK_STATE] if metric is None else listify(metric)[0]
        if set(metrics) - {TASK_STATE, "WAIT_QUEUE_SIZE"}:
            raise ValueError(
                f"callback metric {metric!r}: rp.TASK_STATE (or "
                f"rp.WAIT_QUEUE_SIZE, never fired, as in RP) only"
            )
        if TASK_STATE not in metrics:
            return
        f = wrap_callback(cb, cb_data)
        reg = Registered(cb, TASK_STATE, uid)

        def relay(t, state: str) -> None:
            if not reg.on:
                return
            task = self._of_pf(t.uid)
            if task is None:
                if id(t.description) in self._hidden:
                    return  # a RAPTOR master's own task: not the client's
                task = self._wrap(t)
            if (
                task.uid in self._were_early
                and state in (S.NEW, S.SCHEDULING)
                and type(t) is not Early
            ):
                return  # (reported when it was held for its pilot)
            rp_state = RS.TASK_STATE[state]
            if uid is None or task.uid == uid:
                f(task, rp_state)
            if type(task) is RaptorMaster:  # its workers' state is its own
                # (RaptorMaster is a class a function builds: no type to mypy)
                for w in task.workers:  # type: ignore[attr-defined]  # (a RaptorMaster's)
                    if uid is None or w.uid == uid:
                        f(w, rp_state)

        reg.relay = relay
        self._registered.append(reg)
        self._pf.register_callback(relay)

    def unregister_callback(
        self, cb: Callable | None = None, metrics=None, uid: str | None = None
    ) -> None:
        """RP's: the callbacks registered with cb (None: all), of these metrics, for task
        uid (None: any)."""
        unregister(self._registered, self._pf.unregister_callback, cb, metrics, uid)

    def remove_pilots(self, pilot_ids, drain: bool = False) -> None:
        """RP's remove_pilots: these pilots (uids) get none of this manager's new tasks;
        its tasks already on them run on there. A task naming a removed pilot waits for it
        to be added again, as one naming a pilot never added does. The pilots go on
        (pmgr.cancel_pilots ends them). drain=True returns once this manager's tasks on
        them have ended. ValueError names an unknown uid (nothing is removed then)."""
        sel, _ = listify(pilot_ids)
        sel = [p.uid if isinstance(p, Pilot) else p for p in sel]
        self._pf.remove_pilots(sel, drain=drain)
        for uid in sel:
            self._pilots.pop(uid, None)

    def _session_closing(self) -> None:
        """The session closes (first its TaskManagers, as RP): no task callback fires for
        what the close itself cancels (scripts that stop on a CANCELED task would stop on
        their own close); the tasks still waiting for a pilot end CANCELED."""
        for reg in self._registered:
            reg.on = False
        self._close_early()

    def _session_closed(self) -> None:
        for task in list(self._tasks.values()):
            write_launch_failure_err(task)

    def _profiles(self, root: str) -> None:
        for task in list(self._tasks.values()):
            write_profile(task, root)

    # RP 0.x's names (tasks were "units"), kept by RP 1.x as aliases
    submit_units = submit_tasks
    wait_units = wait_tasks
    get_units = get_tasks
    cancel_units = cancel_tasks
    list_units = list_tasks

    def close(self) -> None:
        pass  # the session closes the manager


def setup_task_manager(session: Session) -> TaskManager:
    """The TaskManager a pilot's services run on (_pilot.Pilot's setup): its submit waits
    for no pilot's setup (not for this very one), and it is no pilot's own (attach)."""
    tm = TaskManager(session)
    tm._during_setup = True
    return tm
