"""RP's Pilot over pilotfish's: its state in RP's names, its sandbox and nodes as RP shows
them, stage_in/out, prepare_env -- and its setup: what it needs before its first task (its
prepared environments, its services), made by one thread of its own once it is active.

A TaskManager (_api.py) that is given the pilot meets it through `attach` (the first manager
it was added to: pilot.submit_raptors goes there) and `wait_set_up` (a submit to it waits
for its setup, or raises what went wrong). Its services are tasks of a TaskManager of their
own, made by the `task_manager` it is given (_api.setup_task_manager: this module comes
before _api.py, which names Pilot).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from .. import states as S
from .._errors import PilotfishError
from .._paths import TASKS_DIR
from . import _nodes
from . import _states as RS
from ._describe import PilotDescription, TaskDescription
from ._staging import staging
from ._venv import existing_venv

SERVICE_READY_TIMEOUT = 120.0  # s: a pilot's services must be up by then (RP's bound)


class Pilot:
    """An RP pilot: uid, state (RP's names), description, resource, pilot_sandbox."""

    def __init__(
        self,
        pmgr: Any,
        pf_pilot,
        description: PilotDescription,
        task_manager: Callable[[Any], Any],
    ):
        self._pf = pf_pilot
        self.pmgr = pmgr
        self.description = description
        self.uid = pf_pilot.uid
        self.resource = description.get("resource")
        self._tmgr: Any = None  # the first rp.TaskManager it was added to (attach)
        self._task_manager = task_manager  # (session -> a TaskManager for its services)
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
        tm = self._task_manager(self.pmgr.session)  # (its submit waits for no setup)
        tm.add_pilots(self)
        descs, files = [], []
        for i, sd in enumerate(services):
            sd = TaskDescription(sd)
            sd["uid"] = sd.get("uid") or f"service.{i:04d}"
            sd["sandbox"] = sd.get("sandbox") or sd["uid"]  # RP: <pilot sandbox>/<uid>/
            sd["pilot"] = self.uid
            descs.append(sd)
            meta = sd.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
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


def attach(pilot: Pilot, tmgr: Any) -> None:
    """The pilot was added to rp.TaskManager tmgr: the first one it was added to is its own
    (pilot.submit_raptors submits there)."""
    if pilot._tmgr is None:
        pilot._tmgr = tmgr


def wait_set_up(pilot: Pilot) -> None:
    """Wait for the pilot's setup (services, prepared environments) -- unless it ended --
    or raise what went wrong there (PilotfishError)."""
    if not pilot._ready.is_set() and pilot._pf.state not in S.FINAL:
        pilot._ready.wait()
    if pilot._problem:
        raise PilotfishError(pilot._problem)
