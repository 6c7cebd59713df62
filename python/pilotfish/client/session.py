"""Session: one run of a user's program -- its directory, its events, its managers."""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from .. import __version__
from .._errors import PilotfishError, SessionClosed
from .._events import EventWriter, TaskRecord, write_task_records
from .._journal import Journal, read_journal
from .._util import hostname, write_private
from ._bridge import Bridge

if TYPE_CHECKING:
    from .pilot import PilotManager
    from .task import Task, TaskManager

log = logging.getLogger("pilotfish.client")

DEFAULT_SESSIONS_DIR = "pilotfish-sessions"


class Session:
    """Owns the session directory (`path`), the event log and the ZeroMQ endpoint.

    Use as a context manager: leaving it shuts pilots down and writes the task records.

    path      the session directory (default: $PILOTFISH_SESSIONS or ./pilotfish-sessions,
              plus the session uid)
    profile   record every state change as an event (cheap; on by default)
    bind      "ipc" (a unix socket: agents on this host, or sharing its filesystem and
              network namespace-independent) or "tcp" (agents on other hosts)
    interface with bind="tcp": the IP address or interface name agents reach (default:
              $PILOTFISH_INTERFACE, else the address of this host's name; never all of them)
    secure    encrypt and authenticate every agent connection (ZeroMQ CURVE; default True)
    resume    continue the session in `path`: re-attach to its pilots that are still alive
              (or start new ones), and re-run only the tasks that did not finish -- submit
              the same pilots and tasks again, in the same order, and pilotfish matches them
              against the journal
    heartbeat_s, agent_timeout, client_timeout
              agents and client tell each other they are alive every heartbeat_s; a pilot
              whose agent is silent for agent_timeout FAILS; an agent whose client is silent
              for client_timeout drains and ends its batch job (defaults 5, 60, 60 s)
    journal   keep the journal (descriptions and final states, fsynced about once a second)
    """

    def __init__(self, path: str | os.PathLike | None = None, uid: str | None = None,
                 profile: bool = True, bind: str = "ipc", *, interface: str | None = None,
                 secure: bool = True, resume: bool = False, heartbeat_s: float = 5.0,
                 agent_timeout: float = 60.0, client_timeout: float = 60.0,
                 journal: bool = True):
        if path is None:
            if resume:
                raise PilotfishError("resume=True needs the path of the session to resume")
            base = os.environ.get("PILOTFISH_SESSIONS", DEFAULT_SESSIONS_DIR)
            path = os.path.join(base, uid or _new_uid())
        self.path = os.path.abspath(os.fspath(path))
        meta_path = os.path.join(self.path, "session.json")
        previous = None
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                previous = json.load(f)
            if not resume:
                raise PilotfishError(
                    f"{self.path} already holds session {previous.get('uid')}: pass "
                    f"resume=True to continue it (nothing finished is run again), or use "
                    f"another path")
        elif resume:
            raise PilotfishError(f"nothing to resume: {meta_path} does not exist")
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        os.chmod(self.path, 0o700)  # events, journal, keys and outputs are the user's alone
        self.uid = previous["uid"] if previous else (uid or _new_uid())
        self.created = previous["created"] if previous else time.time()
        self.profile = profile
        self.heartbeat_s = float(heartbeat_s)
        self.agent_timeout = float(agent_timeout)
        self.client_timeout = float(client_timeout)
        self._resume = Resumed.load(self.path) if previous else None
        keys = _session_keys(self.path) if secure else None
        self.events = EventWriter(os.path.join(self.path, "client.events"), enabled=profile)
        self.events.record("session", "session_resume" if previous else "session_start")
        self._bridge = Bridge(self.path, self.uid, bind=bind, keys=keys, interface=interface,
                              address=previous.get("address") if previous else None,
                              on_refused=lambda what: self.events.record("session", "refused", what),
                              heartbeat_s=self.heartbeat_s,
                              pilot_keys=self._resume.pilot_keys() if self._resume else None)
        write_private(meta_path, json.dumps({
            "uid": self.uid, "created": self.created, "version": __version__, "host": hostname(),
            "pid": os.getpid(), "address": self._bridge.address, "secure": keys is not None},
            indent=1).encode())
        self.journal = Journal(os.path.join(self.path, "journal"), enabled=journal)
        r = self._resume
        self._task_ids = itertools.count(r.next_task if r else 0)
        self._pilot_ids = itertools.count(r.next_pilot if r else 0)
        self.tasks: dict[str, Task] = {}  # every task of the session, by uid
        self._pmgrs: list[PilotManager] = []
        self._tmgrs: list[TaskManager] = []
        self._closed = False
        self._lock = threading.Lock()
        # held while a submit marks the callables its frames carry as sent and queues them
        self._fn_lock = threading.Lock()
        from .adoption import Adopter

        self._adopter = Adopter()  # tasks that outlive their agent (see agent/keeper.py)

    @property
    def address(self) -> str:
        """Where agents connect."""
        return self._bridge.address

    def _next_task_uids(self, n: int) -> list[str]:
        ids = self._task_ids
        return [f"task.{next(ids):06d}" for _ in range(n)]

    def _next_pilot_uid(self) -> str:
        return f"pilot.{next(self._pilot_ids):04d}"

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed(f"session {self.uid} is closed")

    def close(self, terminate: bool = True) -> None:
        """Shut the pilots down (canceling what still runs), write task records, stop IO."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for tmgr in self._tmgrs:
            tmgr._close()
        for pmgr in self._pmgrs:
            pmgr._close(terminate=terminate)
        self._adopter.close(terminate)
        self.events.record("session", "session_stop")
        self._write_task_records()
        self._bridge.close()
        self.journal.close()
        self.events.close()

    def _write_task_records(self) -> None:
        records = []
        for t in self.tasks.values():
            d = t.description
            records.append(TaskRecord(
                t.uid, d.name, t.pilot, d.ranks, d.cores_per_rank, d.gpus_per_rank, t.state,
                t.exit_code, [s.node_index for s in t.slots] if t.slots else []))
        try:
            write_task_records(os.path.join(self.path, "tasks.msgpack"), records)
        except Exception as e:  # never lose the rest of close() to one record
            log.warning("cannot write task records: %s", e)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.uid!r}, path={self.path!r})"


def _new_uid() -> str:
    return time.strftime("pf.%Y%m%d.%H%M%S.") + f"{os.getpid():05d}"


def _session_keys(path: str) -> tuple[bytes, bytes]:
    """The session's CURVE key pair, made once and kept 0600 in the session directory (a
    resumed session must present the same public key to the agents it re-attaches to)."""
    import zmq

    key_path = os.path.join(path, "session.key")
    try:
        with open(key_path) as f:
            k = json.load(f)
        return k["public"].encode(), k["secret"].encode()
    except FileNotFoundError:
        pass
    public, secret = zmq.curve_keypair()
    write_private(key_path, json.dumps({"public": public.decode(), "secret": secret.decode()}).encode())
    return public, secret


class Resumed:
    """What the journal of a session being resumed says."""

    def __init__(self) -> None:
        self.pilots: list[tuple[str, dict, str]] = []  # (uid, description, sandbox), in order
        self.tasks: list[tuple[str, str, dict]] = []  # (uid, pilot uid, values), submit order
        self.pilot_of: dict[str, str] = {}  # task uid -> the pilot it was last sent to
        self.finals: dict[str, list] = {}  # task uid -> ["final", uid, state, code, sig, reason, t]
        self.answers: dict[str, object] = {}  # task uid -> latest agent update (re-attach)
        self.adopted: dict[str, str] = {}  # task uid -> sandbox whose agent's keeper runs it
        self.next_task = 0
        self.next_pilot = 0
        self.pilots_used = 0  # how many journaled pilots submit_pilots has matched
        self.tasks_used = 0  # how many journaled tasks submit_tasks has matched

    def pilot_keys(self) -> dict[str, bytes]:
        """{uid: agent public key} of the journaled pilots (from their agent.json)."""
        out = {}
        for uid, _, sandbox in self.pilots:
            try:
                with open(os.path.join(sandbox, "agent.json")) as f:
                    curve = json.load(f).get("curve")
            except (OSError, ValueError):
                continue
            if curve:
                out[uid] = curve["public"].encode()
        return out

    @classmethod
    def load(cls, path: str) -> "Resumed":
        r = cls()
        seen = set()
        sandboxes: list[str] = []
        for rec in read_journal(os.path.join(path, "journal")):
            kind = rec[0]
            if kind == "task":
                uid = rec[1]
                if uid not in seen:
                    seen.add(uid)
                    r.tasks.append((uid, rec[2], rec[3]))
                r.pilot_of[uid] = rec[2]
                r.next_task = max(r.next_task, int(uid.rsplit(".", 1)[1]) + 1)
            elif kind == "final":
                r.finals[rec[1]] = rec
            elif kind == "pilot":  # [pilot, uid, description, sandbox, replaced uid | None]
                sandboxes.append(rec[3])
                replaced = rec[4] if len(rec) > 4 else None
                slot = next((i for i, p in enumerate(r.pilots) if p[0] == replaced), None)
                if replaced is not None and slot is not None:
                    r.pilots[slot] = (rec[1], rec[2], rec[3])  # the pilot a resume started instead
                else:
                    r.pilots.append((rec[1], rec[2], rec[3]))
                r.next_pilot = max(r.next_pilot, int(rec[1].rsplit(".", 1)[1]) + 1)
        # every agent the session ever had journaled what it finished -- also those that a
        # resume replaced, which may have run on until they were stopped
        from .._journal import agent_finals, keeper_adopted

        for sandbox in sandboxes:
            for uid, rec in agent_finals(sandbox).items():
                r.finals.setdefault(uid, rec)
            for uid in keeper_adopted(sandbox):  # its agent died; its keeper still runs these
                if uid not in r.finals:
                    r.adopted[uid] = sandbox
        return r
