"""Simulated pilots: the real agent (scheduler, partitions, meta-scheduler, supervision of
states) with an executor that starts nothing and a clock that jumps.

`PilotDescription(resource="simulated", ...)`: every task "runs" for its `duration`; launcher
instances start and tasks launch after the delays of a launch model. The agent's loop is the
real one; only three parts are swapped, as flux-core's job-exec swaps its exec
implementation:

    clock     VirtualClock (clock.py): now() advances only when the loop jumps it
    executor  SimRunner: launch() puts each task's end on a heap, reap() pops what ended
    launchers ModeledLauncher: ready start-up seconds after begin(), per the model

The loop jumps the clock to the next event (a task's end, a launcher ready, a timer) as soon
as everything due now is done -- but only once the client has been silent for AUTOJUMP_S of
real time, so that a burst of submissions arrives at one virtual instant (as Trio's
autojump_threshold). Liveness (heartbeats, the client's silence) stays on real time.

Launch model (`launch_model=` a dict or a JSON file; unknown methods or negative costs are
rejected at submit), per launch method:
    startup_s, startup_per_node_s      an instance is ready after startup_s + per_node * nodes
    latency_s, latency_per_inflight_s  a launch reaches its payload after latency_s +
                                       per_inflight * (launches of that instance still
                                       in their launch phase)
    fail_rate                          share of launches that fail before the payload runs and
                                       are launched again (as the supervisor does), paying the
                                       latency twice
    hang_rate, hang_s                  share of launches whose launcher outlives the payload (a
                                       missed job end): the task's slots stay held hang_s more
                                       (the supervisor's hang_grace) before it ends
Defaults (`pilotfish/_launch_costs.py`, with the checks and reads of a model) were fitted on
this machine from real PRRTE and direct runs (`pilotfish simulate --fit SESSION_DIR`;
BENCHMARKS.md names the runs).
"""

from __future__ import annotations

import heapq
import math
import random
import signal as _signal
from typing import Any

from .. import _events as E
from ..launch.base import LaunchMethod
from .ports import Runner

AUTOJUMP_S = 0.1  # real seconds of client silence before the clock may jump
SIM_POLL_S = 0.002  # while jumping, the client's socket is polled at most this often (real s)


class ModeledLauncher(LaunchMethod):
    """A launch method that starts nothing: ready after its model's start-up time (it builds
    no processes: SimRunner launches nothing)."""

    def __init__(self, name: str, costs: dict[str, float], nodes: int, clock: Any):
        super().__init__(None)
        self.mono = clock.mono
        self.name = name
        self.costs = costs
        self.nodes = nodes
        self.clock = clock
        self.ready_at = math.inf
        self.in_launch: list[float] = []  # heap: when launches in their launch phase end

    def begin(self, spawn: Any = None) -> None:
        c = self.costs
        self.ready_at = self.clock.mono() + c["startup_s"] + c["startup_per_node_s"] * self.nodes

    def poll_ready(self) -> bool:
        return self.clock.mono() >= self.ready_at

    def latency(self, now: float, rng: random.Random) -> float:
        """Seconds from the launch to its payload running, given what is in flight now."""
        q = self.in_launch
        while q and q[0] <= now:
            heapq.heappop(q)
        c = self.costs
        lat = c["latency_s"] + c["latency_per_inflight_s"] * len(q)
        if c["fail_rate"] and rng.random() < c["fail_rate"]:
            lat *= 2  # failed before the payload ran: launched again
        heapq.heappush(q, now + lat)
        return lat

    def stop_begin(self) -> None:
        pass

    def stop(self) -> None:
        pass


class SimRunner(Runner):
    """The executor of a simulated pilot: the TaskRunner interface, no processes.

    A launched task holds one pseudo-process (pid < 0 never names a real process); its end is
    put on a heap at launch + latency + duration; reap() pops what ended by the clock's now.
    Kills end a task at once with the signal."""

    def __init__(self, clock: Any, profile: bool = True, seed: int = 0):
        self.clock = clock
        self.profile = profile
        self.rng = random.Random(seed)
        self._ends: list[tuple[float, int, Any]] = []  # (mono end, seq, task)
        self._seq = 0
        self._running: dict[Any, float] = {}  # task -> its end (mono)
        self.signal_ranks = None
        self.on_spawn = None  # (nothing is spawned)
        self.on_spawn = None
        self.aux: dict[int, str] = {}

    def launch(self, tasks: list) -> tuple[list, list]:
        clock = self.clock
        mono = clock.mono()
        base = clock.now() - mono  # epoch of mono 0
        events = []
        profile = self.profile
        for t in tasks:
            lm = t.lm
            lat = lm.latency(mono, self.rng)
            end = mono + lat + (t.spec.duration or 0.0)
            if lm.costs["hang_rate"] and self.rng.random() < lm.costs["hang_rate"]:
                end += lm.costs["hang_s"]
            self._seq += 1
            t.procs = [-self._seq]
            t.running = 1
            self._running[t] = end
            heapq.heappush(self._ends, (end, self._seq, t))
            if profile:
                uid = t.spec.uid
                events.append((base + mono, uid, E.EXEC_OK, "simulated"))
                events.append((base + mono + lat, uid, E.LAUNCH_OK, t.slots[0].node))
        return [], events

    def next_event(self) -> float:
        """The mono time of the next task end (inf: none)."""
        ends = self._ends
        while ends and self._running.get(ends[0][2]) != ends[0][0]:
            heapq.heappop(ends)  # a killed task's stale entry
        return ends[0][0] if ends else math.inf

    def reap(self, block_s: float | None = None) -> tuple[list, list, list]:
        now = self.clock.mono()
        base = self.clock.now() - now
        finished, events = [], []
        ends = self._ends
        running = self._running
        profile = self.profile
        while ends and ends[0][0] <= now:
            end, _, t = heapq.heappop(ends)
            if running.get(t) != end:
                continue
            del running[t]
            t.running = 0
            if t.signal:
                t.exit_code = -t.signal
            elif t.exit_code is None:
                t.exit_code = 0
            if profile:
                events.append(
                    (
                        base + end,
                        t.spec.uid,
                        E.EXEC_STOP,
                        str(-t.signal if t.signal else t.exit_code),
                    )
                )
            finished.append(t)
        return finished, events, []

    def kill(self, tasks: list, sig: int = _signal.SIGTERM) -> None:
        now = self.clock.mono()
        for t in tasks:
            if t in self._running and self._running[t] > now:
                t.signal = sig
                self._running[t] = now
                self._seq += 1
                heapq.heappush(self._ends, (now, self._seq, t))

    def read_outputs(self, tasks: list) -> list[tuple[str | None, str | None]]:
        return [(None, None)] * len(tasks)

    def spawn_aux(self, *a, **k) -> int:
        raise OSError("a simulated pilot starts no processes")

    @property
    def running(self) -> int:
        return len(self._running)
