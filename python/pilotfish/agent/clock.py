"""The agent's one clock.

Everything in the agent that asks what time it is asks this object: event times, deadlines,
timers, the scheduler's aging, the supervisor's grace periods. Nothing in the agent calls
`time.*` itself, so that another clock (a virtual one that jumps to the next event, for
simulated pilots) can replace this one without touching the loop. Two readings, as Python
has: `now()` (seconds since the epoch: what events and the client see) and `mono()` (never
goes back: intervals).
"""

from __future__ import annotations

import time as _time


class Clock:
    """Real time."""

    virtual = False

    def now(self) -> float:
        return _time.time()

    def mono(self) -> float:
        return _time.monotonic()

    def real_mono(self) -> float:
        """Real monotonic time whatever the clock: for liveness (heartbeats, timeouts)."""
        return _time.monotonic()


REAL = Clock()


class VirtualClock(Clock):
    """Simulated time (simulation.py): starts at the real time of its creation and moves
    only when jump_to() is called -- the loop jumps it to the next event when nothing is
    due now. real_mono() stays real: heartbeats and the client's silence are liveness."""

    virtual = True

    def __init__(self, start: float | None = None):
        self._epoch = _time.time() if start is None else start
        self._mono = 0.0

    def now(self) -> float:
        return self._epoch + self._mono

    def mono(self) -> float:
        return self._mono

    def jump_to(self, mono: float) -> None:
        if mono > self._mono:
            self._mono = mono
