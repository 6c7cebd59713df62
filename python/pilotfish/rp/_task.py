"""RP's Task over pilotfish's (and RAPTOR's: RaptorTask, RaptorMaster), and the stand-in
of a task held for a pilot not added yet (Early: RP's early binding).

An rp Task reads its pilotfish twin (its `_pf`) and its description: state in RP's names,
outputs where RP keeps them (<uid>.out / <uid>.err in its sandbox, _layout.py), RP's
exception forms. Its TaskManager (_api.py) makes them; `write_launch_failure_err` and
`write_profile` are what the session's close does with each.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

from .. import states as S
from .._mpi import stderr_reason
from .._util import gc_paused
from . import _states as RS
from ._callbacks import listify
from ._describe import TaskDescription
from ._staging import staging
from ._layout import sandbox_name, task_dir

log = logging.getLogger("pilotfish.rp")

REASON_TAIL = 300  # characters of a <uid>.err quoted in exception_detail (as the agent's)


class Early:
    """The stand-in for the pilotfish task of an RP task whose `pilot` names a pilot not
    (yet) added to its TaskManager: RP's early-bound task, held in TMGR_SCHEDULING until
    add_pilots brings that pilot (then submitted, and this is replaced by its pilotfish
    task), or canceled (cancel_tasks, the session's close). It reads as a pilotfish task
    that was not sent: no exit code, no outputs; `reason` says what it waits for."""

    __slots__ = ("uid", "description", "pilot", "state", "reason", "_hist")
    exit_code = result = exception = stdout = stderr = slots = partition = None

    def __init__(self, uid: str, description, pilot: str, now: float):
        self.uid, self.description, self.pilot = uid, description, pilot
        self.state = S.SCHEDULING
        self.reason = (
            f"waits for pilot {pilot!r}: not added to its TaskManager "
            "(tmgr.add_pilots adds it; RP keeps such a task pending, too)"
        )
        self._hist = [(S.NEW, now), (S.SCHEDULING, now)]

    name = property(lambda self: self.description.name)
    history = property(lambda self: list(self._hist))

    def end(self, state: str, reason: str) -> None:
        self.state, self.reason = state, reason
        self._hist.append((state, time.time()))


class Task:
    """An RP task: uid, name, state (RP's names), exit_code, stdout, stderr, pilot, sandbox,
    task_sandbox, description, return_value, exception, exception_detail, output_files,
    as_dict."""

    __slots__ = ("_pf", "uid", "description", "tmgr", "_ofiles")

    def __init__(self, tmgr: Any, pf_task, description: TaskDescription, uid: str):
        self._pf = pf_task
        self.uid = uid
        self.description = description
        self.tmgr = tmgr
        self._ofiles: list[str] | None = None

    name = property(lambda self: self.description.get("name") or self._pf.name)
    state = property(lambda self: RS.TASK_STATE[self._pf.state])
    exit_code = property(lambda self: self._pf.exit_code)
    pilot = property(lambda self: self._pf.pilot)
    return_value = property(lambda self: self._pf.result)
    origin = property(lambda self: "client")

    @property
    def sandbox(self) -> str | None:
        p = self.tmgr._pf.get_pilot(self._pf.pilot)
        if p is None:
            return None
        return task_dir(
            p.sandbox, self.description.get("sandbox") or sandbox_name(self.uid, self._pf.uid)
        )

    @property
    def task_sandbox(self) -> str | None:
        sb = self.sandbox
        return None if sb is None else f"file://localhost{sb}/"

    @property
    def pilot_sandbox(self) -> str | None:
        p = self.tmgr._pf.get_pilot(self._pf.pilot)
        return None if p is None else f"file://localhost{p.sandbox}/"

    @property
    def session_sandbox(self) -> str:
        return f"file://localhost{self.tmgr.session.path}/"

    @property
    def client_sandbox(self) -> str:
        """RP's: the directory that holds the session's own (<client sandbox>/<sid>)."""
        return os.path.dirname(self.tmgr.session.path) if self.tmgr else os.getcwd()

    @property
    def output_files(self) -> list[str] | None:
        """RP's list of the files the task made in its sandbox: what is there once it ended,
        less what input staging put there and RP's own `<uid>.*` files, sorted (RP takes
        the difference around the run; files a MOVE took away are listed too). None before
        the task ends."""
        if self._pf.state not in S.FINAL:
            return None
        if self._ofiles is None:
            sb = self.sandbox
            try:
                now = set(os.listdir(sb)) if sb else set()
            except OSError:
                now = set()
            staged = set()
            for d in staging(
                self.description.get("input_staging") or [],
                "input_staging",
                lambda f, w: ValueError(w),
            ):
                tgt = d.get("target") or os.path.basename(d["source"].rstrip("/"))
                staged.add(tgt.split("://", 1)[-1].lstrip("/").split("/")[0])
            for d in staging(
                self.description.get("output_staging") or [],
                "output_staging",
                lambda f, w: ValueError(w),
            ):
                if d["action"] == "move":
                    now.add(d["source"].split("://", 1)[-1].lstrip("/").split("/")[0])
            self._ofiles = sorted(
                f
                for f in now - staged
                if not f.startswith(self.uid + ".") and not f.startswith(".raptor_stop")
            )
        return self._ofiles

    def _output(self, which: str) -> str | None:
        captured = getattr(self._pf, which)
        if captured is not None:
            return captured
        if which == "stderr":
            write_launch_failure_err(self)
        name = self.description.get(which)  # a file name in the sandbox (RP's form)
        if not name and self._rp_files():
            # RP's own <uid>.out / <uid>.err (_layout.task_extra)
            name = f"{sandbox_name(self.uid, self._pf.uid)}.{which[3:]}"
        if name and self.sandbox:
            path = name if os.path.isabs(name) else os.path.join(self.sandbox, name)
            try:
                with open(path, errors="replace") as f:
                    return f.read(1 << 20)
            except OSError:
                return None
        return None

    def _rp_files(self) -> bool:
        """Whether its outputs go to RP's <uid>.out / <uid>.err (_layout.task_extra): a
        process of one rank (not a function, whose outputs are captured)."""
        d = self._pf.description
        return d.function is None and d.ranks == 1

    # RP: '' for a task that printed nothing or never ran (scripts call .strip() on them)
    stdout = property(lambda self: self._output("stdout") or "")
    stderr = property(lambda self: self._output("stderr") or "")
    metadata = property(lambda self: self.description.get("metadata"))
    endpoint_fs = property(lambda self: "file://localhost/")  # RP: the resource's root fs

    @property
    def resource_sandbox(self) -> str | None:
        """RP: the sandbox all sessions on the resource share, the session sandbox's
        parent -- here the directory of the pilot's sandbox."""
        ps = self.pilot_sandbox
        return ps and f"file://localhost{os.path.dirname(ps[16:].rstrip('/'))}/"

    def register_callback(self, cb: Callable, cb_data=None, metric=None) -> None:
        """RP's task.register_callback: cb(task, state) -- cb(task, state, cb_data) when
        cb_data is truthy -- on each state change of this task only."""
        self.tmgr.register_callback(cb, cb_data, metric, uid=self.uid)

    @property
    def exception(self):
        """A function task's exception (the exception itself); for executables RP's
        text, 'RuntimeError("task failed")'."""
        if self._pf.state != S.FAILED:
            return None
        return self._pf.exception or 'RuntimeError("task failed")'

    @property
    def exception_detail(self) -> str | None:
        """Why it failed (pilotfish's reason: exit code, signal, stderr tail, staging,
        launch). The stderr tail of a task whose stderr went to its <uid>.err is read from
        there (the agent quotes only what it captured)."""
        pf = self._pf
        if pf.state != S.FAILED:
            return None
        reason = pf.reason
        ran = pf.exit_code is not None or getattr(pf, "signal", None)
        if ran and self._rp_files() and pf.stderr is None and "; stderr: " not in (reason or ""):
            err = self._output("stderr")
            if err:
                reason = (reason or "") + stderr_reason(err, REASON_TAIL)
        return reason

    def wait(self, state=None, timeout: float | None = None) -> str:
        return self.tmgr.wait_tasks(self.uid, state=state, timeout=timeout)

    def cancel(self) -> None:
        self.tmgr.cancel_tasks(self.uid)

    def as_dict(self) -> dict:
        """RP's task dict: type, tmgr, uid, name, state, origin, exit_code, stdout, stderr,
        return_value, exception, exception_detail, pilot, endpoint_fs, resource_sandbox,
        session_sandbox, pilot_sandbox, task_sandbox, client_sandbox, info, slots,
        partition, description (a copy)."""
        pf = self._pf
        return {
            "type": "task",
            "tmgr": self.tmgr.uid,
            "uid": self.uid,
            "name": self.name,
            "state": self.state,
            "origin": self.origin,
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "return_value": self.return_value,
            "exception": self.exception,
            "exception_detail": self.exception_detail,
            "pilot": self.pilot,
            "endpoint_fs": self.endpoint_fs,
            "resource_sandbox": self.resource_sandbox,
            "session_sandbox": self.session_sandbox,
            "pilot_sandbox": self.pilot_sandbox,
            "task_sandbox": self.task_sandbox,
            "client_sandbox": self.client_sandbox,
            "info": self.description.get("metadata"),
            "slots": [dict(node=s.node, cores=list(s.cores), gpus=list(s.gpus)) for s in pf.slots]
            if getattr(pf, "slots", None)
            else None,
            "partition": getattr(pf, "partition", None),
            "description": dict(self.description),
            "sandbox": self.sandbox,
        }

    def __repr__(self) -> str:
        return f"<rp.Task {self.uid} {self.state}>"


class RaptorTask(Task):
    """A task run by a RAPTOR master's workers, its results as RP's raptor fills them:
    exit_code 0 / a process's own code / 1, exception as repr() text, exception_detail
    the traceback."""

    __slots__ = ()
    origin = property(lambda self: "raptor" if self.tmgr is None else "client")
    # its description's (RP's: none unless given; pilotfish's name is its master's uid)
    name = property(lambda self: self.description.get("name"))

    def _exc(self):
        return self._pf.exception if self._pf.state == S.FAILED else None

    @property
    def exit_code(self):
        st = self._pf.state
        if st == S.DONE:
            return 0 if self._pf.exit_code is None else self._pf.exit_code
        if st not in S.FINAL:
            return None
        from .raptor import TaskExit

        e = self._exc()
        if isinstance(e, TaskExit):
            return e.code
        return 1

    @property
    def exception(self):
        e = self._exc()
        if self._pf.state != S.FAILED:
            return None
        return repr(e) if e is not None else f"RuntimeError({self._pf.reason!r})"

    @property
    def exception_detail(self):
        if self._pf.state != S.FAILED:
            return None
        e = self._exc()
        cause = getattr(e, "__cause__", None)
        return str(cause) if cause is not None else self._pf.reason

    @property
    def return_value(self):
        return self._pf.result if self._pf.state == S.DONE else None


def write_launch_failure_err(task: Task) -> None:
    """A task that FAILED before its process ran (its executable not found, say) has no
    <uid>.err: it gets one holding the reason, as RP's holds its launch script's
    complaint (RP runs every task through a shell script that reports it)."""
    pf = task._pf
    if pf.state != S.FAILED or pf.exit_code is not None or not task._rp_files():
        return
    if task.description.get("stderr") or not pf.reason:
        return
    if not any(s == S.AGENT_SCHEDULING for s, _ in pf.history):
        return  # (it never reached its pilot: a staging or routing failure)
    sb = task.sandbox
    if not sb or not os.path.isdir(sb):
        return
    path = os.path.join(sb, f"{sandbox_name(task.uid, pf.uid)}.err")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "w") as f:
            f.write(pf.reason + "\n")
    except OSError:
        pass  # (it exists: the process made it; or the sandbox is not here)


def write_profile(task: Task, root: str) -> None:
    """With RADICAL_PROFILE set (RP's switch), RP's profile of a task where RP's local
    sandbox puts it, <root>/<pilot>/<task>/<task>.prof (root: ~/radical.pilot.sandbox/<sid>,
    Session.close): CSV lines `time,event,comp,thread,uid,state,msg` from the task's state
    history -- an `advance` per state, and task_exec_start / app_start at its start,
    app_stop / task_exec_stop when it left EXECUTING. pilotfish's own record of the same:
    `pilotfish report`, pf.analytics.load_session(session.path)."""
    pilot = task._pf.pilot
    if pilot is None or type(task._pf) is Early:  # (never reached a pilot)
        return
    lines, running = [], False
    for state, t in task._pf.history:
        rs = RS.TASK_STATE[state]
        if running:
            for ev in ("app_stop", "task_exec_stop"):
                lines.append(f"{t:.4f},{ev},,MainThread,{task.uid},{rs},")
            running = False
        lines.append(f"{t:.4f},advance,,MainThread,{task.uid},{rs},")
        if state == S.EXECUTING:
            for ev in ("task_exec_start", "app_start"):
                lines.append(f"{t:.4f},{ev},,MainThread,{task.uid},{rs},")
            running = True
    d = os.path.join(root, pilot, task.uid)
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{task.uid}.prof"), "w") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as e:
        log.warning("RADICAL_PROFILE: cannot write %s's profile: %s", task.uid, e)


# RP's layout: a task's sandbox is <pilot sandbox>/<uid>/ (or <pilot sandbox>/<its sandbox>),
# holding <uid>.out and <uid>.err. pilotfish keeps a pilot's tasks under its tasks/ (the rest
# of the sandbox is the pilot's own, protected files: _paths.py), so an RP task works in


def wait_early(
    cond: threading.Condition, sel: list, pf_states, timeout: float | None
) -> float | None:
    """Wait (up to timeout) on cond, their TaskManager's, for the early-bound tasks among sel
    to reach pf_states (or an end) or to be submitted to their pilot; the timeout left for
    the others. As in RP, a task naming a pilot that is never added waits until the timeout
    (for ever without one: said in the log)."""
    targets = set(pf_states or ()) | S.FINAL
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    with cond:
        while True:
            waiting = [t for t in sel if type(t._pf) is Early and t._pf.state not in targets]
            if not waiting:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            if left is None and not told:
                told = True
                log.warning(
                    "wait_tasks (no timeout) waits for %d tasks whose pilot is not "
                    "added to this TaskManager, e.g. %s: it %s",
                    len(waiting),
                    waiting[0].uid,
                    waiting[0]._pf.reason,
                )
            cond.wait(left)
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _raptor_handle_class():
    from .raptor import Master  # noqa: F401 -- (import order)

    class RaptorMaster(Task):
        """RP's Raptor (RaptorMaster) task: submit_workers, submit_tasks, rpc; its state is
        its master task's (AGENT_EXECUTING until rpc('stop'), then DONE)."""

        __slots__ = ("_raptor",)

        def __init__(self, tmgr: Any, pf_task, description: TaskDescription, uid: str, raptor):
            super().__init__(tmgr, pf_task, description, uid)
            self._raptor = raptor  # (_masters.RaptorState: its bookkeeping)
            raptor.handle = self

        def submit_workers(self, descriptions) -> list:
            """Workers for this master (mode rp.RAPTOR_WORKER): rp Tasks whose state is
            the master's. They set the worker class and the shapes of calls this master
            takes; the calls run on pilotfish's function workers."""
            return self._raptor.add_workers(descriptions)

        def submit_tasks(self, descriptions):
            descs, many = listify(descriptions)
            with gc_paused():  # (thousands of objects, none cyclic)
                out = self._raptor.port.submit_calls(self._raptor, descs)  # plain calls: fast
                if out is None:
                    for td in descs:
                        td["raptor_id"] = self.uid
                    out = self.tmgr.submit_tasks(descs)
            return out if many else out[0]

        def rpc(self, cmd: str, *args, **kwargs):
            """What RP's default master answers: 'stop' (the master ends DONE, its
            unfinished tasks are canceled); other commands are ignored (None), as there."""
            if self._pf.pilot is None:
                raise RuntimeError("not assigned to a pilot yet, cannot run rpc")
            return self._raptor.rpc(cmd, *args, **kwargs)

        @property
        def master(self):
            """The rp.raptor.Master (or subclass) instance whose hooks serve this raptor."""
            return self._raptor.master

        @property
        def workers(self) -> list:
            return list(self._raptor.workers)

        def __repr__(self) -> str:
            return f"<rp.RaptorMaster {self.uid} {self.state}>"

    return RaptorMaster


RaptorMaster = _raptor_handle_class()
Raptor = RaptorMaster
RaptorWorker = Task
