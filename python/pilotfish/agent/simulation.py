"""Simulated pilots: the real agent (scheduler, partitions, meta-scheduler, supervision of
states) with an executor that starts nothing and a clock that jumps.

`PilotDescription(resource="simulated", ...)`: every task "runs" for its `duration`; launcher
instances start and tasks launch after the delays of a launch model, and the agent's own work
takes the CPU time of a CPU model. The agent's loop is the real one; only three parts are
swapped, as flux-core's job-exec swaps its exec implementation:

    clock     VirtualClock (clock.py): now() advances only when the loop jumps it
    executor  SimRunner: launch() puts each task's end on a heap, reap() pops what ended
    launchers ModeledLauncher: ready start-up seconds after begin(), per the model

The loop jumps the clock to the next event (a task's end, a launcher ready, a timer) as soon
as everything due now is done -- but only on the client's word (ClientWord): a Submit holds
the clock until the client says it waits (its Waiting message: sent by wait_tasks after
everything it submitted, or by the client itself a while after a submit call that no wait and
no other submit followed), so that a burst of submissions arrives at one virtual instant
however slowly the client sends it and however loaded the machine; until the word the loop
accepts but does not place (_main), so the burst is placed whole, not in the rounds its
frames happened to arrive in. The clock does not wait for the client to react to its news:
what a callback submits on a task's end arrives at the instant the clock has reached by then
(the same one while nothing else is due). Liveness (heartbeats, the client's silence) stays
on real time.

CPU model (CpuModel; the costs, their defaults fitted from the real agent and their checks:
pilotfish/_cpu_costs.py; `launch_model={"cpu": {...}}` overrides them): the agent is a server
whose work takes CPU time -- each frame received or sent, each task accepted, launched,
ended, the heartbeats of its node executors -- on a timeline of its own (Timeline: first come,
first served, at the speed its idle load leaves). A launch is made when its process's
timeline gets to it (its latency counts from then), a task's end is seen (its slots released,
its final state reported) when the timeline has reaped it: a saturated agent caps the
throughput and shows in TTX and RU. A round is modeled as the real agent's: every task's
launch work, then one launch frame per node executor (a node's tasks of the round start
when it is sent, so they end together and come back in one exit frame), each with its
Spawned reply; exits acknowledged once per node per nodes.ACK_S. With `subagents` each
partition's sub-agent has its own timeline and nodes, under a root charged per routed frame.
Once every task has ended, agent.log says what the model charged (CPU_LOG: tasks, frames,
CPU seconds per process) -- what a fit of the costs counts (bench/bench_sim_vs_real.py).

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
import json
import logging
import math
import random
import signal as _signal
from typing import Any

from .. import _events as E
from .. import _wire
from ..launch.base import LaunchMethod
from .node_link import ACK_S, BEATS_PER_S
from .ports import Runner

log = logging.getLogger("pilotfish.agent")

SIM_POLL_S = 0.002  # while jumping, the client's socket is polled at most this often (real s)
MIN_SPEED = 0.05  # a process whose idle load leaves less runs its work at this speed (logged)
NODE_LAUNCHERS = ("nodes", "pmi")  # launches sent to node executors (no process spawned)
CPU_LOG = "simulated CPU, all tasks ended:"  # agent.log: what the CPU model charged so far


def next_event(runner: Any, table: Any, launchers: Any, clock: Any, drain_at: float) -> float:
    """Mono time of the next thing that will happen by itself in a simulated pilot (inf:
    nothing): a task's end (or its being seen), a timer, a launcher ready; work that waits
    with nothing to unblock it: the walltime's drain (`drain_at`, epoch seconds)."""
    nxt = runner.next_event()
    cpu = getattr(runner, "cpu", None)
    if cpu is not None and cpu.accepted_at > clock.mono():
        nxt = min(nxt, cpu.accepted_at)  # (what was heard is accepted: placeable from then)
    if table.timers:
        nxt = min(nxt, table.next_timer - (clock.now() - clock.mono()))
    for lm in launchers.starting:
        nxt = min(nxt, getattr(lm.method, "ready_at", math.inf))
    if table.tasks and nxt == math.inf:  # work waits that nothing will unblock
        nxt = drain_at - (clock.now() - clock.mono())  # but the walltime
    return nxt


class ClientWord:
    """When a simulated pilot's clock may run: a Submit holds it; the client's word (Waiting:
    it waits for its tasks, or it said nothing for a while after its last submit: client/
    submit.Word) lets it go. Messages arrive in the order they were sent, so the word comes
    after the last frame of a burst however long the client took between them, and however
    long this agent takes to handle them: no real time is measured here."""

    def __init__(self) -> None:
        self.held = False

    def heard(self, msg: Any) -> None:
        if isinstance(msg, _wire.Submit):
            self.held = True
        elif isinstance(msg, _wire.Waiting):
            self.held = False


class Timeline:
    """One process's CPU in virtual time: work given at `at` runs once the work before it is
    done (first come, first served), at the speed the process's idle load leaves."""

    __slots__ = ("name", "free_at", "speed", "busy")

    def __init__(self, name: str, load: float):
        self.name = name
        self.free_at = 0.0  # (mono) when the work given so far is done
        self.speed = max(1.0 - load, MIN_SPEED)
        if 1.0 - load < MIN_SPEED:
            log.warning(
                "simulated %s: its idle load (%.2f CPU s/s: heartbeats) leaves no CPU for its "
                "work; modeled at %g of a core",
                name,
                load,
                MIN_SPEED,
            )
        self.busy = 0.0  # CPU seconds charged

    def run(self, at: float, cost: float) -> float:
        """Charge `cost` CPU seconds of work given at `at`: when it is done."""
        start = at if at > self.free_at else self.free_at
        if cost:
            self.free_at = start + cost / self.speed
            self.busy += cost
        elif start > self.free_at:
            self.free_at = start
        return self.free_at


class CpuModel:
    """The CPU timelines of a simulated pilot's agent -- one, or with `subagents` one per
    partition plus the root's -- and what each piece of its work costs them (the costs:
    pilotfish/_cpu_costs.py). Mechanism only: which partition a task is bound to, where it is
    placed and which launcher launches it are the real agent's decisions."""

    def __init__(self, costs: dict[str, Any], partitions: list, node_executors: bool):
        scale = float(costs["scale"])
        c = {k: float(costs[k]) * scale for k in costs if k not in ("scale", "subagents")}
        self.frame_s, self.accept_s = c["frame_s"], c["accept_s"]
        self.launch_s, self.end_s, self.spawn_s = c["launch_s"], c["end_s"], c["spawn_s"]
        self.route_s = c["route_s"]
        beat = c["beat_per_node_s"] if node_executors else 0.0
        idle = c["idle_s"]
        self.subagents = bool(costs["subagents"])
        self.count = {"accepted": 0, "launched": 0, "spawns": 0, "ended": 0, "frames": 0}
        # when every Submit heard so far is accepted (its frame read, its tasks checked and
        # queued): a real agent places no task before it has read it (accepting())
        self.accepted_at = 0.0
        self.acked: dict[str, float] = {}  # node -> when its exits were last acknowledged
        if self.subagents:
            self.root: Timeline | None = Timeline("root", idle)
            self.lines = [
                Timeline(f"sub-agent p{p.index}", idle + beat * min(len(p.nodes), BEATS_PER_S))
                for p in partitions
            ]
        else:
            self.root = None
            n = sum(len(p.nodes) for p in partitions)  # (beats: at most BEATS_PER_S a second)
            self.lines = [Timeline("agent", idle + beat * min(n, BEATS_PER_S))]

    def line(self, partition: Any) -> Timeline:
        """The timeline of the process that handles a partition's tasks."""
        if self.subagents and partition is not None and partition.index < len(self.lines):
            return self.lines[partition.index]
        return self.lines[0]

    def heard(self, msg: Any, tasks: dict, mono: float) -> None:
        """A frame from the client, handled (its tasks accepted: `tasks` by uid) at `mono`.
        The client's heartbeats are in idle_s; its word is no frame a real agent gets."""
        if isinstance(msg, (_wire.Waiting, _wire.Heartbeat)):
            return
        at = mono if self.root is None else self.root.run(mono, self.route_s)
        if isinstance(msg, _wire.Submit):
            per: dict[Timeline, int] = {}
            line = self.line
            for spec in msg.tasks:
                t = tasks.get(spec.uid)
                tl = line(t.partition if t is not None else None)
                per[tl] = per.get(tl, 0) + 1
            for tl, n in per.items():
                done = tl.run(at, self.frame_s + n * self.accept_s)
                if done > self.accepted_at:
                    self.accepted_at = done
                self.count["accepted"] += n
                self.count["frames"] += 1
        elif self.root is None:
            self.lines[0].run(at, self.frame_s)
            self.count["frames"] += 1

    def accepting(self, mono: float) -> bool:
        """Is some Submit heard not yet accepted at `mono` (its process busy before it)? The
        real agent places a burst's tasks once it has read them: a loop that places only
        when this is false (_main's `placing`) gets the placement times, and so the slots'
        held time, of the real agent, not those of a burst placed the instant it arrived."""
        return self.accepted_at > mono

    def launched(self, tasks: list, mono: float) -> list[float]:
        """Tasks launched in one round at `mono`: when each one's process has launched it.
        As the real agent's round: every task's launch work first (a spawn: spawned then),
        then one launch frame per node executor (node by node: a node's tasks start when its
        frame is sent, so they end together), the nodes' Spawned replies, and the round's
        Updates frame if the round found its process idle."""
        done = [0.0] * len(tasks)
        lines = [self.line(t.partition) for t in tasks]
        nodes: dict[Timeline, dict[str, list[int]]] = {}
        idle: dict[Timeline, bool] = {}
        for tl in lines:
            if tl not in idle:
                idle[tl] = tl.free_at <= mono
                nodes[tl] = {}
        launch_s, spawn_s = self.launch_s, self.spawn_s
        n = self.count
        for i, t in enumerate(tasks):
            tl = lines[i]
            per = nodes[tl]
            if t.lm.name in NODE_LAUNCHERS:
                done[i] = tl.run(mono, launch_s)
                for s in t.slots:
                    per.setdefault(s.node, []).append(i)
            else:
                done[i] = tl.run(mono, launch_s + spawn_s)
                n["spawns"] += 1
        n["launched"] += len(tasks)
        frame_s = self.frame_s
        for tl, per in nodes.items():
            for idx in per.values():  # the launch frame to each node, one after another
                sent = tl.run(mono, frame_s)
                for i in idx:
                    done[i] = sent if sent > done[i] else done[i]
            frames = len(per) * 2 + (1 if idle[tl] else 0)  # (+ their Spawned, + Updates)
            tl.run(mono, (frames - len(per)) * frame_s)
            n["frames"] += frames
        return done

    def reaped(self, ended: list[tuple[float, Any]]) -> list[float]:
        """Tasks whose payloads ended, (end, task) in end order: when each is seen by its
        process -- a node's exit frame per node, its acknowledgment (one per node per
        ACK_S), end_s each, the round's Updates frame if it finds the process idle -- all
        of a process's at once (one round)."""
        groups: dict[Timeline, list[int]] = {}
        for i, (_, t) in enumerate(ended):
            groups.setdefault(self.line(t.partition), []).append(i)
        seen = [0.0] * len(ended)
        frame_s, acked = self.frame_s, self.acked
        for tl, idx in groups.items():
            at = ended[idx[-1]][0]
            nodes: set[str] = set()
            for i in idx:
                t = ended[i][1]
                if t.lm is not None and t.lm.name in NODE_LAUNCHERS:
                    nodes.update(s.node for s in t.slots)
            frames = len(nodes)
            for node in nodes:
                if at - acked.get(node, -math.inf) >= ACK_S:
                    acked[node] = at
                    frames += 1
            if tl.free_at <= at:
                frames += 1
            when = tl.run(at, len(idx) * self.end_s + frames * frame_s)
            self.count["ended"] += len(idx)
            self.count["frames"] += frames
            for i in idx:
                seen[i] = when
        return seen

    def counts(self) -> dict[str, Any]:
        """What it charged so far: tasks accepted, launched, spawned, ended; frames; the CPU
        seconds of each process (the work, its idle load not included)."""
        out: dict[str, Any] = dict(self.count)
        out["busy_s"] = {tl.name: round(tl.busy, 6) for tl in self.timelines()}
        return out

    def timelines(self) -> list[Timeline]:
        return ([self.root] if self.root is not None else []) + self.lines


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

    def __init__(
        self, clock: Any, profile: bool = True, seed: int = 0, cpu: CpuModel | None = None
    ):
        self.clock = clock
        self.profile = profile
        self.rng = random.Random(seed)
        self.cpu = cpu
        self._ends: list[tuple[float, int, Any]] = []  # (mono end, seq, task)
        # payloads ended, not yet seen by their process's CPU: (mono seen, seq, task, end)
        self._seen: list[tuple[float, int, Any, float]] = []
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
        done = self.cpu.launched(tasks, mono) if self.cpu is not None else [mono] * len(tasks)
        for t, at in zip(tasks, done):
            lm = t.lm
            lat = lm.latency(at, self.rng)
            end = at + lat + (t.spec.duration or 0.0)
            if lm.costs["hang_rate"] and self.rng.random() < lm.costs["hang_rate"]:
                end += lm.costs["hang_s"]
            self._seq += 1
            t.procs = [-self._seq]
            t.running = 1
            self._running[t] = end
            heapq.heappush(self._ends, (end, self._seq, t))
            if profile:
                uid = t.spec.uid
                events.append((base + at, uid, E.EXEC_OK, "simulated"))
                events.append((base + at + lat, uid, E.LAUNCH_OK, t.slots[0].node))
        return [], events

    def next_event(self) -> float:
        """The mono time of the next task end, or of an ended task seen (inf: none)."""
        ends, seen, running = self._ends, self._seen, self._running
        while ends and running.get(ends[0][2]) != ends[0][0]:
            heapq.heappop(ends)  # a killed task's stale entry
        while seen and running.get(seen[0][2]) != seen[0][3]:
            heapq.heappop(seen)
        return min(ends[0][0] if ends else math.inf, seen[0][0] if seen else math.inf)

    def reap(self, block_s: float | None = None) -> tuple[list, list, list]:
        now = self.clock.mono()
        base = self.clock.now() - now
        finished, events = [], []
        ends, seen = self._ends, self._seen
        running = self._running
        profile = self.profile
        ended = []
        while ends and ends[0][0] <= now:
            end, _, t = heapq.heappop(ends)
            if running.get(t) == end:
                ended.append((end, t))
        if ended:  # seen once their process's CPU gets to them
            when = self.cpu.reaped(ended) if self.cpu is not None else [e for e, _ in ended]
            for (end, t), w in zip(ended, when):
                self._seq += 1
                heapq.heappush(seen, (w, self._seq, t, end))
        while seen and seen[0][0] <= now:
            _, _, t, end = heapq.heappop(seen)
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
        if finished and not running and self.cpu is not None:  # (read by a fit: _cpu_fit)
            log.info("%s %s", CPU_LOG, json.dumps(self.cpu.counts(), sort_keys=True))
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
