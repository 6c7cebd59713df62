"""The session's task registry: every task of the session by uid, and where news of them goes.

The router hands it each batch of an agent's Updates; the adopter a dead agent's keeper's
finals, and the tasks it must end itself. Each batch goes to the tasks' managers
(_ports.TaskOwner: TaskManager._apply, _finish_locally) in order, one call per manager. News
of a task not submitted (yet) in a resumed session is kept as that task's latest answer, for
the submit that matches it with the journal.
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import _wire
from .. import states as S
from ._ports import TaskEntry, TaskOwner


class TaskRegistry:
    """Owned by the Session (its `tasks` dict is this registry's)."""

    __slots__ = ("tasks", "_resumed")

    def __init__(self, tasks: dict[str, Any], resumed: Any = None):
        """tasks: the session's {uid: Task} (TaskManager.submit_tasks adds to it); resumed:
        the session's Resumed (what its journal says), or None."""
        self.tasks = tasks
        self._resumed = resumed

    def take(self, items: list[_wire.Update]) -> None:  # IO thread
        """A batch of agent updates, to the tasks' managers."""
        registry = self.tasks
        per_tmgr: dict[TaskOwner, list] = {}
        resumed = self._resumed
        for u in items:
            t = registry.get(u.uid)
            if t is None:
                if resumed is not None:  # a re-attached agent's news of a task not resubmitted yet
                    old = resumed.answers.get(u.uid)
                    if old is None or S.TASK_RANK.get(u.state, -1) >= S.TASK_RANK.get(
                        old.state, -1
                    ):
                        resumed.answers[u.uid] = u
                continue
            per_tmgr.setdefault(t._tmgr, []).append((t, u))
        for tmgr, pairs in per_tmgr.items():
            tmgr._apply(pairs)

    def finish_locally(self, tasks: Iterable[TaskEntry], state: str, reason: str) -> None:
        """End tasks no agent will report on, per manager (not journaled: a resume runs them
        again)."""
        per_tmgr: dict[TaskOwner, list] = {}
        for t in tasks:
            per_tmgr.setdefault(t._tmgr, []).append(t)
        for tmgr, lost in per_tmgr.items():
            tmgr._finish_locally(lost, state, reason)
