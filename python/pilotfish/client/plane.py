"""The client plane: a session's machinery, one object with a declared interface.

A Session (session.py) is the user's; what its managers (TaskManager, PilotManager), its
service groups and the layers above (pilotfish.rp, pilotfish.parsl) need of it to run tasks
is here, held as `session.plane`: the one way in from the agents and out to them (bridge ->
router -> task registry), the adopter of tasks whose agent died, the uid counters, the
journal and the lock that orders submits. Its names are public to the package's rooms and
no user's: a user calls the Session, TaskManager and PilotManager.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Callable

from .._errors import SessionClosed, SessionError
from .._journal import Journal
from ._bridge import Bridge
from ._registry import TaskRegistry
from ._router import Router
from .adoption import Adopter

log = logging.getLogger("pilotfish.client")


class Plane:
    """A session's machinery (session.Session builds it, and closes it with itself)."""

    def __init__(
        self,
        uid: str,
        bridge: Bridge,
        router: Router,
        registry: TaskRegistry,
        journal: Journal,
        journal_error: Callable[[OSError, str, str], SessionError],
        next_task: int = 0,
        next_pilot: int = 0,
    ) -> None:
        self.uid = uid
        """The session's uid (for messages)."""
        self.bridge = bridge
        """The socket to the agents and its IO thread (_bridge.Bridge): send, allow, forget."""
        self.router = router
        """Hands every message from an agent to its listener (_router.Router)."""
        self.registry = registry
        """The session's task registry (_registry.TaskRegistry): agents' updates to tasks."""
        self.journal = journal
        """The session's journal (descriptions and final states; also session.journal)."""
        self.adopter = Adopter(registry)
        """Follows the tasks a dead agent's keeper still runs (adoption.Adopter)."""
        self.fn_lock = threading.Lock()
        """Held while a submit marks the callables its frames carry as sent and queues them."""
        self.closed = False
        """The session is closed: check_open() refuses."""
        self.task_closers: list[Callable[[], None]] = []
        """Each TaskManager's close (called first when the session closes)."""
        self.pilot_closers: list[Callable[..., None]] = []
        """Each PilotManager's close(terminate=...) (called after the task managers')."""
        self._journal_error = journal_error
        self._journal_failed = False  # a final could not be journaled (reported once)
        self._task_ids = itertools.count(next_task)
        self._pilot_ids = itertools.count(next_pilot)

    def next_task_uids(self, n: int) -> list[str]:
        """The next n task uids of the session (task.000042)."""
        ids = self._task_ids
        return [f"task.{next(ids):06d}" for _ in range(n)]

    def next_pilot_uid(self) -> str:
        """The next pilot uid of the session (pilot.0003)."""
        return f"pilot.{next(self._pilot_ids):04d}"

    def check_open(self) -> None:
        """Raise SessionClosed once the session is closed."""
        if self.closed:
            raise SessionClosed(f"session {self.uid} is closed")

    def journal_error(self, e: OSError, what: str) -> SessionError:
        """The SessionError for a journal write that failed (nothing of it is in the journal)."""
        return self._journal_error(e, what, self.journal.path)

    def journal_lost(self, e: OSError, n: int) -> None:
        """Finals that could not be journaled: logged (the first time), not raised -- the
        tasks did end; a resume would run them again."""
        if not self._journal_failed:
            self._journal_failed = True
            log.error(
                "session %s: cannot journal %d final states to %s: %s; a resume would "
                "run those tasks again (later failures are not logged)",
                self.uid,
                n,
                self.journal.path,
                e.strerror or e,
            )
