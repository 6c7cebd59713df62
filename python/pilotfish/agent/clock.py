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


REAL = Clock()
