"""The agent: one process per pilot, inside the allocation -- its loop and its client.

One loop, everything in batches: receive task batches and control messages over ZeroMQ, reap
exits (the Rust reaper signals one file descriptor), place what fits (Rust placer, policy in
scheduler.py), spawn the placed tasks in one call, send all state updates of the round in one
frame. The loop sleeps only when there is nothing to do.

The loop is a list of declared pollables (loop.py; the subsystems' adapters: pollables.py),
in the order a round serves them; the agent's parts are made by start.py (a real pilot's
apart from a simulated one's), its environment knobs read once (knobs.py). This object is
the client's end: the frames in, the reports out, the heartbeats, the end. What happens to
tasks is the task table's (table.py), growing and shrinking the pilot elastic.py's. The rooms
the table hosts (function pool, service registry, supervisors) are given the table
(ports.Host), never this object: nothing imports this module but `__main__`.
"""

from __future__ import annotations

import logging
import math
import os
import signal as _signal
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import zmq

from .. import _events as E
from .. import _wire
from .. import states as S
from .._inert import open_log
from .._sockets import client_link
from .._util import hostname, open_private, read_private, run_profiled
from .clock import Clock, VirtualClock
from .containment import kill_marked
from .explain import POLL_S, requests
from .knobs import Knobs, read_knobs
from .loop import Loop, Pollable, Step
from .pollables import (
    NodePlane,
    Notes,
    Placement,
    PmiPlane,
    Reaper,
    SimClock,
    Starting,
    Supervisors,
    Timers,
)
from .ports import StopWhy
from .resume import resync
from .simulation import SIM_POLL_S, next_event
from .start import Parts, build_real, build_simulated
from .subagent import decode_subagent_config, subagents_on
from .table import KILL_GRACE

if TYPE_CHECKING:
    from .functions import FunctionPool

log = logging.getLogger("pilotfish.agent")
STEP_GRACE = 5.0  # seconds the end waits for launcher steps told to stop (executors' srun)


class Agent(Parts, Pollable):
    def __init__(
        self, config: _wire.AgentConfig, clock: Clock | None = None, knobs: Knobs | None = None
    ):
        knobs = read_knobs(os.environ) if knobs is None else knobs
        self.knobs = knobs
        if config.description["resource"] == "simulated":
            build_simulated(self, config, knobs, clock)
        else:
            build_real(self, config, knobs, clock)
        self.loop = self._pollables()
        self.sock = client_link(self.ctx, self.uid, config.address, config.curve)
        t = self.clock.now()
        self.events.record(self.uid, S.ACTIVE, None, t)
        self._last_heard = self._last_sent = self.clock.real_mono()  # liveness: real time
        self._last_asked = 0.0
        self._hello(t)
        self.events.flush()

    def _pollables(self) -> Loop:
        """The loop's subsystems, in the order a round serves them (loop.py)."""
        clock, table, sim = self.clock, self.table, self.sim
        loop = Loop(self.poller, clock, SIM_POLL_S if sim else None)
        loop.add(self)  # the client's frames (its socket: added when the loop runs)
        # (the function pool goes here once made: _functions)
        if self.services is not None:
            loop.add(self.services)
        loop.add(Notes(self.wiring))
        if self.nodes is not None:
            loop.add(NodePlane(self.nodes, clock))
        if self.pmi is not None:
            loop.add(PmiPlane(self.pmi))
        loop.add(Starting(self.launchers, self.wiring, not sim))
        loop.add(Reaper(table, self.core))
        # -- the round's end
        hold = (lambda: self.word.held or self.cpu.accepting(clock.mono())) if sim else None
        loop.add(Placement(table, self.elastic, self.partitions, hold))
        loop.add(Timers(table, clock, not sim))
        loop.add(Supervisors(self.wiring, clock))
        loop.add(Step(self._drain_check))
        if self.services is not None:
            loop.add(Step(self.services.flush))
        loop.add(Step(self._to_client))
        loop.add(Step(self._explain_asked))
        if sim:
            assert isinstance(clock, VirtualClock)  # a simulated pilot's
            loop.add(SimClock(clock, lambda: self.word.held, self._next_event))
        return loop

    @property
    def stopping(self) -> tuple[str, str, StopWhy] | None:
        return self.table.stopping

    def _hello(self, t: float) -> None:
        self.sock.send(
            _wire.encode(
                _wire.Hello(
                    self.uid,
                    self.resources.nodes,
                    self.default_launcher,
                    t,
                    os.getpid(),
                    hostname(),
                )
            )
        )

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        self.fds = (self.sock,)
        self.poller.register(self.sock, zmq.POLLIN)
        table, loop = self.table, self.loop

        def stopped() -> bool:
            return table.stopping is not None

        while table.stopping is None:
            loop.round(stopped)
        return self._shutdown()

    def on_ready(self, ready: Collection[Any]) -> None:
        """The client's frames (loop.Pollable)."""
        sock = self.sock
        if sock in ready:
            while True:
                try:
                    frame = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on_frame(frame)

    def _drain_check(self) -> None:
        if self.table.drain_check:
            self.elastic.check_drained()

    def _to_client(self) -> None:
        """The round's reports; the end at walltime, or when the client went silent; else a
        heartbeat when one is due."""
        self._flush()
        now = self.clock.now()
        real = self.clock.real_mono()
        if now >= self.drain_at:
            self.table.stop(S.DONE, "walltime reached", StopWhy.WALLTIME)
        elif real - self._last_heard > self.client_timeout:
            self.table.stop(
                S.CANCELED,
                f"client silent for {real - self._last_heard:.0f}s "
                f"(bound {self.client_timeout:g}s)",
                StopWhy.CLIENT_GONE,
            )
        elif real - self._last_sent >= self.heartbeat_s:
            self.sock.send(_wire.encode(_wire.Heartbeat(now)))
            self._last_sent = real

    def _explain_asked(self) -> None:
        real = self.clock.real_mono()
        if real - self._last_asked >= POLL_S:  # `pilotfish explain` asks through files
            self._last_asked = real
            self._doors_said()
            requests(self.sandbox, self._explain)

    def _doors_said(self, final: bool = False) -> None:
        """What the doors of the pool's and the registry's sockets refused, as one event per
        interval each (the node port's: NodeLink.tick); final: all that is left untold."""
        rooms = [self.pool, self.services] + ([self.nodes] if final else [])
        for room in rooms:
            if room is not None:
                said = room.door.take_summary(force=final)
                if said:
                    self.events.record(self.uid, E.REFUSED, said)

    # -- simulated time ---------------------------------------------------------------------
    def _next_event(self) -> float:
        """Mono time of the next thing that will happen by itself (inf: nothing)."""
        return next_event(self.runner, self.table, self.launchers, self.clock, self.drain_at)

    # -- from the client ----------------------------------------------------------------------
    def _on_frame(self, frame: bytes) -> None:
        """One frame from the client. Nothing in it may stop the agent: a frame that does not
        decode is salvaged task by task (the tasks that do decode run, the others fail with
        the reason); anything else is logged and dropped."""
        self._last_heard = self.clock.real_mono()
        try:
            msg = _wire.decode_to_agent(frame)
        except Exception as e:  # noqa: BLE001 -- any undecodable frame: salvaged or answered, never fatal
            salvaged = _wire.salvage_submit(frame)
            if salvaged is None:
                log.warning("dropped an undecodable frame (%d bytes): %s", len(frame), e)
                self.events.record(self.uid, E.BAD_FRAME, str(e)[:200])
                return
            specs, bad = salvaged
            now = self.clock.now()
            for uid, why in bad:
                self.events.record(uid, S.FAILED, why, now)
                self.reports.update(_wire.Update(uid, S.FAILED, now, reason=why))
            msg = _wire.Submit(specs)
        try:
            self._on_message(msg)
        except Exception:  # a bug must not cost the pilot: log it, keep serving
            log.exception("handling %s failed", type(msg).__name__)
        if self.sim:  # the client's word; the frame's CPU (simulation.py)
            self.word.heard(msg)
            self.cpu.heard(msg, self.table.tasks, self.clock.mono())

    def _on_message(self, msg) -> None:
        if isinstance(msg, _wire.Submit):
            self._submit(msg.tasks)
        elif isinstance(msg, _wire.Cancel):
            self.table.cancel(msg.uids)
        elif isinstance(msg, _wire.Shutdown):
            self.table.stop(S.DONE, msg.reason, StopWhy.SHUTDOWN)
        elif isinstance(msg, _wire.Resync):
            self._resync(msg.uids)
        elif isinstance(
            msg, (_wire.GroupStart, _wire.GroupResize, _wire.GroupHold, _wire.GroupRelease)
        ):
            self._on_group(msg)
        elif isinstance(msg, _wire.Grow):
            self.elastic.grow(msg)
        elif isinstance(msg, _wire.Shrink):
            self.elastic.shrink(msg)
        elif isinstance(msg, _wire.Explain):
            self.sock.send(_wire.encode(_wire.Explained(msg.token, self._explain(msg.uids))))

    def _explain(self, uids: list[str]) -> list[dict]:
        """Why each task is where it is (explain.py; read only)."""
        from .explain import explain

        return explain(uids, self.table, self.pool, self.services, self.clock)

    def _submit(self, specs: list[_wire.TaskSpec]) -> None:
        """Tasks go to the table; function calls to the function pool (no task of their
        own: a worker runs them)."""
        tasks, calls = [], []
        live = self.table.tasks
        pool = self.pool
        for spec in specs:
            if spec.function is None and spec.fn_ref is None:
                tasks.append(spec)
            elif spec.uid in live or (pool is not None and spec.uid in pool.calls):
                self.events.record(spec.uid, S.FAILED, "a task with this uid is already live")
                if spec.function is not None and spec.fn_ref is not None and pool is not None:
                    pool.define(spec.fn_ref, spec.function)  # its siblings may need it
            else:
                calls.append(spec)
        if tasks:
            self.table.accept(tasks)
        if not calls:
            return
        now = self.clock.now()
        why = "function tasks do not run on a simulated pilot" if self.sim else None
        if why is None:
            try:
                started = self._functions()
            except Exception as e:  # the calls fail, with why
                log.exception("cannot start the function pool")
                why = f"cannot start function workers: {e}"[:1000]
        if why is not None:
            for spec in calls:
                self.table.call_final(spec.uid, S.FAILED, None, now, None, why)
        else:
            started.accept(calls, now)

    def _functions(self) -> FunctionPool:
        if self.pool is None:
            from .functions import FunctionPool

            if self.knobs.fn_park_problem is not None:
                raise ValueError(self.knobs.fn_park_problem)
            self.pool = FunctionPool(self.table, self.knobs.fn_park_s, self.knobs.keep_results)
            self.loop.add(self.pool, after=self)  # (its socket is watched from now)
            self.table.calls = self.pool  # type: ignore[assignment]  # ports.CallPool.calls: a settable Mapping (issue 39 lead: pending)
            self.table.ended.append(self.pool)
            self.elastic.leaving.append(self.pool)
        return self.pool

    def _on_group(self, msg) -> None:
        if self.services is not None:
            self.services.on_client(msg)
            return
        name = msg.spec.name if isinstance(msg, _wire.GroupStart) else msg.name
        self.reports.send(
            _wire.GroupAck(
                name,
                getattr(msg, "token", "start"),
                -1,
                "service groups do not run on a simulated pilot",
            )
        )

    def _resync(self, uids: list[str]) -> None:
        """A resumed client re-attached: hello again, then what became of each task."""
        now = self.clock.now()
        self.events.record(self.uid, E.CLIENT_REATTACH, f"{len(uids)} tasks asked")
        self._flush(force=True)  # journal and send what is pending first
        self._hello(now)
        ups, missing = resync(
            self.table.tasks, self.pool.calls if self.pool else {}, self.journal.path, uids, now
        )
        for i in range(0, len(ups), 4096):
            self.sock.send(_wire.encode(_wire.Updates(ups[i : i + 4096])))
        self.sock.send(_wire.encode(_wire.Missing(missing)))
        self._last_sent = self.clock.real_mono()

    # -- to the client ------------------------------------------------------------------------
    def _flush(self, force: bool = False) -> None:
        # running through virtual time, one frame per jump would be one per task end: a
        # simulated pilot sends what gathered every SIM_POLL_S of real time instead
        real = self.clock.real_mono()
        hold = bool(
            self.sim
            and not force
            and self.reports.updates
            and real - self._last_sent < SIM_POLL_S
            and len(self.reports.updates) < 4096
            and self._next_event() < math.inf
        )
        if self.reports.flush(self.sock, self.journal, hold_updates=hold):
            self._last_sent = real
        self.journal.maybe_sync()
        self.events.maybe_flush()

    # -- the end ----------------------------------------------------------------------------
    def _shutdown(self) -> int:
        pilot_state, reason, why = self.table.stopping  # type: ignore[misc]  # set (a 3-tuple) before the loop ends
        clock = self.clock
        table = self.table
        self.events.record(self.uid, E.DRAIN_START, reason)
        if self.pool is not None:
            self.pool.drain(
                S.FAILED if why is StopWhy.WALLTIME else S.CANCELED,
                S.WALLTIME_KILLED if why is StopWhy.WALLTIME else f"pilot stopped: {reason}",
            )
        if why is StopWhy.WALLTIME:
            task_state, task_reason = S.FAILED, S.WALLTIME_KILLED
        else:
            task_state, task_reason = S.CANCELED, f"pilot stopped: {reason}"
        table.stop_all(task_state, task_reason, f"pilot stopped before the task started: {reason}")
        deadline = clock.real_mono() + KILL_GRACE + 2.0
        while self.runner.running and clock.real_mono() < deadline:
            if self.nodes is not None:
                self.nodes.on_readable()
                self.nodes.tick()
                table.reap(block_s=0.02)
            else:
                table.reap(block_s=0.1)
            now = clock.now()
            if table.next_timer <= now:
                table.fire_timers(now)
            self._flush(force=True)
        self._flush(force=True)
        self.events.record(self.uid, E.DRAIN_STOP)
        self.launchers.stop_all(self.partitions)  # all at once
        # The launchers' own steps (the node executors' srun step) end before the job does:
        # one still running when the batch script exits is killed by Slurm, and its nodes stay
        # COMPLETING until slurmctld's next ping (20-40 s before the next job can have them).
        deadline = clock.real_mono() + STEP_GRACE
        while self.runner.aux and not self.sim and clock.real_mono() < deadline:
            if self.nodes is not None:
                self.nodes.on_readable()
            table.reap(block_s=0.05)
        # the pilot ends: nothing it started outlives it (setsid escapees included)
        self.reserve.release()  # the cleanup opens /proc files: never short of them
        left = kill_marked(self.sandbox) if not self.sim else 0
        if left:
            self.events.record(self.uid, E.LEFTOVERS_KILLED, str(left))
        if self.pool is not None:  # (its workers are gone: no result is being written)
            self.pool.drop_results()
        self._flush(force=True)
        self.journal.close()
        self._doors_said(final=True)
        self.events.record(self.uid, E.AGENT_STOP, reason)
        self.sock.send(_wire.encode(_wire.Bye(self.uid, pilot_state, reason, clock.now())))
        self.events.close()
        if self.pool is not None:
            self.pool.close()
        if self.services is not None:
            self.services.close()
        if self.nodes is not None:
            self.nodes.close()
        if self.pmi is not None:
            self.pmi.close()
        self.sock.close()  # lingers until the bye is out (LINGER)
        self.ctx.term()
        return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sub = argv[:1] == ["--subagent"]  # started by a root for one partition (root.py)
    argv = argv[1:] if sub else argv
    if len(argv) != 1:
        print("usage: python -m pilotfish.agent [--subagent] AGENT_CONFIG.json", file=sys.stderr)
        return 2
    # Everything the agent, its steps and its tasks create in the sandbox is its owner's alone
    # (0600 files, 0700 directories), whatever umask the agent was started with: a local
    # pilot's is the client's (often 022); a batch script sets 077 itself (psij_job.py).
    os.umask(0o077)
    try:  # (never through a link: it holds the agent's secret key)
        decode = decode_subagent_config if sub else _wire.decode_agent_config
        config = decode(read_private(argv[0]), argv[0])
    except (OSError, ValueError) as e:
        print(f"pilotfish agent: {e}", file=sys.stderr)
        return 2
    log_fd = open_private(
        os.path.join(config.sandbox, "agent.log"),  # (never via a link)
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    )
    open_log(log_fd)  # (what a task or peer writes is bounded and escaped there: _inert.py)
    if not sub and subagents_on(config.description):  # a root and a sub-agent per partition
        from .root import run_root

        return run_root(config)
    # SIGTERM from the batch system (or a cancel): drain like a shutdown request
    agent = Agent(config)

    def on_term(*_: object) -> None:
        agent.table.stop(S.CANCELED, "terminated by signal", StopWhy.SIGNAL)

    _signal.signal(_signal.SIGTERM, on_term)
    # An open of a spool file while the output reader holds its write lease (for an instant)
    # signals the lease holder: SIGIO, whose default would kill the agent. (Tasks get it back
    # at its default.)
    _signal.signal(_signal.SIGIO, _signal.SIG_IGN)
    return run_profiled(agent.run, "PILOTFISH_AGENT_CPROFILE")  # where the agent's time goes
