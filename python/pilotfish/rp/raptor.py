"""RP's RAPTOR (master/worker function execution) on pilotfish's function pools.

    raptor = pilot.submit_raptors(rp.TaskDescription({'mode': rp.RAPTOR_MASTER}))[0]
    raptor.submit_workers(rp.TaskDescription({'mode': rp.RAPTOR_WORKER, 'cores_per_rank': 4}))
    tasks = raptor.submit_tasks([rp.TaskDescription({'mode': rp.TASK_FUNCTION,
                                                     'function': 'hello', 'args': ['x']})])
    raptor.rpc('stop')

What each piece is here:
- A master is a task of the pilot that holds the cores its description asks for, from
  submit_raptors until rpc('stop') (then it ends DONE, as RP's). Its hooks -- a subclass of
  rp.raptor.Master named by raptor_class/raptor_file -- run in the client, on a thread of their
  own per master (RP runs them in the master's process on the pilot): request_cb on every task
  submitted to it, result_cb on every task that ends, submit_tasks from anywhere.
- Workers are pilotfish's function workers: each RAPTOR task is a pilotfish function task, so
  it runs at function-task speed on persistent Python workers the pilot starts (as many as the
  calls need, up to what the pilot holds; agent/functions.py). submit_workers' descriptions
  give the worker class (rp.raptor.DefaultWorker, or a subclass named by raptor_class /
  raptor_file) and bound the calls' shapes, as RP's worker asserts a call fits it. The worker
  tasks' states follow their master's.
- Modes: TASK_FUNCTION (an rp.PythonTask / @rp.pythontask call, a callable, or the name of a
  worker method plus args/kwargs), TASK_METHOD, TASK_EVAL, TASK_EXEC, TASK_PROC, TASK_SHELL,
  modes a worker subclass registers (register_mode), and TASK_EXECUTABLE (an ordinary task).
  The call sees RP_TASK_ID, RP_RANK, RP_RANKS and the task's environment, as in RP.
- Results as RP fills them: return_value, stdout, stderr, exit_code (0, a process's own code,
  or 1), exception (repr of the exception, RP's form) and exception_detail (its traceback).

Refused at submit, each with what to use instead: a master that runs its own script
(executable), a worker's get_master().run_task, workers of different classes on one master.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from typing import Any

from .. import _running
from .._errors import DescriptionError

log = logging.getLogger("pilotfish.rp.raptor")


class _NoProfiler:
    """RP's profiler, which these hooks may call: pilotfish's own events profile the tasks."""

    def prof(self, *args, **kwargs) -> None:
        pass

    def flush(self) -> None:
        pass


# -- masters ---------------------------------------------------------------------------------


class Master:
    """rp.raptor.Master: subclass it and name the class in the RAPTOR_MASTER description
    (raptor_class, raptor_file) to filter tasks (request_cb), see their results (result_cb),
    and submit tasks of its own (submit_tasks). Its hooks run in the client, one thread per
    master; a hook that raises is logged, as in RP."""

    def __init__(self, cfg: Any = None):
        self._cfg = cfg
        self._uid = os.environ.get("RP_TASK_ID", "raptor")
        self._log = log
        self._prof = _NoProfiler()
        self._term = threading.Event()
        self._raptor: Any = None  # the _Raptor it serves (set before start)

    @property
    def uid(self) -> str:
        return self._uid

    def attach(self, raptor: Any, uid: str) -> None:
        """pilotfish.rp's: the master this instance serves (its bookkeeping, _masters.py's
        RaptorState) and its uid, set when it is submitted, before start()."""
        self._raptor = raptor
        self._uid = uid

    @property
    def workers(self) -> dict:
        """{uid: {'uid', 'status', 'description'}} of the workers submitted to this master."""
        r = self._raptor
        return (
            {}
            if r is None
            else {
                w.uid: {"uid": w.uid, "status": w.state, "description": dict(w.description)}
                for w in r.workers
            }
        )

    def request_cb(self, tasks: list[dict]) -> list[dict]:
        """Every task submitted to this master (a dict: uid, description, state, ...)
        passes here first; the tasks returned run. A task left out ends FAILED, saying so."""
        return tasks

    def result_cb(self, tasks: list[dict]) -> None:
        """Tasks that ended (dicts: uid, state, stdout, stderr, exit_code, return_value,
        exception, exception_detail, description)."""

    def worker_state_cb(self, worker_dict: dict, state: str) -> None:
        """A worker's state changed (as RP: called with the worker's dict)."""

    def submit_tasks(self, tasks) -> None:
        """Tasks of the master's own (TaskDescriptions or task dicts): through request_cb,
        then run; their ends go to result_cb (they are not the client's tasks)."""
        if self._raptor is None:
            raise RuntimeError("this master is not running (submit it with pilot.submit_raptors)")
        self._raptor.submit_own(tasks)

    def submit_workers(self, descriptions) -> list[str]:
        if self._raptor is None:
            raise RuntimeError("this master is not running")
        return [w.uid for w in self._raptor.add_workers(descriptions)]

    def wait_workers(self, count: int | None = None, uids=None) -> None:
        """Workers are pilotfish's function workers, started as calls need them: nothing
        to wait for."""

    def run_task(self, td) -> dict:
        """Run one task and wait for it: its dict, as result_cb gets it."""
        done = threading.Event()
        box: list = []
        self._raptor.submit_own([td], waiter=(done, box))
        done.wait()
        return box[0]

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._term.set()
        if self._raptor is not None:
            self._raptor.stop()

    def alive(self) -> bool:
        return not self._term.is_set()

    def join(self) -> None:
        self._term.wait()


# -- workers ---------------------------------------------------------------------------------


class Worker:
    """rp.raptor.Worker (and DefaultWorker, MPIWorker): the class whose methods RAPTOR tasks
    call by name. Subclass it, define methods, name the class in the RAPTOR_WORKER
    description (raptor_class, and raptor_file unless it is in the script itself). One
    instance per pilotfish function worker process, made on its first call as
    cls(raptor_id)."""

    def __init__(self, cfg: Any = None, *args, **kwargs):
        self._raptor_id = cfg if isinstance(cfg, str) else os.environ.get("RP_RAPTOR_ID", "")
        self._uid = f"{self._raptor_id}.worker.{os.getpid()}"
        self._rank = 0
        self._ranks = 1
        self._log = logging.getLogger("pilotfish.rp.raptor.worker")
        self._prof = _NoProfiler()
        self._modes: dict = {}

    def register_mode(self, name: str, dispatcher) -> None:
        """A mode of its own: tasks with mode=name call dispatcher(task dict), which returns
        (stdout, stderr, exit_code, return_value, exception) as RP's dispatchers."""
        if name in self._modes:
            raise ValueError(f"mode {name} already registered")
        self._modes[name] = dispatcher

    def get_dispatcher(self, name: str):
        if name not in self._modes:
            raise ValueError(f"mode {name} unknown")
        return self._modes[name]

    def get_master(self):
        raise RuntimeError(
            "a worker submitting tasks to its master (get_master().run_task) "
            "is not supported on pilotfish: submit the task from the client, "
            "or from the master's request_cb/result_cb (Master.submit_tasks)"
        )

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def join(self) -> None:
        pass

    def hello(self, msg, sleep=0):
        """RP's default worker method: prints twice, returns 'hello <msg>'."""
        print("hello %s: %.3f" % (msg, time.time()))
        time.sleep(sleep)
        print("hello %s: %.3f" % (msg, time.time()))
        return "hello %s" % msg

    def hello_mpi(self, comm, msg, sleep=0):
        """RP's default MPI worker method: each rank prints; returns 'hello <rank>/<size>'."""
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        print("hello %d/%d: %s" % (rank, size, msg))
        time.sleep(sleep)
        return "hello %d/%d" % (rank, size)


class DefaultWorker(Worker):
    """RP's default worker."""


class MPIWorker(Worker):
    """RP's MPI worker: calls with ranks > 1 get the ranks' communicator (mpi4py)."""


# -- what runs on a pilotfish function worker -------------------------------------------------

_INSTANCES: dict = {}  # (worker class, raptor id) -> its instance, in this worker process


class TaskExit(RuntimeError):
    """A RAPTOR task's process (TASK_PROC, TASK_SHELL) or mode ended with a non-zero code."""

    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or f"exit code {code}")
        self.code = code

    def __reduce__(self):
        return (TaskExit, (self.code, str(self)))


def _instance(cls, raptor_id: str):
    key = (cls, raptor_id)
    obj = _INSTANCES.get(key)
    if obj is None:
        os.environ["RP_RAPTOR_ID"] = raptor_id
        obj = _INSTANCES[key] = cls(raptor_id)
    return obj


def _inject_comm(comm, args: list, kwargs: dict, py_func: bool) -> None:
    """RP's rule: a PythonTask gets the communicator where it left None for it (comm=None,
    or its first argument); a worker method gets it as its first argument."""
    if not py_func:
        args.insert(0, comm)
    elif kwargs.get("comm", 0) is None:
        kwargs["comm"] = comm
    elif args and args[0] is None:
        args[0] = comm
    else:
        raise RuntimeError(
            "can't inject the communicator: give comm=None or None as the "
            "first argument of the call"
        )


_SINGLE = False  # this worker's RP_RANK / RP_RANKS are 0 / 1 (set by a plain call)
_ENV_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _single_call_env(uid: str) -> None:
    """A call of one rank with no environment of its own: its RP_TASK_ID, and RP_RANK /
    RP_RANKS 0 / 1 (set once: reading os.environ costs as much as writing it). RP_TASK_ID is
    set in os.environ -- what the call's Python code reads; it stays until the next call
    sets its own. The process's C environment -- what a child started without env=
    inherits -- is not rewritten per call: glibc's setenv costs ~2 us and keeps every value
    it was ever given, a string per call for the life of the worker. TASK_PROC and
    TASK_SHELL pass os.environ to their process; a call that starts one itself passes
    env=os.environ."""
    global _SINGLE
    if _ENV_DATA is not None:
        _ENV_DATA[b"RP_TASK_ID"] = uid.encode()
    else:
        os.environ["RP_TASK_ID"] = uid
    if not _SINGLE:
        os.environ["RP_RANK"], os.environ["RP_RANKS"] = "0", "1"
        _SINGLE = True


class Run:
    """The callable a RAPTOR task is on pilotfish's function workers: one per (kind, target)
    per master, so a callable travels once per submit. Called as run(info, args, kwargs)
    (comm= on several ranks), info = (uid, env or None, payload)."""

    # __qualname__: what the session's journal names a call's function by (a resume matches
    # tasks by it): its kind and target, not the class alone
    __slots__ = ("kind", "target", "worker", "raptor_id", "is_async", "__qualname__")

    def __init__(self, kind: str, target: Any, worker: type, raptor_id: str):
        self.kind, self.target, self.worker, self.raptor_id = kind, target, worker, raptor_id
        self.is_async = None  # (a func: whether it is a coroutine function, once asked)
        self.__qualname__ = (
            f"{type(self).__name__}[{kind} {getattr(target, '__qualname__', target)}]"
        )

    def __getstate__(self):
        return (self.kind, self.target, self.worker, self.raptor_id)

    def __setstate__(self, s):
        self.__init__(*s)

    def __call__(self, info, args=(), kwargs=None, comm=None):
        uid, env, payload = info
        global _SINGLE
        if comm is None and not env:  # the common call: its id; rank 0 of 1
            _single_call_env(uid)
            if self.kind == "func" and self.is_async is False:  # (the hot path, once known)
                return self.target(*args, **kwargs) if kwargs else self.target(*args)
            return self._run(uid, payload, list(args), dict(kwargs or {}), comm)
        kwargs = dict(kwargs or {})
        _SINGLE = False  # (what this call sets is put back as it was, whatever that was)
        old = {}
        rank = 0 if comm is None else comm.rank
        put = {
            "RP_TASK_ID": uid,
            "RP_RANK": str(rank),
            "RP_RANKS": str(1 if comm is None else comm.size),
        }
        if env:
            put.update(env)
        for k, v in put.items():
            old[k] = os.environ.get(k)
            os.environ[k] = str(v)
        try:
            return self._run(uid, payload, list(args), kwargs, comm)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _run(self, uid, payload, args, kwargs, comm):
        kind = self.kind
        if kind == "func":  # a callable (an rp.PythonTask's)
            fn = self.target
            if comm is not None:
                _inject_comm(comm, args, kwargs, True)
            if self.is_async is None:  # (asked once per Run in this worker, not per call)
                self.is_async = asyncio.iscoroutinefunction(fn)
            return asyncio.run(fn(*args, **kwargs)) if self.is_async else fn(*args, **kwargs)
        if kind == "method":
            obj = _instance(self.worker, self.raptor_id)
            fn = getattr(obj, self.target, None)
            if fn is None or not callable(fn):
                raise ValueError(
                    f"{uid}: callable {self.target} not found (no method of "
                    f"{type(obj).__name__} has that name)"
                )
            if comm is not None:
                _inject_comm(comm, args, kwargs, False)
            return _call(fn, args, kwargs)
        if kind == "eval":
            return eval(  # noqa: S307 -- RP's TASK_EVAL: the user's code, by design
                payload,
                {
                    "os": os,
                    "sys": sys,
                    "time": time,
                    "io": io,
                    "shlex": shlex,
                    "asyncio": asyncio,
                },
            )
        if kind == "exec":  # RP: the code is the body of a function; its return is the value
            pre, code = payload
            body = "".join("    " + line + "\n" for line in code.split("\n"))
            src = "\n".join(pre) + "\n\ndef _rp_exec():\n" + body + "\n_rp_result = _rp_exec()\n"
            scope: dict = {}
            exec(src, scope)  # noqa: S102 -- RP's TASK_EXEC: the user's code, by design
            return scope.get("_rp_result")
        if kind in ("proc", "shell"):
            cmd = payload
            p = subprocess.run(
                cmd,
                shell=True,
                capture_output=True,
                text=True,
                errors="replace",
                env=dict(os.environ),
            )
            sys.stdout.write(p.stdout)
            sys.stderr.write(p.stderr)
            if p.returncode != 0:
                raise TaskExit(p.returncode)
            return None
        if kind == "mode":  # a mode the worker class registered
            obj = _instance(self.worker, self.raptor_id)
            task = dict(payload, uid=uid)
            out, err, ret, val, exc = obj.get_dispatcher(self.target)(task)
            if out:
                sys.stdout.write(str(out))
            if err:
                sys.stderr.write(str(err))
            if ret:
                raise TaskExit(int(ret), str(exc) if exc else None)
            return val
        raise ValueError(f"unknown RAPTOR call kind {kind!r}")


class PlainRun(Run):
    """A plain call's callable (an rp.PythonTask, or a worker method by name; 1 rank, no
    environment of its own), called with the call's own arguments, as pilotfish's function
    tasks are: its RP_TASK_ID is the uid of the pilotfish task it runs as (such a call's RP
    uid is that uid, as RP numbers client tasks), read from the worker (pf.task_uid()) and
    not carried with every call."""

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        uid = _running.uid or ""
        _single_call_env(uid)
        if self.kind == "func" and self.is_async is False:  # (the hot path, once known)
            return self.target(*args, **kwargs)
        return self._run(uid, None, list(args), kwargs, None)


def _call(fn, args, kwargs):
    if asyncio.iscoroutinefunction(fn):
        return asyncio.run(fn(*args, **kwargs))
    return fn(*args, **kwargs)


# -- loading classes named by raptor_class / raptor_file --------------------------------------


def load_class(path: str | None, name: str, base: type, field_prefix: str, index: int):
    """The class `name` from file `path` (relative to the client's directory), or from the
    script itself (__main__) without a path; it must subclass `base`."""
    kind = "rp.TaskDescription"
    if path:
        full = os.path.abspath(path)
        if not os.path.isfile(full):
            raise DescriptionError(
                kind,
                "raptor_file",
                path,
                f"no such file (from {os.getcwd()}): pilotfish loads the "
                f"{field_prefix} class in the client",
                index=index,
            )
        modname = "_rp_raptor_" + os.path.splitext(os.path.basename(full))[0]
        mod = sys.modules.get(modname)
        if mod is None or getattr(mod, "__file__", None) != full:
            spec = importlib.util.spec_from_file_location(modname, full)
            if spec is None or spec.loader is None:  # (a .py file always has both)
                raise ImportError(f"cannot load {full} as a module")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
            import cloudpickle

            cloudpickle.register_pickle_by_value(mod)  # workers cannot import it by name
    else:
        mod = sys.modules.get("__main__")
    cls = getattr(mod, name, None)
    if not isinstance(cls, type) or not issubclass(cls, base):
        where = path or "the script (__main__)"
        raise DescriptionError(
            kind,
            "raptor_class",
            name,
            f"no subclass of rp.raptor.{base.__name__} of that name in {where}",
            index=index,
        )
    return cls


__all__ = ["Master", "Worker", "DefaultWorker", "MPIWorker", "TaskExit"]
