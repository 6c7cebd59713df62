"""The session's task registry: every task of the session by uid, with its manager, and where
news of them goes.

A TaskManager registers each task it submits with its books as the task's owner (`entries`: uid
-> (task, owner), one dict entry per task, made once at submit); `session.tasks` is a read-only
view of it. The router hands it each batch of an agent's Updates; the adopter a dead agent's
keeper's finals, and the tasks it must end itself. Each batch goes to the tasks' owners
(_ports.TaskOwner: TaskBooks.apply_updates, finish_locally) in order, one call per owner.
News of a task not submitted (yet) in a resumed session is kept as that task's latest answer,
for the submit that matches it with the journal.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Iterable

from .. import _wire
from .. import states as S
from ._ports import TaskEntry, TaskOwner


class TaskRegistry:
    """Owned by the Session (session.tasks is a view of its entries)."""

    __slots__ = ("entries", "view", "_resumed")

    def __init__(self, resumed: Any = None):
        """resumed: the session's Resumed (what its journal says), or None."""
        self.entries: dict[str, tuple[Any, TaskOwner]] = {}
        """{uid: (task, its owner)}: TaskManager.submit_tasks adds each task it registers."""
        self.view = TasksView(self.entries)
        """{uid: task}, read-only (session.tasks)."""
        self._resumed = resumed

    def take(self, items: list[_wire.Update]) -> None:  # IO thread
        """A batch of agent updates, to the tasks' owners."""
        entries = self.entries
        per_owner: dict[TaskOwner, list] = {}
        resumed = self._resumed
        for u in items:
            e = entries.get(u.uid)
            if e is None:
                if resumed is not None:  # a re-attached agent's news of a task not resubmitted yet
                    old = resumed.answers.get(u.uid)
                    if old is None or S.TASK_RANK.get(u.state, -1) >= S.TASK_RANK.get(
                        old.state, -1
                    ):
                        resumed.answers[u.uid] = u
                continue
            per_owner.setdefault(e[1], []).append((e[0], u))
        for owner, pairs in per_owner.items():
            owner.apply_updates(pairs)

    def finish_locally(self, tasks: Iterable[TaskEntry], state: str, reason: str) -> None:
        """End tasks no agent will report on, per owner (not journaled: a resume runs them
        again)."""
        entries = self.entries
        per_owner: dict[TaskOwner, list] = {}
        for t in tasks:
            per_owner.setdefault(entries[t.uid][1], []).append(t)
        for owner, lost in per_owner.items():
            owner.finish_locally(lost, state, reason)


class TasksView(Mapping):
    """{uid: task} of every task of the session (Session.tasks), read-only."""

    __slots__ = ("_entries",)

    def __init__(self, entries: dict[str, tuple[Any, TaskOwner]]):
        self._entries = entries

    def __getitem__(self, uid: str) -> Any:
        return self._entries[uid][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def __repr__(self) -> str:
        return f"<tasks of the session: {len(self._entries)}>"
