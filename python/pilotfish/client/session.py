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
from .._errors import SessionClosed
from .._events import EventWriter, TaskRecord, write_task_records
from .._util import hostname
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
    """

    def __init__(self, path: str | os.PathLike | None = None, uid: str | None = None,
                 profile: bool = True, bind: str = "ipc"):
        self.uid = uid or time.strftime("pf.%Y%m%d.%H%M%S.") + f"{os.getpid():05d}"
        if path is None:
            base = os.environ.get("PILOTFISH_SESSIONS", DEFAULT_SESSIONS_DIR)
            path = os.path.join(base, self.uid)
        self.path = os.path.abspath(os.fspath(path))
        os.makedirs(self.path, exist_ok=True)
        self.created = time.time()
        with open(os.path.join(self.path, "session.json"), "w") as f:
            json.dump({"uid": self.uid, "created": self.created, "version": __version__,
                       "host": hostname(), "pid": os.getpid()}, f, indent=1)
        self.profile = profile
        self.events = EventWriter(os.path.join(self.path, "client.events"), enabled=profile)
        self.events.record("session", "session_start")
        self._bridge = Bridge(self.path, self.uid, bind=bind)
        self._task_ids = itertools.count()
        self._pilot_ids = itertools.count()
        self.tasks: dict[str, Task] = {}  # every task of the session, by uid
        self._pmgrs: list[PilotManager] = []
        self._tmgrs: list[TaskManager] = []
        self._closed = False
        self._lock = threading.Lock()

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
        self.events.record("session", "session_stop")
        self._write_task_records()
        self._bridge.close()
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
        except OSError as e:
            log.warning("cannot write task records: %s", e)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.uid!r}, path={self.path!r})"
