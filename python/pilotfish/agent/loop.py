"""The agent's loop as a list of declared pollables: what each watches, when it is next due,
what it does when its descriptors are ready, and what it does at the end of a round.

A round (Loop.round, called by the agent until it stops):

1. wait: poll every pollable's descriptors, for as long as the nearest deadline allows (at
   most WAIT_MS; a pollable's `due_in` says when it is next due: seconds, inf for never);
2. on_ready: each pollable, in the list's order, with what the poll found ready (the client's
   frames first, then the rooms' sockets, the node plane, the launchers, the reaper);
3. the agent stops here if the round asked it to (`stopped()`);
4. tick: each pollable, in the list's order (placement, timers, supervisors, the drain check,
   the views, the reports, the client's heartbeat, `pilotfish explain`, the simulated clock).

A pollable declares only the parts it has: the loop calls the methods a pollable's class
defines beyond Pollable's (which do nothing), so a round costs a call per part that exists.
Which pollables there are, and in what order, is the agent's choice (_main.py); this module
knows none of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import zmq

from .clock import Clock

WAIT_MS = 1000  # the longest a round waits for something to happen


class Pollable:
    """One subsystem of the loop. Override what it has: `fds` (sockets or descriptors to
    watch), `due_in` (seconds to its next deadline: <= 0 now, inf never), `on_ready` (after
    the poll, with what is ready) and `tick` (after the round's reaping)."""

    fds: Sequence[Any] = ()

    def due_in(self) -> float:
        return math.inf

    def on_ready(self, ready: Collection[Any]) -> None:
        return None

    def tick(self) -> None:
        return None


def _has(p: Pollable, name: str) -> bool:
    return getattr(type(p), name) is not getattr(Pollable, name)


class Loop:
    """The pollables of one agent, in order, and its poller."""

    def __init__(self, poller: zmq.Poller, clock: Clock, sim_poll_s: float | None = None):
        self.poller = poller
        self.clock = clock
        # a simulated pilot runs through virtual time without waiting: its descriptors are
        # looked at every sim_poll_s of real time then (simulation.py)
        self.sim_poll_s = sim_poll_s
        self.last_poll = 0.0
        self.pollables: list[Pollable] = []
        self.timed: list[Pollable] = []
        self.readers: list[Pollable] = []
        self.tickers: list[Pollable] = []

    def add(self, p: Pollable, after: Pollable | None = None) -> None:
        """Add p at the end, or just after `after`; its descriptors are watched from now."""
        at = len(self.pollables) if after is None else self.pollables.index(after) + 1
        self.pollables.insert(at, p)
        for fd in p.fds:
            self.poller.register(fd, zmq.POLLIN)
        ps = self.pollables
        self.timed = [q for q in ps if _has(q, "due_in")]
        self.readers = [q for q in ps if _has(q, "on_ready")]
        self.tickers = [q for q in ps if _has(q, "tick")]

    def timeout_ms(self) -> int:
        """How long the poll may wait: until the nearest deadline (rounded up to the next
        millisecond; none past), at most WAIT_MS."""
        timeout = WAIT_MS
        for p in self.timed:
            d = p.due_in()
            if d < math.inf:
                timeout = max(0, min(timeout, 0 if d <= 0 else int(d * 1000) + 1))
        return timeout

    def wait(self) -> dict:
        """Poll until something is ready or the nearest deadline."""
        timeout = self.timeout_ms()
        sim_poll_s = self.sim_poll_s
        if sim_poll_s is not None and timeout == 0:
            if self.clock.real_mono() - self.last_poll < sim_poll_s:
                return {}  # running through virtual time: the sockets are looked at now and then
        ready = dict(self.poller.poll(timeout))
        self.last_poll = self.clock.real_mono()
        return ready

    def round(self, stopped: Callable[[], bool]) -> None:
        ready = self.wait()
        for p in self.readers:
            p.on_ready(ready)
        if stopped():
            return
        for p in self.tickers:
            p.tick()


class Step(Pollable):
    """A subsystem's part that is only a tick, at its own place in the round (a function of
    no arguments: the views' flush, the drain check...)."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn

    def tick(self) -> None:
        self.fn()
