"""Following the tasks a dead agent's keeper holds (agent/keeper.py) until they end.

When an agent dies while tasks run, its keeper keeps those processes and writes a DONE final to
`<sandbox>/keeper.journal` for each that ends well. The client does not fail such a task with
its pilot (nor send it again on resume): it waits here for the keeper's word. A task the keeper
ends without a final (it failed, needed output staging, or the keeper was stopped) is failed
locally, not journaled -- so a resume runs it again -- exactly like a task its pilot took down.
Both go through the session's task registry (_ports.TaskEnds), to the tasks' managers.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from .. import _wire
from .. import states as S
from .._journal import finals, keeper_adopted, keeper_alive, keeper_state
from ._ports import TaskEnds, TaskEntry

log = logging.getLogger(__name__)


class Adopter:
    poll_s = 0.05

    def __init__(self, tasks: TaskEnds) -> None:
        """tasks: the session's task registry, which takes what the keepers say."""
        self._tasks = tasks
        self._lock = threading.Lock()
        self._watched: dict[str, dict[str, TaskEntry]] = {}  # sandbox -> {uid: task}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def take(self, sandbox: str, tasks: Sequence[TaskEntry]) -> set[Any]:
        """Of these tasks (of a pilot that failed), the ones its keeper holds: followed from
        now on. The others are the caller's to finish."""
        held = keeper_adopted(sandbox, live_only=False)  # done already: its journal says
        kept = [t for t in tasks if t.uid in held]
        if kept:
            self.watch(sandbox, kept)
        return set(kept)

    def watch(self, sandbox: str, tasks: Sequence[TaskEntry]) -> None:
        with self._lock:
            self._watched.setdefault(sandbox, {}).update((t.uid, t) for t in tasks)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="pilotfish-adopter", daemon=True
                )
                self._thread.start()

    def close(self, terminate: bool = True) -> None:
        """Stop following. terminate: also stop the keepers still running kept tasks (as a
        session's close cancels what its pilots run); those tasks run again on resume. A
        keeper in another host's (or pid namespace's) pids cannot be signalled from here: its
        job ends when its tasks do."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if not terminate:
            return
        import signal

        from .._util import pid_scope

        with self._lock:
            sandboxes = list(self._watched)
            self._watched.clear()
        for sandbox in sandboxes:
            state = keeper_state(sandbox)
            if state and state.get("scope") == pid_scope() and keeper_alive(sandbox, state):
                try:
                    os.kill(int(state["pid"]), signal.SIGTERM)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                items = [(sb, dict(ts)) for sb, ts in self._watched.items()]
            for sandbox, tasks in items:
                try:
                    self._check(sandbox, tasks)
                except Exception:  # never let one bad sandbox stop the others
                    log.exception("following the keeper of %s failed", sandbox)
            self._stop.wait(self.poll_s)

    def _check(self, sandbox: str, tasks: dict[str, TaskEntry]) -> None:
        alive = keeper_alive(sandbox)  # first: a final it writes before it ends is read below
        got = finals(os.path.join(sandbox, "keeper.journal"))
        ended = {uid: rec for uid, rec in got.items() if uid in tasks}
        left = [] if alive else [t for uid, t in tasks.items() if uid not in ended]
        if ended:  # journaled: these tasks are final for every later resume
            self._tasks.take(
                [
                    _wire.Update(uid, state, t, exit_code=code, signal=sig, reason=reason)
                    for uid, (_, _, state, code, sig, reason, t) in ended.items()
                ]
            )
        if left:
            self._tasks.finish_locally(
                left,
                S.FAILED,
                "its agent died and the agent's keeper "
                "ended without seeing it succeed; it runs again on resume",
            )
        if ended or left:
            with self._lock:
                watched = self._watched.get(sandbox, {})
                for uid in list(ended) + [t.uid for t in left]:
                    watched.pop(uid, None)
                if not watched:
                    self._watched.pop(sandbox, None)
