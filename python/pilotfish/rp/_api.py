"""RP's Session, PilotManager, TaskManager, Pilot and Task over pilotfish's.

Each RP object wraps its pilotfish twin: states are mapped (_states.py), descriptions are
translated at submit (_describe.py), callbacks get the wrapper objects and RP's states. What a
pilot needs before its first task -- its prepared environments, its services -- is set up by
one thread per pilot once it is active; a submit to a pilot waits for that.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import threading
import time
from typing import Any, Callable

from .. import client as _pf
from .. import states as S
from .._errors import PilotfishError
from .._util import gc_paused
from .._mpi import stderr_reason
from .._paths import TASKS_DIR
from . import _nodes
from . import _states as RS
from ._venv import existing_venv
from .._errors import DescriptionError
from ._describe import (
    RAPTOR_MASTER,
    RAPTOR_WORKER,
    TASK_EXECUTABLE,
    PilotDescription,
    TaskDescription,
    staging,
)

log = logging.getLogger("pilotfish.rp")

TASK_STATE = "TASK_STATE"  # callback metrics
PILOT_STATE = "PILOT_STATE"
SCHEDULER_ROUND_ROBIN = "round_robin"
SCHEDULER_BACKFILLING = "backfilling"
SCHEDULER_DEFAULT = SCHEDULER_ROUND_ROBIN  # RP's default (pilotfish's own: backfilling)
SERVICE_READY_TIMEOUT = 120.0  # s: a pilot's services must be up by then (RP's bound)
REASON_TAIL = 300  # characters of a <uid>.err quoted in exception_detail (as the agent's)


def _listify(x):
    return (x, True) if isinstance(x, (list, tuple)) else ([x], False)


def _bulk() -> bool:
    """RADICAL_PILOT_BULK_CB (RP's switch, read when a callback is registered): callbacks
    get a list of objects, cb([objs]) or cb([objs], cb_data), without the state."""
    return os.environ.get("RADICAL_PILOT_BULK_CB", "").lower() in ("true", "yes", "1")


def _callback(cb: Callable, cb_data: Any) -> Callable:
    if _bulk():  # (pilotfish reports each change as it comes: a list of one)
        if not cb_data:
            return lambda obj, state: cb([obj])
        return lambda obj, state: cb([obj], cb_data)
    if not cb_data:  # RP passes cb_data only when it is truthy
        return cb
    return lambda obj, state: cb(obj, state, cb_data)


class _Registered:
    """A callback registered through the RP API: cb, its metric and uid filter, and the
    relay given to pilotfish (off once unregistered: a change already being reported may
    still reach it, none after that)."""

    __slots__ = ("cb", "metric", "uid", "relay", "on")

    def __init__(self, cb, metric, uid):
        self.cb, self.metric, self.uid, self.relay, self.on = cb, metric, uid, None, True


def _unregister(registered: list, pf_unregister: Callable, cb, metrics, uid) -> None:
    """RP's unregister_callback(cb=None, metrics=None, uid=None): every callback matching
    all that are given (none given: all of them)."""
    metrics = None if metrics is None else set(_listify(metrics)[0])
    for r in list(registered):
        if (
            (cb is None or r.cb == cb)
            and (metrics is None or r.metric in metrics)
            and (uid is None or r.uid == uid)
        ):
            r.on = False
            registered.remove(r)
            try:
                pf_unregister(r.relay)
            except ValueError:
                pass  # (not registered there: nothing to take back)


class Session:
    """rp.Session(uid=None, cfg=None, ...): a pilotfish session in ./pilotfish-sessions/<uid>
    (or $PILOTFISH_SESSIONS). `close(download=True)` gathers every pilot's logs and events
    into the session directory."""

    def __init__(
        self,
        proxy_url: str | None = None,
        uid: str | None = None,
        cfg: dict | None = None,
        _primary: bool = True,
        **kwargs: Any,
    ):
        path = kwargs.pop("path", None)
        kwargs.pop("cfg_file", None)
        if kwargs:
            raise TypeError(f"rp.Session: unknown arguments {sorted(kwargs)}")
        self._pf = _pf.Session(path=path, uid=uid)
        self.uid = self._pf.uid
        self.path = self._pf.path
        self.cfg = dict(cfg or {})
        self._pmgrs: list[PilotManager] = []
        self._tmgrs: list[TaskManager] = []
        self._log = _ClientLog(self.path)
        self._linker = _Linker()  # RP's <pilot sandbox>/<uid> links

    def close(
        self, download: bool = False, cleanup: bool | None = None, terminate: bool = True
    ) -> None:
        # RP closes its TaskManagers first: no task callback fires for what the close itself
        # cancels (scripts that stop on a CANCELED task would stop on their own close)
        for tmgr in self._tmgrs:
            for reg in tmgr._registered:
                reg.on = False
            tmgr._close_early()
        try:
            self._pf.close(terminate=terminate)
            self._linker.close()
        finally:
            self._log.close()
        for tmgr in self._tmgrs:
            for task in list(tmgr._tasks.values()):
                task._launch_failure_err()
        if os.environ.get("RADICAL_PROFILE", "").lower() in ("true", "yes", "1"):
            _write_profiles(self)
        if download:
            for pmgr in self._pmgrs:
                for p in pmgr._pilots.values():
                    _download(p._pf.sandbox, os.path.join(self.path, p.uid))

    def get_pilot_managers(self):
        return list(self._pmgrs)

    def get_resource_config(self, resource: str, schema: str | None = None):
        """RP's: the resource's config (rp.utils.get_resource_config), with that access
        schema's endpoints at the top when a schema is given."""
        from ._resources import get_resource_config

        return get_resource_config(resource, schema)

    def list_resources(self) -> list[str]:
        """RP's: the resource labels known (pilotfish's table, the user's RP site files)."""
        from ._resources import list_resources

        return list_resources()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ClientLog:
    """RP's client-side log in the session's directory (<client sandbox>/<sid>/client.log:
    `grep ERROR *log` there finds what went wrong): pilotfish's own log records, from the
    level $RADICAL_LOG_LVL names (RP's switch; default WARNING), until the session closes.
    Where nothing else handles pilotfish's records (Python's last resort would print its
    warnings on stderr), they still reach stderr from WARNING on, as before."""

    def __init__(self, path: str):
        level = logging.getLevelName(os.environ.get("RADICAL_LOG_LVL", "WARNING").upper())
        if not isinstance(level, int):
            level = logging.WARNING
        self.logger = logging.getLogger("pilotfish")
        self.level = self.logger.level  # (given back at close)
        self.handlers: list[logging.Handler] = []
        name = os.path.join(path, "client.log")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))  # private
            file = logging.FileHandler(name)
        except OSError as e:
            log.warning("no client.log in %s: %s", path, e)
            return
        file.setLevel(level)
        file.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
        )
        if not self.logger.hasHandlers():
            console = logging.StreamHandler()  # (as logging.lastResort: stderr, WARNING)
            console.setLevel(logging.WARNING)
            self.handlers.append(console)
        self.handlers.append(file)
        if self.logger.getEffectiveLevel() > level:
            self.logger.setLevel(level)
        for h in self.handlers:
            self.logger.addHandler(h)

    def close(self) -> None:
        for h in self.handlers:
            self.logger.removeHandler(h)
            h.close()
        if self.handlers:
            self.logger.setLevel(self.level)
        self.handlers = []


def _write_profiles(session: Session) -> None:
    """With RADICAL_PROFILE set (RP's switch), RP's per-task profiles where RP's local
    sandbox puts them, ~/radical.pilot.sandbox/<sid>/<pilot>/<task>/<task>.prof: CSV lines
    `time,event,comp,thread,uid,state,msg` from each task's state history -- an `advance` per
    state, and task_exec_start / app_start at its start, app_stop / task_exec_stop when it
    left EXECUTING. pilotfish's own record of the same: `pilotfish report`,
    pf.analytics.load_session(session.path)."""
    root = os.path.join(os.path.expanduser("~"), "radical.pilot.sandbox", session.uid)
    for tmgr in session._tmgrs:
        for task in list(tmgr._tasks.values()):
            pilot = task._pf.pilot
            if pilot is None or type(task._pf) is _Early:  # (never reached a pilot)
                continue
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
# tasks/<name>/ and <pilot sandbox>/<name> is a link to it, made at submit. Names that are
# the pilot's own (their part before the first '.') get no link: RP reserves names too.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_PILOT_OWN = frozenset(
    ("agent", "env", "functions", "grow", "journal", "keeper", "nodes", "pilot", "psij")
    + ("services", "session", "spool", "sub", "tasks", "prrte", "dvm", "flux", "bootstrap_0")
)


def _plain(name: str) -> bool:
    """name is one path component that may stand beside the pilot's own files."""
    return (
        len(name) <= 200
        and _PLAIN.fullmatch(name) is not None
        and name.split(".", 1)[0].lower() not in _PILOT_OWN
    )


def _sandbox_name(rp_uid: str, pf_uid: str) -> str:
    """The directory an RP task gets when it names none: its uid (RP's), if plain."""
    return rp_uid if _plain(rp_uid) else pf_uid


def _link(pilot_sandbox: str, sandbox: str) -> None:
    """<pilot sandbox>/<first part of sandbox> -> tasks/<it>, RP's place of the task's
    sandbox (a relative sandbox only; nothing done if that name is taken or not plain)."""
    top = sandbox.split("/", 1)[0]
    if os.path.isabs(sandbox) or not _plain(top):
        return
    try:
        os.symlink(os.path.join(TASKS_DIR, top), os.path.join(pilot_sandbox, top))
    except FileExistsError:
        pass  # (tasks sharing a sandbox; or a name taken: _task_dir sees which)
    except OSError as e:  # (the pilot's sandbox is not on this machine's file system)
        log.debug("no link %s/%s to its task sandbox: %s", pilot_sandbox, top, e)


class _Linker:
    """Makes RP's links (_link) off the submit path, on a thread of its own: a symlink costs
    30-75 us here (while the pilot's agent makes its tasks' directories beside it), which
    tripled the cost of an RP submit (28 -> 246 us per task, 2000 tasks). A link comes
    moments after its submit; wait_tasks and the session's close wait for the links asked
    for so far (flush), so the layout is there once a script looks. A task itself works in
    tasks/<name>/ (its $PWD and RP_TASK_SANDBOX), which exists before it starts."""

    def __init__(self):
        self._todo: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._added = self._done = 0
        self._seen: set = set()  # (pilot sandbox, name) asked for already (shared sandboxes)
        self._thread: threading.Thread | None = None
        self._stop = False

    def add(self, pilot_sandbox: str, sandbox: str) -> None:
        key = (pilot_sandbox, sandbox.split("/", 1)[0])
        if key in self._seen or os.path.isabs(sandbox):
            return
        self._seen.add(key)
        self._added += 1  # (the submitting thread's count; the linker's is _done)
        self._todo.append(key)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rp-links", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        todo = self._todo
        while True:
            self._wake.wait()
            self._wake.clear()
            n = 0
            while todo:
                _link(*todo.popleft())
                n += 1
            with self._cond:
                self._done += n
                self._cond.notify_all()
                if self._stop and not todo:
                    return

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait until the links asked for so far are made (at most timeout s)."""
        target = self._added
        if self._thread is None or self._done >= target:
            return
        self._wake.set()
        with self._cond:
            self._cond.wait_for(lambda: self._done >= target, timeout)

    def close(self) -> None:
        self.flush()
        if self._thread is not None:
            with self._cond:
                self._stop = True
            self._wake.set()
            self._thread.join(5)


def _task_dir(pilot_sandbox: str, sandbox: str) -> str:
    """An RP task's sandbox: an absolute `sandbox` as it is; else <pilot sandbox>/<sandbox>
    where that is the link to tasks/<sandbox> (_link), else tasks/<sandbox> itself -- every
    RP task has one (native pilotfish tasks only when they declare files)."""
    if os.path.isabs(sandbox):
        return sandbox
    top = sandbox.split("/", 1)[0]
    link = os.path.join(pilot_sandbox, top)
    try:
        if os.readlink(link) == os.path.join(TASKS_DIR, top):
            return os.path.join(pilot_sandbox, sandbox)
    except OSError:
        pass
    return os.path.join(pilot_sandbox, TASKS_DIR, sandbox)


def _download(sandbox: str, into: str) -> None:
    """A pilot's own files (logs, events, its configuration), not its tasks' directories, into
    the session directory -- unless the sandbox is there already (local pilots)."""
    if not os.path.isdir(sandbox) or os.path.realpath(sandbox) == os.path.realpath(into):
        return
    os.makedirs(into, exist_ok=True)
    for name in os.listdir(sandbox):
        src = os.path.join(sandbox, name)
        if name != TASKS_DIR and os.path.isfile(src):
            shutil.copy2(src, os.path.join(into, name))


class Pilot:
    """An RP pilot: uid, state (RP's names), description, resource, pilot_sandbox."""

    def __init__(self, pmgr: "PilotManager", pf_pilot, description: PilotDescription):
        self._pf = pf_pilot
        self.pmgr = pmgr
        self.description = description
        self.uid = pf_pilot.uid
        self.resource = description.get("resource")
        self._tmgr: "TaskManager | None" = None  # the first TaskManager it was added to
        self._ready = threading.Event()  # environments prepared and services running
        self._problem: str | None = None
        self._services: list = []
        self._nodelist = None
        self._setup = bool(description.get("prepare_env") or description.get("services"))
        if not self._setup:
            self._ready.set()
        else:
            threading.Thread(target=self._set_up, name=f"rp-setup-{self.uid}", daemon=True).start()

    @property
    def state(self) -> str:
        return RS.PILOT_STATE[self._pf.state]

    @property
    def pilot_sandbox(self) -> str:
        return f"file://localhost{self._pf.sandbox}/"

    @property
    def client_sandbox(self) -> str:
        """RP's: the directory that holds the session's own (<client sandbox>/<sid>)."""
        return os.path.dirname(self.pmgr.session.path)

    @property
    def stdout(self) -> str | None:
        return self._pf.reason

    @property
    def resources(self) -> dict | None:
        """RP's: what the pilot holds, {'cpu': cores, 'gpu': gpus} (None before its nodes
        are known)."""
        nodes = self._known_nodes()
        if nodes is None:
            return None
        return {"cpu": sum(n.cores for n in nodes), "gpu": sum(n.gpus for n in nodes)}

    @property
    def resource_details(self) -> dict | None:
        """RP's agent-level resource information: node_list (name, index, cores, gpus as
        occupations, lfs, mem), cores_per_node, gpus_per_node, lfs_per_node, mem_per_node.
        None until the pilot is active (its nodes known)."""
        nodes = self._known_nodes()
        if nodes is None:
            return None
        nl = _nodes.nodelist_of(nodes)
        return {
            "node_list": [n.as_dict() for n in nl.nodes],
            "cores_per_node": nl.cores_per_node,
            "gpus_per_node": nl.gpus_per_node,
            "lfs_per_node": nl.lfs_per_node,
            "mem_per_node": nl.mem_per_node,
        }

    @property
    def nodelist(self):
        """RP's rp.NodeList of the pilot's nodes (for the application's own slot
        bookkeeping: pilotfish places tasks itself); None until the pilot is active."""
        if self._nodelist is None:
            nodes = self._known_nodes()
            if nodes is None:
                return None
            self._nodelist = _nodes.nodelist_of(nodes)
        return self._nodelist

    def _known_nodes(self):
        if self._pf.state != S.ACTIVE and self._pf.state not in S.FINAL:
            return None  # (not known yet: RP's None; a final pilot's nodes, if it ran)
        try:
            return self._pf.nodes
        except PilotfishError:
            return None

    @property
    def log(self) -> list:
        return list(self._pf.history)

    def as_dict(self) -> dict:
        return {
            "uid": self.uid,
            "state": self.state,
            "resource": self.resource,
            "pilot_sandbox": self.pilot_sandbox,
            "description": dict(self.description),
        }

    def wait(self, state=None, timeout: float | None = None) -> str:
        pf_states = None if state is None else RS.pilot_states_to_pf(state)
        self._pf.wait(pf_states, timeout=timeout)
        return self.state

    def cancel(self) -> None:
        self._pf.cancel()

    def submit_raptors(self, descriptions) -> list:
        """RP's pilot.submit_raptors: RAPTOR masters (mode rp.RAPTOR_MASTER) on this pilot,
        through the TaskManager it was added to; a list of rp.RaptorMaster tasks."""
        if self._tmgr is None:
            raise RuntimeError("pilot is not attached to a task manager, yet")
        return self._tmgr.submit_raptors(descriptions, self.uid)

    def stage_in(self, directives) -> list[str]:
        """RP's pilot.stage_in: client files into the pilot's shared space (pilot:///)."""
        return self._pf.stage_in(self._directives(directives, inbound=True))

    def stage_out(self, directives) -> list[str]:
        return self._pf.stage_out(self._directives(directives, inbound=False))

    def _directives(self, directives, inbound: bool) -> list[dict]:
        def fail(field, why):
            return ValueError(f"pilot.stage_{'in' if inbound else 'out'}: {why}")

        out = staging(directives, "staging", fail)
        for d in out:  # a plain target of stage_in, a plain source of stage_out: pilot://
            side = "target" if inbound else "source"
            path = d.get(side) or os.path.basename(d["source"].rstrip("/"))
            if "://" not in path:
                d[side] = "pilot:///" + path
        return out

    def prepare_env(self, env_name: str, env_spec: dict | None = None) -> dict:
        """RP's prepare_env: {'type': 'venv'|'shell', 'setup'|'packages': [...],
        'pre_exec': [...], 'version': ignored (the client's Python is used), 'path': an
        existing venv to use}. Blocks until the environment is ready."""
        spec = dict(env_spec or {})
        spec.pop("version", None)  # the venv is made from the client's interpreter
        if spec.get("type") == "virtualenv":
            spec["type"] = "venv"
        path = spec.pop("path", None)
        if path:
            spec = existing_venv(env_name, path, spec)
        if spec.get("type") in ("conda", "anaconda"):
            raise ValueError(
                f"prepare_env {env_name!r}: conda environments are not supported "
                "(no conda on this kind of machine): use type 'venv'"
            )
        if "setup" in spec:
            spec["packages"] = list(spec.pop("setup") or []) + list(spec.get("packages", []))
        if self._pf.state not in (S.ACTIVE,) + tuple(S.FINAL):
            self._pf.wait(S.ACTIVE)
        return self._pf.prepare_env(env_name, spec)

    def _set_up(self) -> None:
        try:
            if self._pf.wait(S.ACTIVE) != S.ACTIVE:
                self._problem = f"pilot {self.uid} is {self._pf.state}: {self._pf.reason}"
                return
            for name, spec in (self.description.get("prepare_env") or {}).items():
                self.prepare_env(name, spec)
            services = self.description.get("services") or []
            if services:
                self._start_services(services)
        except BaseException as e:  # noqa: BLE001 -- reported at the next submit to this pilot
            self._problem = f"setting up {self.uid} failed: {type(e).__name__}: {e}"
        finally:
            self._ready.set()

    def _start_services(self, services: list) -> None:
        """RP 1.60's agent services: tasks started before any other task of the pilot, each
        up once it runs (one that ran and already ended counts: it started) -- or, with
        metadata {'startup_file': path}, once that file exists (relative to the service's
        sandbox); all within SERVICE_READY_TIMEOUT. One that never ran fails the setup."""
        tm = TaskManager(self.pmgr.session)
        tm._during_setup = True  # (its submit must not wait for this very setup)
        tm.add_pilots(self)
        descs, files = [], []
        for i, sd in enumerate(services):
            sd = TaskDescription(sd)
            sd["uid"] = sd.get("uid") or f"service.{i:04d}"
            sd["sandbox"] = sd.get("sandbox") or sd["uid"]  # RP: <pilot sandbox>/<uid>/
            sd["pilot"] = self.uid
            descs.append(sd)
            meta = sd.get("metadata") if isinstance(sd.get("metadata"), dict) else {}
            f = meta.get("startup_file")
            files.append(
                None
                if not f
                else f
                if os.path.isabs(f)
                else os.path.join(self._pf.sandbox, TASKS_DIR, sd["sandbox"], f)
            )
        self._services = tm.submit_tasks(descs)
        deadline = time.monotonic() + SERVICE_READY_TIMEOUT
        tm.wait_tasks(state=RS.AGENT_EXECUTING, timeout=SERVICE_READY_TIMEOUT)
        while True:
            # started = it ran (RP's agent waits for AGENT_EXECUTING): one that already ended
            # did start -- whether its end is seen yet is a race, not an outcome
            bad = [
                (t.uid, t.state, t.exception_detail)
                for t in self._services
                if not any(s == S.EXECUTING for s, _ in t._pf.history)
            ]
            if bad:
                self._problem = f"services of {self.uid} did not start: {bad}"
                return
            if all(f is None or os.path.exists(f) for f in files):
                return
            if time.monotonic() > deadline:
                self._problem = (
                    f"services of {self.uid} not up within "
                    f"{SERVICE_READY_TIMEOUT:.0f} s (no startup_file: "
                    f"{[f for f in files if f and not os.path.exists(f)]})"
                )
                return
            time.sleep(0.05)

    @property
    def services(self) -> list:
        return list(self._services)

    def __repr__(self) -> str:
        return f"<rp.Pilot {self.uid} {self.state}>"


class PilotManager:
    def __init__(self, session: Session, uid: str | None = None, cfg: dict | None = None):
        self.session = session
        self._pf = _pf.PilotManager(session._pf)
        self._pilots: dict[str, Pilot] = {}
        self._registered: list[_Registered] = []
        self.uid = uid or "pmgr.0000"
        session._pmgrs.append(self)
        self._pf.register_callback(self._on_state)

    def _on_state(self, p, state: str) -> None:
        """RP's exit_on_error (default True): a pilot that FAILS interrupts the main thread
        (KeyboardInterrupt there), which RP scripts catch to close their session."""
        pilot = self._pilots.get(p.uid)
        if state == S.FAILED and pilot is not None and pilot.description.get("exit_on_error", True):
            log.error(
                "pilot %s failed (%s): interrupting the main thread (exit_on_error)",
                p.uid,
                p.reason,
            )
            import _thread

            _thread.interrupt_main()

    def submit_pilots(self, descriptions):
        descs, many = _listify(descriptions)
        rp_descs = [d if isinstance(d, PilotDescription) else PilotDescription(d) for d in descs]
        pf_descs = [d.to_pf(i) for i, d in enumerate(rp_descs)]  # all checked first
        pilots = [Pilot(self, p, d) for p, d in zip(self._pf.submit_pilots(pf_descs), rp_descs)]
        for p in pilots:  # RP stages these before the pilot's first task: here, at submit
            if p.description.get("input_staging"):
                p.stage_in(p.description["input_staging"])
        for p in pilots:
            self._pilots[p.uid] = p
        return pilots if many else pilots[0]

    def get_pilots(self, uids=None):
        if uids is None:
            return list(self._pilots.values())
        sel, many = _listify(uids)
        out = [self._pilots[u] for u in sel]
        return out if many else out[0]

    def list_pilots(self) -> list[str]:
        return list(self._pilots)

    def wait_pilots(self, uids=None, state=None, timeout: float | None = None):
        sel, many = _listify(uids if uids is not None else list(self._pilots))
        pf_states = None if state is None else RS.pilot_states_to_pf(state)
        self._pf.wait_pilots(sel, state=pf_states, timeout=timeout)
        out = [self._pilots[u].state for u in sel]
        return out if many or uids is None else out[0]

    def cancel_pilots(self, uids=None, _timeout=None) -> None:
        self._pf.cancel_pilots(uids)

    kill_pilots = cancel_pilots  # (RP 0.x-1.x's name)

    def register_callback(self, cb: Callable, cb_data=None, metric: str = PILOT_STATE) -> None:
        """cb(pilot, state) -- cb(pilot, state, cb_data) when cb_data is given -- on every
        pilot state change."""
        if metric != PILOT_STATE:
            raise ValueError(f"callback metric {metric!r}: only rp.PILOT_STATE exists here")
        f = _callback(cb, cb_data)
        reg = _Registered(cb, PILOT_STATE, None)

        def relay(p, state: str) -> None:
            if reg.on:
                f(self._pilots.get(p.uid) or p, RS.PILOT_STATE[state])

        reg.relay = relay
        self._registered.append(reg)
        self._pf.register_callback(relay)

    def unregister_callback(self, cb: Callable | None = None, metrics=None) -> None:
        """RP's: the callbacks registered with cb (None: all of them), of these metrics."""
        _unregister(self._registered, self._pf.unregister_callback, cb, metrics, None)

    def close(self, terminate: bool = True) -> None:
        pass  # the session closes the pilots


class _Early:
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

    def __init__(self, tmgr: "TaskManager", pf_task, description: TaskDescription, uid: str):
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
        return _task_dir(
            p.sandbox, self.description.get("sandbox") or _sandbox_name(self.uid, self._pf.uid)
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
            self._launch_failure_err()
        name = self.description.get(which)  # a file name in the sandbox (RP's form)
        if not name and self._rp_files():
            # RP's own <uid>.out / <uid>.err (_spec_extra)
            name = f"{_sandbox_name(self.uid, self._pf.uid)}.{which[3:]}"
        if name and self.sandbox:
            path = name if os.path.isabs(name) else os.path.join(self.sandbox, name)
            try:
                with open(path, errors="replace") as f:
                    return f.read(1 << 20)
            except OSError:
                return None
        return None

    def _rp_files(self) -> bool:
        """Whether its outputs go to RP's <uid>.out / <uid>.err (_spec_extra): a process of
        one rank (not a function, whose outputs are captured)."""
        d = self._pf.description
        return d.function is None and d.ranks == 1

    def _launch_failure_err(self) -> None:
        """A task that FAILED before its process ran (its executable not found, say) has no
        <uid>.err: it gets one holding the reason, as RP's holds its launch script's
        complaint (RP runs every task through a shell script that reports it)."""
        pf = self._pf
        if pf.state != S.FAILED or pf.exit_code is not None or not self._rp_files():
            return
        if self.description.get("stderr") or not pf.reason:
            return
        if not any(s == S.AGENT_SCHEDULING for s, _ in pf.history):
            return  # (it never reached its pilot: a staging or routing failure)
        sb = self.sandbox
        if not sb or not os.path.isdir(sb):
            return
        path = os.path.join(sb, f"{_sandbox_name(self.uid, pf.uid)}.err")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "w") as f:
                f.write(pf.reason + "\n")
        except OSError:
            pass  # (it exists: the process made it; or the sandbox is not here)

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


def _raptor_handle_class():
    from .raptor import Master  # noqa: F401 -- (import order)

    class RaptorMaster(Task):
        """RP's Raptor (RaptorMaster) task: submit_workers, submit_tasks, rpc; its state is
        its master task's (AGENT_EXECUTING until rpc('stop'), then DONE)."""

        __slots__ = ("_raptor",)

        def submit_workers(self, descriptions) -> list:
            """Workers for this master (mode rp.RAPTOR_WORKER): rp Tasks whose state is
            the master's. They set the worker class and the shapes of calls this master
            takes; the calls run on pilotfish's function workers."""
            return self._raptor.add_workers(descriptions)

        def submit_tasks(self, descriptions):
            descs, many = _listify(descriptions)
            with gc_paused():  # (thousands of objects, none cyclic)
                out = self.tmgr._submit_calls(self._raptor, descs)  # plain calls: fast
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


class RaptorPort:
    """What a RAPTOR master's bookkeeping (_masters.RaptorState) may do with the TaskManager
    it was submitted to: the one place _masters.py meets the manager's insides."""

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


class TaskManager:
    def __init__(
        self,
        session: Session,
        cfg: dict | None = None,
        scheduler: str | None = None,
        uid: str | None = None,
    ):
        self.session = session
        self._pf = _pf.TaskManager(session._pf, scheduler=scheduler or SCHEDULER_DEFAULT)
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
        self._registered: list[_Registered] = []
        session._tmgrs.append(self)
        # a uid given by the user that looks like pilotfish's own (task.000042): plain RAPTOR
        # calls then take the general path (their uids are pilotfish's there: no clash)
        self._pf_like_uids = False
        # RP's early-bound tasks: pilot uid -> the rp Tasks that name it before it is added
        # (their _pf an _Early), and the condition their waiters wait on
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
                task = RaptorMaster(self, t, d, self._user_uid(key, t.uid))
                task._raptor = self._raptors[task.uid]
                task._raptor.handle = task
            elif d.get("raptor_id"):
                task = RaptorTask(self, t, d, d.get("uid") or t.uid)
                d["uid"] = task.uid  # (RP sets it; a callback may look before submit returns)
            else:
                task = Task(self, t, d, d.get("uid") or t.uid)
            self._tasks[task.uid] = task
            if task.uid != t.uid:
                self._by_pf[t.uid] = task
        return task

    # RP's per-task variables, and a sandbox of its own for every task (as in RP)
    def _spec_extra(self, uid: str, d, pilot) -> dict:
        rp_uid = self._user_uid(id(d), uid)
        name = d.sandbox or _sandbox_name(rp_uid, uid)
        self.session._linker.add(pilot.sandbox, name)  # (RP's path to it: a link, made soon)
        full = os.path.join(pilot.sandbox, TASKS_DIR, name)  # (an absolute one wins)
        out: dict = {
            "environment": {
                "RP_TASK_ID": rp_uid,
                "RP_TASK_NAME": d.name or rp_uid,
                "RP_PILOT_ID": pilot.uid,
                "RP_SESSION_ID": self.session.uid,
                "RP_TASK_SANDBOX": full,
                "RP_PILOT_SANDBOX": pilot.sandbox,
                "RP_RANKS": str(d.ranks),
                "RP_CORES_PER_RANK": str(d.cores_per_rank),
                "RP_GPUS_PER_RANK": str(d.gpus_per_rank),
                "RP_RESOURCE": getattr(self._pilots.get(pilot.uid), "resource", None) or "local",
            }
        }
        if d.ranks == 1:  # (several ranks: each exports its own, see _describe)
            out["environment"]["RP_RANK"] = "0"
        if d.sandbox is None:
            out["sandbox"] = name
        if d.ranks == 1:  # RP's <uid>.out and <uid>.err in the sandbox, unless it names its own
            # (several ranks started by pilotfish itself would each truncate one file: theirs
            # are captured, merged)
            own = _sandbox_name(rp_uid, uid)
            if d.stdout is True:
                out["stdout"] = f"{own}.out"
            if d.stderr is True:
                out["stderr"] = f"{own}.err"
        return out

    def add_pilots(self, pilots) -> None:
        sel, _ = _listify(pilots)
        for p in sel:
            if p.uid in self._pilots:
                raise ValueError(f"pilot {p.uid} was added already")
            self._pilots[p.uid] = p
            if p._tmgr is None and not self._during_setup:
                p._tmgr = self
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
                if type(t._pf) is _Early:
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
        uids = iter(
            self.session._pf.plane.next_task_uids(sum(1 for d in rp_descs if not d.get("uid")))
        )
        now = time.time()
        out = []
        with self._lock:
            for d, pd in zip(rp_descs, pf_descs):
                uid = d.get("uid") or next(uids)
                d["uid"] = uid  # (RP_TASK_ID, once it runs)
                task = Task(self, _Early(uid, pd, pd.pilot, now), d, uid)
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
            if type(task._pf) is not _Early or task._pf.state in S.FINAL:
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
        descs, many = _listify(descriptions)
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
            if not p._ready.is_set() and p._pf.state not in S.FINAL:
                p._ready.wait()
            if p._problem:
                raise PilotfishError(p._problem)

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
        rp_sub, pf_sub, where = [], [], []
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
                i = pos.get(uid)
                d["uid"] = uid
                d["raptor_id"] = rid
                pd = r.to_pf(d, i if i is not None else 0, uid)
                rp_sub.append(d)
                pf_sub.append(pd)
                where.append(i)  # (None: a task request_cb made up: the master's own)
            for uid in left:
                d = rp_descs[pos[uid]]
                d["uid"] = uid
                rp_sub.append(d)
                pf_sub.append(r.refused(uid))
                where.append(pos[uid])
                dropped.append(uid)
        own = [(k, d, pd) for k, (d, pd, i) in enumerate(zip(rp_sub, pf_sub, where)) if i is None]
        if own:  # returned by request_cb without having been submitted: the master's
            by = {}
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
        new: dict[str, list] = {}  # raptor id -> its new tasks
        for i, t in zip(where, tasks):
            if type(t) is RaptorTask:
                new.setdefault(t.description.get("raptor_id"), []).append(t._pf)
            out[i] = t
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

        descs, _ = _listify(descriptions)
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
        descs, _ = _listify(descriptions)
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
        sel, many = _listify(uids)
        tasks = self._tasks
        try:
            return [tasks[u] for u in sel], many
        except KeyError as e:
            raise ValueError(f"no task {e.args[0]!r} in this TaskManager") from None

    def wait_tasks(self, uids=None, state=None, timeout: float | None = None):
        sel, many = self._selected(uids)
        pf_states = None if state is None else RS.task_states_to_pf(state)
        if self._were_early:
            timeout = self._wait_early(sel, pf_states, timeout)
        self._pf.wait_tasks(
            [t._pf.uid for t in sel if type(t._pf) is not _Early], state=pf_states, timeout=timeout
        )
        self.session._linker.flush()  # (RP's layout is there once a wait returns)
        names = RS.TASK_STATE  # (Task.state, inlined: a wait may name a million tasks)
        out = [names[t._pf.state] for t in sel]
        return out if many else out[0]

    def _wait_early(self, sel: list, pf_states, timeout: float | None) -> float | None:
        """Wait (up to timeout) for the early-bound tasks among sel to reach pf_states (or
        an end) or to be submitted to their pilot; the timeout left for the others. As in
        RP, a task naming a pilot that is never added waits until the timeout (for ever
        without one: said in the log)."""
        targets = set(pf_states or ()) | S.FINAL
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        with self._early_cond:
            while True:
                waiting = [t for t in sel if type(t._pf) is _Early and t._pf.state not in targets]
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
                self._early_cond.wait(left)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def cancel_tasks(self, uids=None) -> None:
        sel, _ = self._selected(uids)
        early = [t for t in sel if type(t._pf) is _Early]
        for t in early:
            self._end_early(t, S.CANCELED, f"canceled by the user: it {t._pf.reason}")
        self._pf.cancel_tasks([t._pf.uid for t in sel if type(t._pf) is not _Early])

    def get_tasks(self, uids=None):
        if uids is None:
            return list(self._tasks.values())
        sel, many = _listify(uids)
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
        metrics = [TASK_STATE] if metric is None else _listify(metric)[0]
        if set(metrics) - {TASK_STATE, "WAIT_QUEUE_SIZE"}:
            raise ValueError(
                f"callback metric {metric!r}: rp.TASK_STATE (or "
                f"rp.WAIT_QUEUE_SIZE, never fired, as in RP) only"
            )
        if TASK_STATE not in metrics:
            return
        f = _callback(cb, cb_data)
        reg = _Registered(cb, TASK_STATE, uid)

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
                and type(t) is not _Early
            ):
                return  # (reported when it was held for its pilot)
            rp_state = RS.TASK_STATE[state]
            if uid is None or task.uid == uid:
                f(task, rp_state)
            if type(task) is RaptorMaster:  # its workers' state is its own
                for w in task._raptor.workers:
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
        _unregister(self._registered, self._pf.unregister_callback, cb, metrics, uid)

    def remove_pilots(self, pilot_ids, drain: bool = False) -> None:
        """RP's remove_pilots: these pilots (uids) get none of this manager's new tasks;
        its tasks already on them run on there. A task naming a removed pilot waits for it
        to be added again, as one naming a pilot never added does. The pilots go on
        (pmgr.cancel_pilots ends them). drain=True returns once this manager's tasks on
        them have ended. ValueError names an unknown uid (nothing is removed then)."""
        sel, _ = _listify(pilot_ids)
        sel = [p.uid if isinstance(p, Pilot) else p for p in sel]
        self._pf.remove_pilots(sel, drain=drain)
        for uid in sel:
            self._pilots.pop(uid, None)

    # RP 0.x's names (tasks were "units"), kept by RP 1.x as aliases
    submit_units = submit_tasks
    wait_units = wait_tasks
    get_units = get_tasks
    cancel_units = cancel_tasks
    list_units = list_tasks

    def close(self) -> None:
        pass  # the session closes the manager
