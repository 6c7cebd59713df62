"""RAPTOR masters on the client side of pilotfish.rp (raptor.py, RP's rp.raptor, says what
maps to what): each master's bookkeeping (RaptorState: its workers, its live tasks, its hook
thread) and RAPTOR tasks as pilotfish function task descriptions. It reaches its TaskManager
through _api.RaptorPort only.
"""

from __future__ import annotations

import os
import queue
import shlex
import threading
from typing import Any

from .. import states as _S
from .._errors import DescriptionError, show
from ..descriptions import CheckedCall
from ..descriptions import TaskDescription as _PfTask
from . import _states as RS
from ._describe import (
    RAPTOR_MASTER,
    RAPTOR_WORKER,
    TASK_EVAL,
    TASK_EXEC,
    TASK_EXECUTABLE,
    TASK_FUNCTION,
    TASK_METHOD,
    TASK_PROC,
    TASK_SHELL,
    PythonTask,
    TaskDescription,
    task_shape,
    translated,
)
from .raptor import DefaultWorker, Master, MPIWorker, PlainRun, Run, Worker, load_class

STOP_FILE = ".raptor_stop"
# the master's task: holds its cores until the client writes STOP_FILE in its sandbox
_HOLD = f"while [ ! -e {STOP_FILE} ]; do sleep 0.2; done; cat {STOP_FILE}"

# fields a RAPTOR task may have (the rest, where set, are refused: it runs in a worker)
_RAPTOR_FIELDS = frozenset(
    (
        "mode",
        "function",
        "method",
        "args",
        "kwargs",
        "code",
        "command",
        "executable",
        "arguments",
        "environment",
        "ranks",
        "cores_per_rank",
        "gpus_per_rank",
        "cpu_processes",
        "cpu_threads",
        "gpu_processes",
        "uid",
        "name",
        "raptor_id",
        "pilot",
        "timeout",
        "tags",
        "metadata",
        "priority",
        "pre_exec",
        "named_env",
        "threading_type",
        "cpu_process_type",
        "gpu_process_type",
        "mem_per_rank",
        "mem_per_process",
        "cpu_thread_type",
        "gpu_thread_type",
        "use_mpi",
        "gpu_type",
        "lfs_per_rank",
        "origin",
    )
)
_FINAL = _S.FINAL
_EMPTY: tuple = (None, "", [], {}, (), 0, 0.0, False)
# a call with only these fields takes the fast path (RaptorState._fast_pf)
_FAST_KEYS = frozenset(("mode", "function", "uid", "raptor_id", "name"))
# (a description's one slot, its member descriptor: set directly in plain_calls)
_VALUES: Any = _PfTask.values  # type: ignore[misc]  # (the slot's descriptor itself is meant)


def _plain(d: TaskDescription) -> tuple | None:
    """(kind, target, args, kwargs) of a plain call -- TASK_FUNCTION with an rp.PythonTask,
    or TASK_FUNCTION / TASK_METHOD naming a worker method --, else None."""
    fn = d.get("function")
    mode = d.get("mode") or TASK_FUNCTION
    if mode == TASK_FUNCTION and type(fn) is PythonTask:
        return "func", fn.function, fn.args, fn.kwargs
    if mode in (TASK_FUNCTION, TASK_METHOD) and isinstance(fn, str) and fn:
        return "method", fn, (), {}
    return None


# callables kept per master (one entry per target): a script that makes a callable per call
# (a lambda, a partial) would otherwise keep every one of them alive for the master's life
_CACHE_MAX = 4096


def _bounded(cache: dict) -> dict:
    """The cache, emptied first when full (an entry keeps its target alive, so a key -- the
    target's id -- never names another object while it is there)."""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    return cache


def _is_custom(cls: type, name: str) -> bool:
    return getattr(cls, name) is not getattr(Master, name)


class RaptorState:
    """One master: its pilot, its hooks (a Master instance), its worker class and workers,
    the calls' callables (one per kind and target), its live tasks."""

    def __init__(self, port, uid: str, pilot, master: Master, desc: TaskDescription, task_class):
        self.port = port  # (_api.RaptorPort: what it may do with its TaskManager)
        self.tmgr = port.tmgr
        self.task_class = task_class  # rp._task.Task (passed in: _api imports this module)
        self.uid = uid
        self.pilot = pilot
        self.master = master
        self.desc = desc
        self.handle = None  # the Raptor task
        self.worker_cls: type = DefaultWorker
        self.custom_worker = False
        self.workers: list = []  # rp Tasks (their state is the master's)
        self.shapes: list[tuple[int, float, float]] = []
        self.runs: dict = {}
        # a plain call's PlainRun (plain_calls) by its target: id(callable) or method name
        self._fast: dict = {}
        self._template_checked = False  # a plain call's description, checked whole once
        # its tasks' pilotfish Tasks in submit order (rpc('stop') counts the ended and
        # cancels the others)
        self.tasks: list = []
        self.lock = threading.Lock()
        self.n = 0
        self.stopped = False
        cls = type(master)
        self.wants_requests = _is_custom(cls, "request_cb")
        self.wants_results = _is_custom(cls, "result_cb")
        self.hooks: queue.Queue | None = None
        if self.wants_requests or self.wants_results or _is_custom(cls, "worker_state_cb"):
            self.hooks = queue.Queue()
            threading.Thread(target=self._hook_loop, name=f"rp-{uid}", daemon=True).start()
        master.attach(self, uid)

    # -- the master's hook thread --------------------------------------------------------
    def _hook_loop(self) -> None:
        while True:
            items = _drain(self.hooks)  # type: ignore[arg-type]  # hooks: a queue of tuples
            results = [x[1] for x in items if x is not None and x[0] == "result"]
            if results:
                try:
                    self.master.result_cb(results)
                except Exception:  # as RP: logged, the master goes on
                    import logging

                    logging.getLogger("pilotfish.rp").exception("%s: result_cb", self.uid)
            for x in items:
                if x is not None and x[0] == "worker":
                    try:
                        self.master.worker_state_cb(x[1], x[2])
                    except Exception:  # noqa: BLE001 -- as RP: a callback's error is not the master's
                        pass
                if x is not None and x[0] == "result" and x[2] is not None:
                    done, box = x[2]
                    box.append(x[1])
                    done.set()
            if any(x is None for x in items):
                return

    # -- workers ---------------------------------------------------------------------------
    def add_workers(self, descriptions) -> list:
        descs = descriptions if isinstance(descriptions, (list, tuple)) else [descriptions]
        out = []
        for i, td in enumerate(descs):
            td = td if isinstance(td, TaskDescription) else TaskDescription(td)
            if td.get("mode") != RAPTOR_WORKER:
                raise ValueError("unexpected task mode [%s]" % td.get("mode"))
            gpus = td.get("gpus_per_rank") or 0
            if gpus and not float(gpus).is_integer():
                raise RuntimeError("GPU sharing for workers is not supported")
            name = td.get("raptor_class") or "DefaultWorker"
            path = td.get("raptor_file") or None
            if not path and name in ("DefaultWorker", "MPIWorker", "Worker"):
                cls = {"DefaultWorker": DefaultWorker, "MPIWorker": MPIWorker, "Worker": Worker}[
                    name
                ]
            else:
                cls = load_class(path, name, Worker, "worker", i)
            if self.workers and cls is not self.worker_cls:
                raise DescriptionError(
                    "rp.TaskDescription",
                    "raptor_class",
                    name,
                    f"master {self.uid} has workers of class "
                    f"{self.worker_cls.__name__}: one class per master "
                    "here (submit another raptor for another class)",
                    index=i,
                )
            if cls is not self.worker_cls:  # (the calls' callables name it)
                self.runs.clear()
                self._fast.clear()
            self.worker_cls = cls
            self.custom_worker = cls not in (DefaultWorker, MPIWorker, Worker)
            shape = task_shape(td)
            self.shapes.append((shape["ranks"], shape["cores_per_rank"], shape["gpus_per_rank"]))
            if td.get("uid") is not None and self.port.uid_taken(td["uid"]):
                raise ValueError(f"rp.TaskDescription[{i}].uid = {td['uid']!r}: already used")
            with self.lock:
                uid = td.get("uid") or f"{self.uid}.{len(self.workers):04d}"
                self.port.note_uid(td.get("uid"))
                td["uid"] = uid
                td["raptor_id"] = self.uid
                w = self.task_class(self.tmgr, self.port.pf_task(self.handle), td, uid)
                self.workers.append(w)
            self.port.add_task(uid, w)
            if self.hooks is not None:
                self.hooks.put(("worker", {"uid": uid, "description": dict(td)}, w.state))
            out.append(w)
        return out

    # -- tasks -----------------------------------------------------------------------------
    def _run(self, kind: str, target: Any) -> Run:
        key = (kind, id(target) if callable(target) else target)
        r = self.runs.get(key)
        if r is None:
            # (r.target keeps a callable alive, so its id stays its key)
            r = _bounded(self.runs)[key] = Run(kind, target, self.worker_cls, self.uid)
        return r

    def to_pf(self, td: TaskDescription, index: int, uid: str) -> _PfTask:
        """A RAPTOR task as a pilotfish function task, or DescriptionError."""
        v = td
        if v.keys() <= _FAST_KEYS:  # a plain call (a pythontask, a callable, a method name)
            fast = self._fast_pf(v, uid)
            if fast is not None:
                return fast

        def fail(field: str, why: str) -> DescriptionError:
            return DescriptionError("rp.TaskDescription", field, v.get(field), why, index=index)

        mode = v.get("mode") or TASK_FUNCTION
        args, kwargs = v.get("args") or (), v.get("kwargs") or {}
        payload: Any = None
        if mode in (TASK_FUNCTION, TASK_METHOD):
            fn = (
                v.get("function")
                if mode == TASK_FUNCTION
                else (v.get("method") or v.get("function"))
            )
            if isinstance(fn, PythonTask):
                if args or kwargs:
                    raise fail("args", "must be empty for an rp.PythonTask function (as in RP)")
                run, args, kwargs = self._run("func", fn.function), fn.args, fn.kwargs
            elif isinstance(fn, str) and fn:
                run = self._run("method", fn)
            elif callable(fn):
                run = self._run("func", fn)
            else:
                raise fail(
                    "function",
                    "give an rp.PythonTask (an @rp.pythontask call), a "
                    "callable, or the name of a worker method",
                )
        elif mode == TASK_EVAL:
            if not isinstance(v.get("code"), str) or not v.get("code"):
                raise fail("code", "TASK_EVAL needs the code to eval")
            run, payload = self._run("eval", None), v["code"]
        elif mode == TASK_EXEC:
            if not isinstance(v.get("code"), str) or not v.get("code"):
                raise fail("code", "TASK_EXEC needs the code to exec")
            pre = [p for p in (v.get("pre_exec") or []) if isinstance(p, str)]
            run, payload = self._run("exec", None), (pre, v["code"])
        elif mode == TASK_PROC:
            exe = v.get("executable")
            if not exe:
                raise fail("executable", "TASK_PROC needs an executable")
            argv = [str(a) for a in (v.get("arguments") or [])]
            # RP's proc mode quotes each argument with shlex.quote (single quotes: no $)
            run, payload = self._run("proc", None), " ".join([exe] + [shlex.quote(a) for a in argv])
        elif mode == TASK_SHELL:
            if not v.get("command"):
                raise fail("command", "TASK_SHELL needs the command line")
            run, payload = self._run("shell", None), v["command"]
        elif isinstance(mode, str) and self.custom_worker:
            run = self._run("mode", mode)  # a mode the worker class registers (or fails)
            payload = {
                "description": {
                    k: x for k, x in v.items() if not callable(x) and not isinstance(x, PythonTask)
                }
            }
        else:
            raise fail(
                "mode",
                f"a RAPTOR master runs {TASK_FUNCTION}, {TASK_METHOD}, "
                f"{TASK_EVAL}, {TASK_EXEC}, {TASK_PROC}, {TASK_SHELL}, "
                f"{TASK_EXECUTABLE} and the modes its worker class registers",
            )
        for k, x in v.items():
            if (
                k not in _RAPTOR_FIELDS
                and k not in ("raptor_file", "raptor_class")
                and x not in _EMPTY
                and not (k in ("ranks", "cores_per_rank") and x == 1)
            ):
                raise fail(
                    k,
                    f"not for a RAPTOR task (it runs in a worker's process): "
                    f"{_ALTERNATIVE.get(k, 'leave it out')}",
                )
        shape = task_shape(v)
        ranks, cores, gpus = shape["ranks"], shape["cores_per_rank"], shape["gpus_per_rank"]
        if self.shapes and not any(
            r >= ranks and c >= cores and g >= gpus for r, c, g in self.shapes
        ):
            raise fail(
                "ranks" if ranks > 1 else "cores_per_rank",
                f"no worker of {self.uid} fits {ranks} rank(s) x {cores} core(s) x "
                f"{gpus} GPU(s) (its workers: "
                f"{', '.join(f'{r}x{c}x{g}' for r, c, g in self.shapes)})",
            )
        env = v.get("environment") or None
        if env is not None and not isinstance(env, dict):
            raise fail("environment", "must be a dict")
        out: dict[str, Any] = {
            "function": run,
            "args": ((uid, env, payload), tuple(args), dict(kwargs)),
            "name": self.uid,
            "pilot": self.pilot.uid,
            **shape,
        }
        for k in ("tags", "metadata", "priority", "timeout"):
            if v.get(k) not in _EMPTY:
                out[k] = v[k]
        return translated(_PfTask, "rp.TaskDescription", out, index)

    def plain_calls(self, descs: list) -> list[_PfTask] | None:
        """The function tasks of a batch of new plain calls (a pythontask or a method name,
        no field but mode and function), in one pass, each marked as this master's
        (raptor_id; its uid is its pilotfish task's, set once submitted); None if any is
        not such a call, or no worker takes a 1-core call (the general path then takes the
        batch and says what is wrong). Each is a CheckedCall: its template was checked
        whole (_plain_run), its arguments here."""
        if not self.fits_plain():
            return None
        fast, func, td, pt, get = self._fast, TASK_FUNCTION, TaskDescription, PythonTask, dict.get
        rid, pin = self.uid, self._pin()
        new, put, cls = object.__new__, _VALUES.__set__, CheckedCall
        out: list = []
        add = out.append
        for d in descs:  # (per call: a microsecond here is 3 % of a call's whole cost)
            if type(d) is not td:
                return None
            n = len(d)
            fn = get(d, "function")
            if fn is None or n > 2 or (n == 2 and "mode" not in d):
                return None  # (a field but mode and function)
            if type(fn) is pt and (get(d, "mode") or func) == func:
                target = fn.function
                run = fast.get(id(target)) or self._plain_run("func", target)
                args, kwargs = fn.args, fn.kwargs
            else:
                p = _plain(d)
                if p is None:
                    return None
                run = self._plain_run(p[0], p[1])
                args, kwargs = p[2], p[3]
            v = {"function": run, "name": rid}
            if args:
                v["args"] = args  # (a tuple: rp.PythonTask made it one)
            if kwargs:
                v["kwargs"] = kwargs  # (str keys: rp.PythonTask checked them)
            if pin is not None:
                v["pilot"] = pin
            pd = new(cls)
            put(pd, v)
            add(pd)
        for d in descs:
            d["raptor_id"] = rid
        return out

    def _plain_run(self, kind: str, target: Any):
        """A plain call's PlainRun for its target (by id for a callable, which the PlainRun
        keeps alive; by name for a method: the two kinds of key cannot meet)."""
        key = id(target) if kind == "func" else target
        run = self._fast.get(key)
        if run is None:
            run = PlainRun(kind, target, self.worker_cls, self.uid)
            self._check_template(run)
            _bounded(self._fast)[key] = run
        return run

    def _check_template(self, run: Run) -> None:
        """A plain call's description (its callable, this master's uid as its name, its
        pilot; 1 rank, 1 core), checked whole once: per call only the callable and the
        arguments differ, and those are checked where they are made."""
        if not self._template_checked:
            translated(
                _PfTask,
                "rp.TaskDescription",
                {"function": run, "name": self.uid, "pilot": self.pilot.uid},
                0,
            ).check_complete()
            self._template_checked = True

    def fits_plain(self) -> bool:
        """A worker of this master takes a call of 1 rank x 1 core (any, before workers)."""
        return not self.shapes or any(r >= 1 and c >= 1 for r, c, _ in self.shapes)

    def _pin(self) -> str | None:
        """The pilot its calls are pinned to: its own, unless that is its manager's only one."""
        pf_pilots = self.port.pilot_uids()
        return None if pf_pilots == [self.pilot.uid] else self.pilot.uid

    def _plain_pf(self, plain: tuple, uid: str, pin: str | None) -> _PfTask:
        """A plain call's function task on the general path: its target's Run, this call's
        uid and arguments, its master's uid as the name."""
        kind, target, args, kwargs = plain
        run = self._run(kind, target)
        self._check_template(run)
        v = {"function": run, "args": ((uid, None, None), args, kwargs), "name": self.uid}
        if pin is not None:
            v["pilot"] = pin
        return _PfTask.from_checked(v)

    def _fast_pf(self, v: TaskDescription, uid: str) -> _PfTask | None:
        """A plain call met on the general path (it may carry uid, name, raptor_id), as
        plain_calls makes it; None: not such a call (the full translation decides)."""
        p = _plain(v) if self.fits_plain() else None
        return None if p is None else self._plain_pf(p, uid, self._pin())

    def refused(self, uid: str) -> _PfTask:
        """A task request_cb did not return: it ends FAILED, saying why."""
        return _PfTask(
            {"function": _refused, "args": (uid, self.uid), "name": uid, "pilot": self.pilot.uid}
        )

    def next_uid(self) -> str:
        return self.next_uids(1)[0]

    def next_uids(self, k: int) -> list[str]:
        with self.lock:
            first, self.n = self.n, self.n + k
        return [f"{self.uid}.task.{i:06d}" for i in range(first, first + k)]

    def request(self, tasks: list[tuple[str, TaskDescription]], origin: str):
        """(uid, description) pairs through the master's request_cb: those it returns, and
        the uids it left out."""
        if not self.wants_requests:
            return tasks, []
        dicts = [
            {
                "uid": uid,
                "description": dict(td, uid=uid),
                "state": RS.AGENT_SCHEDULING,
                "raptor_id": self.uid,
                "origin": origin,
            }
            for uid, td in tasks
        ]
        back = self.master.request_cb(dicts)
        back = [] if back is None else back if isinstance(back, list) else [back]
        keep = []
        for d in back:
            desc = d.get("description") if isinstance(d, dict) else None
            if desc is None:
                continue
            keep.append((d.get("uid") or desc.get("uid"), TaskDescription(desc)))
        kept = {u for u, _ in keep}
        return keep, [u for u, _ in tasks if u not in kept]

    def submit_own(self, tasks, waiter=None) -> None:
        """The master's own tasks: through request_cb, run, their ends to result_cb."""
        items = tasks if isinstance(tasks, (list, tuple)) else [tasks]
        pairs = []
        for td in items:
            if isinstance(td, dict) and "description" in td and not isinstance(td, TaskDescription):
                td = td["description"]
            td = TaskDescription(td)
            pairs.append((td.get("uid") or self.next_uid(), td))
        keep, left = self.request(pairs, "raptor")
        pf_descs, rp_descs = [], []
        for i, (uid, td) in enumerate(keep):
            td["uid"] = uid
            if (td.get("mode") or TASK_EXECUTABLE) == TASK_EXECUTABLE:
                td = TaskDescription({k: x for k, x in td.items() if k != "raptor_id"})
                td["pilot"] = self.pilot.uid
                pd = td.to_pf(i)
            else:
                pd = self.to_pf(td, i, uid)
            pf_descs.append(pd)
            rp_descs.append(td)
        for uid in left:
            pf_descs.append(self.refused(uid))
            rp_descs.append(
                TaskDescription({"uid": uid, "raptor_id": self.uid, "mode": TASK_FUNCTION})
            )
        self.port.submit_hidden(self, pf_descs, rp_descs, waiter)

    def track(self, pf_tasks) -> None:
        """Its new tasks (pilotfish Tasks). Ends are read from them, never reported one by
        one: no per-task work on the IO thread for a master without hooks. (Kept whole,
        not pruned as they end: the TaskManager holds every Task anyway, and a pruning
        pass cost more than the rest of a call's bookkeeping here.)"""
        with self.lock:
            self.tasks.extend(pf_tasks)

    def ended(self, task, state: str, waiter=None) -> None:
        """A task of a master with hooks ended: its result to result_cb (or the waiter)."""
        if self.hooks is not None and (self.wants_results or waiter is not None):
            self.hooks.put(("result", result_dict(task), waiter))

    def stop(self) -> None:
        """rpc('stop'): the master's task ends DONE; its unfinished tasks are canceled."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            c = {"DONE": 0, "FAILED": 0, "CANCELED": 0}
            live = []
            for t in self.tasks:
                if t.state in _FINAL:
                    if t.state in c:
                        c[t.state] += 1
                else:
                    live.append(t.uid)
        sb = self.handle.sandbox if self.handle is not None else None
        if sb:
            line = (
                f"{self.uid}: stopped ({c['DONE']} tasks done, {c['FAILED']} failed, "
                f"{c['CANCELED']} canceled)\n"
            )
            tmp = os.path.join(sb, STOP_FILE + ".tmp")
            os.makedirs(sb, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(line)
            os.replace(tmp, os.path.join(sb, STOP_FILE))
        if live:
            self.port.cancel(live)
        if self.hooks is not None:
            self.hooks.put(None)

    def rpc(self, cmd: str, *args, **kwargs):
        """What RP's default master answers: 'stop'; any other command is ignored (None), as
        there."""
        if cmd == "stop":
            self.master.stop() if self.master.alive() else self.stop()
        return None


def _refused(uid: str, raptor: str):
    raise RuntimeError(f"{uid} was not run: the request_cb of {raptor} did not return it")


_ALTERNATIVE = {
    "input_staging": "stage into the pilot's shared space with pilot.stage_in and read it "
    "from there",
    "output_staging": "return the data, or write it to the pilot's shared space",
    "stdout": "a call's output is captured: task.stdout",
    "stderr": "a call's errors are captured: task.stderr",
    "sandbox": "calls run in their worker's directory",
    "post_exec": "put it in the function",
    "pre_launch": "put it in the function",
    "post_launch": "put it in the function",
}


def result_dict(task) -> dict:
    """A task as RP's master hooks see it."""
    return {
        "uid": task.uid,
        "state": task.state,
        "stdout": task.stdout,
        "stderr": task.stderr,
        "exit_code": task.exit_code,
        "return_value": task.return_value,
        "exception": task.exception,
        "exception_detail": task.exception_detail,
        "description": dict(task.description),
        "raptor_id": task.description.get("raptor_id"),
    }


def master_task(td: TaskDescription, uid: str, pilot_uid: str, index: int) -> TaskDescription:
    """The task a master is on the pilot: the description's shape, environment, staging and
    pre_exec, holding its cores until rpc('stop')."""
    if td.get("executable"):
        raise DescriptionError(
            "rp.TaskDescription",
            "executable",
            td.get("executable"),
            "a master running a script of its own is not supported on "
            "pilotfish: name a subclass of rp.raptor.Master with "
            "raptor_class (and raptor_file); its hooks run in the "
            "client",
            index=index,
        )
    keep = {
        k: x
        for k, x in td.items()
        if k
        in (
            "ranks",
            "cores_per_rank",
            "gpus_per_rank",
            "cpu_processes",
            "cpu_threads",
            "gpu_processes",
            "mem_per_rank",
            "environment",
            "named_env",
            "pre_exec",
            "input_staging",
            "output_staging",
            "tags",
            "metadata",
            "name",
            "sandbox",
            "priority",
        )
    }
    return TaskDescription(
        {
            **keep,
            "executable": "/bin/sh",
            "arguments": ["-c", _HOLD],
            "uid": uid,
            "pilot": pilot_uid,
            "mode": TASK_EXECUTABLE,
        }
    )


def master_instance(td: TaskDescription, index: int) -> Master:
    name = td.get("raptor_class") or "Master"
    path = td.get("raptor_file") or None
    if not path and name == "Master":
        return Master()
    cls = load_class(path, name, Master, "master", index)
    try:
        return cls()
    except TypeError:
        return cls(cfg={})


def check_master_mode(td) -> None:
    if td.get("mode") != RAPTOR_MASTER:
        raise ValueError("unexpected task mode [%s]" % td.get("mode"))


__all__ = ["RaptorState", "master_task", "master_instance", "result_dict", "show"]


def _drain(q: queue.Queue) -> list:
    """What the queue holds: the first item waited for, the rest that are there."""
    out = [q.get()]
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out
