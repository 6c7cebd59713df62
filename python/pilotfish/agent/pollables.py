"""The agent's subsystems as the loop sees them (loop.Pollable), where their own modules do
not declare themselves (the function pool and the service registry do: functions.py,
services.py).

In the agent's list (_main.py): after the poll, the node plane (NodeLink: its port, and its
tick every NODE_TICK_S), the PMI worlds' socket and tick, the launchers still starting, the
supervisors' rank notes, the reaper; at the end of the round the placement, the task
table's timers, the supervisors' ticks, and the simulated clock's jump.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from .clock import Clock, VirtualClock
from .loop import Pollable
from .partition import Launchers, Partition, rebalance

if TYPE_CHECKING:
    from .elastic import Elastic
    from .launching import LaunchWiring
    from .node_link import NodeLink
    from .pmi.worlds import PmiWorlds
    from .table import TaskTable

NODE_TICK_S = 0.1  # the node plane's heartbeats, acks and losses are looked at this often
STARTING_S = 0.0095  # launchers still starting are polled this often (10 ms), never waited for


class NodePlane(Pollable):
    def __init__(self, nodes: NodeLink, clock: Clock):
        self.nodes = nodes
        self.clock = clock
        self.fds = nodes.fds
        self.last_tick = 0.0

    def on_ready(self, ready: Collection[Any]) -> None:
        nodes = self.nodes
        if any(fd in ready for fd in nodes.fds):
            nodes.on_readable()
        if self.clock.real_mono() - self.last_tick >= NODE_TICK_S:
            nodes.tick()
            self.last_tick = self.clock.real_mono()


class PmiPlane(Pollable):
    def __init__(self, pmi: PmiWorlds):
        self.pmi = pmi
        self.fd = pmi.fileno()
        self.fds = (self.fd,)

    def on_ready(self, ready: Collection[Any]) -> None:
        if self.fd in ready:
            self.pmi.local.poll()
        self.pmi.tick()


class Starting(Pollable):
    """Launchers still starting (daemons): polled, never waited for."""

    def __init__(self, launchers: Launchers, wiring: LaunchWiring, watch: bool):
        self.launchers = launchers
        self.wiring = wiring
        self.watch = watch  # (a simulated pilot's start in no real time)

    def due_in(self) -> float:
        return STARTING_S if self.watch and self.launchers.starting else math.inf

    def on_ready(self, ready: Collection[Any]) -> None:
        if self.launchers.starting:
            changed = self.launchers.poll()
            if changed:
                self.wiring.changed(changed)


class Notes(Pollable):
    """The supervisors' rank notes (their sockets: registered by the wiring as they come)."""

    def __init__(self, wiring: LaunchWiring):
        self.wiring = wiring

    def on_ready(self, ready: Collection[Any]) -> None:
        if self.wiring.notes:
            for fd, (sup, lm) in self.wiring.notes.items():
                if fd in ready:
                    sup.read_notes(lm)


class Supervisors(Pollable):
    """The supervisors of launchers that need watching: each ticks when due."""

    def __init__(self, wiring: LaunchWiring, clock: Clock):
        self.wiring = wiring
        self.clock = clock

    def due_in(self) -> float:
        sups = self.wiring.supervisors
        if not sups:
            return math.inf
        return min(s.due for s in sups) - self.clock.mono()

    def tick(self) -> None:
        sups = self.wiring.supervisors
        if sups:
            mono = self.clock.mono()
            for sup in sups:
                if mono >= sup.due:
                    sup.tick(mono)


class Reaper(Pollable):
    """Exits (the Rust reaper signals one descriptor), reaped every round."""

    def __init__(self, table: TaskTable, core: Any):
        self.table = table
        self.fds = () if core is None else (core.notify_fd,)

    def on_ready(self, ready: Collection[Any]) -> None:
        self.table.reap()


class Placement(Pollable):
    """What fits is placed (and waiting tasks move between partitions); `hold`: a simulated
    burst is placed whole, on its word, once its process has accepted it."""

    def __init__(
        self,
        table: TaskTable,
        elastic: Elastic,
        partitions: list[Partition],
        hold: Callable[[], bool] | None,
    ):
        self.table = table
        self.elastic = elastic
        self.partitions = partitions
        self.hold = hold

    def tick(self) -> None:
        if self.hold is not None and self.hold():
            return
        table = self.table
        table.schedule()
        if self.elastic.rebalance_on:
            moves = rebalance(self.partitions)
            for p, moved in moves:
                table.move_to(p, moved)
            if moves:
                table.schedule()


class Timers(Pollable):
    """The task table's timers (timeouts, kill escalations)."""

    def __init__(self, table: TaskTable, clock: Clock, watch: bool):
        self.table = table
        self.clock = clock
        self.watch = watch  # (a simulated pilot's clock jumps to them: simulation.py)

    def due_in(self) -> float:
        if self.watch and self.table.timers:
            return self.table.next_timer - self.clock.now()
        return math.inf

    def tick(self) -> None:
        now = self.clock.now()
        if self.table.next_timer <= now:
            self.table.fire_timers(now)


class SimClock(Pollable):
    """A simulated pilot's clock: no wait while it may jump to the next event; else a while
    (for the client's word, or something to do); at the end of a round, the jump."""

    def __init__(
        self, clock: VirtualClock, held: Callable[[], bool], next_event: Callable[[], float]
    ):
        self.clock = clock
        self.held = held
        self.next_event = next_event

    def due_in(self) -> float:
        return 0.0999 if self.held() or self.next_event() == math.inf else 0.0  # (100 ms)

    def tick(self) -> None:
        if not self.held():
            nxt = self.next_event()
            if nxt < math.inf:
                self.clock.jump_to(nxt)
