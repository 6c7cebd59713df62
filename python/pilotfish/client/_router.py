"""The session's update router: what an agent sends goes bridge -> router -> its receiver.

    kind of message                            receiver                  registered by
    Updates                                    the session's task table  Session (at start)
    Hello, Bye, Heartbeat, Missing, Resized,   the pilot's listener      PilotManager (attach)
    Explained
    GroupView, MemberNews, GroupAck            the service group of      services.submit_group
                                               that name on that pilot   (add_group)

ROUTES is the one table of kinds; it covers every message of _wire.ToClient (a test checks
it). A message from a pilot no one attached is dropped (a resumed session's agent that
reconnects before its pilot is re-attached: it is asked again once it is). A pilot's
watcher sees each of its messages before they are routed (a re-attaching pilot asks its agent
to resync whenever it speaks, until it answers).

dispatch() runs on the IO thread only; registrations come from any thread (one dict store
each). Updates are the hot path (a batch of thousands a second with null tasks): one dict
lookup for the pilot, one for the kind, per batch -- nothing per task.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from .. import _wire
from ._ports import AgentListener, GroupListener, UpdateSink

TASKS, PILOT, GROUP = "tasks", "pilot", "group"

ROUTES: dict[type, str] = {
    _wire.Updates: TASKS,
    _wire.Hello: PILOT,
    _wire.Bye: PILOT,
    _wire.Heartbeat: PILOT,
    _wire.Missing: PILOT,
    _wire.Resized: PILOT,
    _wire.Explained: PILOT,
    _wire.GroupView: GROUP,
    _wire.MemberNews: GROUP,
    _wire.GroupAck: GROUP,
}
assert set(ROUTES) == set(typing.get_args(_wire.ToClient)), "a message kind without a route"

_NO_GROUPS: dict[str, GroupListener] = {}


class Router:
    """Owned by the Session; the bridge hands it every message from an agent."""

    __slots__ = ("_tasks", "_pilots", "_watchers", "_groups")

    def __init__(self, tasks: UpdateSink):
        self._tasks = tasks  # the one receiver of Updates
        self._pilots: dict[str, AgentListener] = {}  # pilot uid -> its listener
        self._watchers: dict[str, Callable[[Any], None]] = {}  # pilot uid -> sees all first
        self._groups: dict[str, dict[str, GroupListener]] = {}  # pilot uid -> name -> group

    # -- registration ---------------------------------------------------------------------
    def attach(self, pilot_uid: str, listener: AgentListener) -> None:
        """Messages from this pilot's agent are routed from now on; its own kinds (Hello,
        Bye, Heartbeat, Missing, Resized) go to listener(msg)."""
        self._pilots[pilot_uid] = listener

    def watch(self, pilot_uid: str, watcher: Callable[[Any], None]) -> None:
        """watcher(msg) sees each message of this pilot before it is routed, until unwatch."""
        self._watchers[pilot_uid] = watcher

    def unwatch(self, pilot_uid: str) -> None:
        self._watchers.pop(pilot_uid, None)

    def has_group(self, pilot_uid: str, name: str) -> bool:
        return name in self._groups.get(pilot_uid, _NO_GROUPS)

    def add_group(self, pilot_uid: str, name: str, group: GroupListener) -> None:
        """The group's messages (GroupView, MemberNews, GroupAck of that name from that
        pilot) go to group.on(msg)."""
        self._groups.setdefault(pilot_uid, {})[name] = group

    def drop_group(self, pilot_uid: str, name: str) -> None:
        self._groups.get(pilot_uid, {}).pop(name, None)

    def pilot_final(self, pilot_uid: str) -> None:
        """The pilot ended: its groups wake whoever waits on them (they stay registered)."""
        for group in list(self._groups.get(pilot_uid, _NO_GROUPS).values()):
            group.pilot_final()

    # -- IO thread ------------------------------------------------------------------------
    def dispatch(self, pilot_uid: str, msg: Any) -> None:
        listener = self._pilots.get(pilot_uid)
        if listener is None:
            return
        if self._watchers:
            watcher = self._watchers.get(pilot_uid)
            if watcher is not None:
                watcher(msg)
        route = ROUTES.get(type(msg))
        if route is TASKS:
            self._tasks.take(msg.items)
        elif route is PILOT:
            listener(msg)
        elif route is GROUP:
            group = self._groups.get(pilot_uid, _NO_GROUPS).get(msg.name)
            if group is not None:
                group.on(msg)
