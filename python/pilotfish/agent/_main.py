"""The agent: one process per pilot, inside the allocation -- its start-up and its loop.

One loop, everything in batches: receive task batches and control messages over ZeroMQ, reap
exits (the Rust reaper signals one file descriptor), place what fits (Rust placer, policy in
scheduler.py), spawn the placed tasks in one call, send all state updates of the round in one
frame. The loop sleeps only when there is nothing to do.

The loop owns the sockets, the poller and the clock's use; what happens to tasks is the task
table's (table.py), growing and shrinking the pilot elastic.py's. The rooms the table hosts
(function pool, service registry, supervisors) are given the table (ports.Host), never this
object: nothing imports this module but `__main__`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal as _signal
import sys
from typing import TYPE_CHECKING

import zmq

from .. import _events as E
from .. import _wire
from .. import states as S
from .._events import EventWriter
from .._journal import Journal, spawn_record
from .._sockets import client_link
from .._door import Reserve
from .._inert import open_log
from .._util import hostname, open_private, raise_nofile_limit, read_private, run_profiled
from .clock import REAL, Clock, VirtualClock
from .containment import become_subreaper, kill_marked
from .elastic import Elastic
from .executor import TaskRunner
from .node_runner import NodeRunner
from .nodes import NodeLink
from .launching import LaunchWiring
from .partition import FAILED, Launchers, make_partitions, rebalance
from .pmi.env import clean_environment
from .ports import StopWhy
from .reports import Reports
from .resume import resync
from .simulation import SIM_POLL_S, next_event
from .subagent import decode_subagent_config, own_partition, subagents_on
from .table import KILL_GRACE, TaskTable
from .walltime import batch_time_left, drain_margin

if TYPE_CHECKING:
    from .functions import FunctionPool

log = logging.getLogger("pilotfish.agent")
STEP_GRACE = 5.0  # seconds the end waits for launcher steps told to stop (executors' srun)


class Agent:
    def __init__(self, config: _wire.AgentConfig, clock: Clock | None = None):
        desc = config.description
        # a simulated pilot (simulation.py): the same agent on a virtual clock
        self.sim = desc["resource"] == "simulated"
        if clock is None:
            clock = VirtualClock() if self.sim else REAL
        self.clock = clock
        self.t_start = clock.now()
        self.uid: str = config.pilot_uid
        self.sandbox: str = config.sandbox
        self.desc = desc
        self.events = events = EventWriter(
            os.path.join(self.sandbox, "agent.events"),
            enabled=config.profile,
            now=clock.now,
        )
        events.record(self.uid, E.BOOTSTRAP_START, None, self.t_start)
        raise_nofile_limit()
        self.reserve = Reserve()  # descriptors for shutdown, whatever a flood holds (_door.py)
        # task processes that leave their group or session (setsid) stay our descendants
        self.subreaper = become_subreaper()
        # finals are journaled before they are sent: a resumed client learns what ran here
        self.journal = Journal(os.path.join(self.sandbox, "agent.journal"), enabled=config.journal)
        self.heartbeat_s = config.heartbeat_s
        self.client_timeout = config.client_timeout

        from .resources import discover  # after the profiler: part of startup

        self.resources = discover(
            desc["resource"],
            desc["nodes"],
            desc.get("cores_per_node"),
            desc.get("gpus_per_node"),
            desc.get("mem_per_node"),
        )
        # both may run a command (squeue, scontrol): before the executor's reaper starts
        job_left = batch_time_left(desc["resource"])
        from ..launch import default_launcher

        self.default_launcher = desc.get("launcher") or default_launcher(
            desc["resource"], self.resources
        )
        nodes = self.resources.nodes
        events.record(
            self.uid,
            E.RESOURCES_OK,
            f"{len(nodes)} nodes, {sum(n.cores for n in nodes)} cores, "
            f"{sum(n.gpus for n in nodes)} gpus ({self.resources.source})",
        )
        # the partitions (one by default): each its nodes, placer, queue and launchers
        # (plan: opt in -- it gains only where durations are known, see README)
        policy = os.environ.get("PILOTFISH_SCHEDULER", "utilization")
        self.partitions = make_partitions(
            self.resources, desc.get("partitions"), self.default_launcher, policy, clock
        )
        own = own_partition(config, self.partitions)  # a sub-agent: its partition alone
        if own is not None:
            self.partitions, self.resources = own, own[0].resources
        if len(self.partitions) > 1:
            for p in self.partitions:
                events.record(
                    self.uid,
                    E.PARTITION,
                    json.dumps(
                        {"index": p.index, "nodes": p.names, "launcher": p.default_launcher}
                    ),
                )

        base_env = clean_environment(os.environ)  # (not its own step's identity: pmi/env.py)
        base_env.update(desc.get("environment") or {})
        base_env["PILOTFISH_PILOT_UID"] = self.uid
        base_env["PILOTFISH_SANDBOX"] = self.sandbox
        self.ctx = zmq.Context()
        self.reports = Reports()
        self.tasks_dir = getattr(config, "tasks_dir", "") or os.path.join(self.sandbox, "tasks")
        os.makedirs(self.tasks_dir, exist_ok=True)
        # a multi-rank task on a local pilot that names no launcher anywhere gets an
        # installed MPI launcher (looked up on first need)
        self.table = table = TaskTable(
            uid=self.uid,
            sandbox=self.sandbox,
            tasks_dir=self.tasks_dir,
            desc=desc,
            resources=self.resources,
            ctx=self.ctx,
            clock=clock,
            events=events,
            reports=self.reports,
            partitions=self.partitions,
            sim=self.sim,
            mpi_launcher=(
                False
                if desc.get("launcher")
                or desc["resource"] != "local"
                or self.default_launcher != "direct"
                else None
            ),
        )
        self.services = None  # service groups (services.py); every task learns where they are
        if not self.sim:
            from .services import ServiceRegistry

            self.services = ServiceRegistry(table, self.ctx)
            base_env.update(self.services.env)
            table.ended.append(self.services)
        # a pilot on other hosts: an executor per node runs its single-node tasks (nodes.py),
        # and the ranks there of its MPI tasks (agent/pmi/worlds.py); the runner is a NodeRunner
        self.nodes: NodeLink | None = None
        from .nodes import wanted as nodes_wanted

        if nodes_wanted(desc, desc["resource"]) and self.sim:
            table.single_node_launcher = "nodes"  # modeled (simulation.py)
        elif nodes_wanted(desc, desc["resource"]):
            opts = (desc.get("launcher_options") or {}).get("nodes", {})
            self.nodes = NodeLink(
                self.ctx,
                self.sandbox,
                clock,
                events,
                self.uid,
                self.partitions,
                clock.now() + float(desc["runtime"]),
                beat_s=float(opts.get("beat_s", 1.0)),
                lost_after_s=float(opts.get("lost_after_s", 10.0)),
            )
            table.nodes = self.nodes
            table.single_node_launcher = "nodes"
        # the core writes every exit to agent.exits as it reaps it: with the spawn records of
        # the journal, what finished is known even if this process is killed a moment later
        if self.sim:
            from .._launch_costs import load_model
            from .simulation import ClientWord, CpuModel, SimRunner

            self.core = None
            self.model = load_model(desc.get("launch_model"))
            self.word = ClientWord()  # when its clock may run; what its work costs its CPU
            beats = table.single_node_launcher == "nodes" or self.default_launcher == "pmi"
            self.cpu = CpuModel(self.model["cpu"], self.partitions, beats)
            self.runner: SimRunner | TaskRunner = SimRunner(clock, events.enabled, cpu=self.cpu)
        else:
            from .. import _core

            # (TaskRunner's profile, spool_dir, clock: a sub-agent's spool is its own)
            spool = os.path.join(self.sandbox, "spool")
            self.core = _core.Executor(
                [f"{k}={v}" for k, v in base_env.items()],
                exit_log=os.path.join(self.sandbox, "agent.exits")
                if self.journal.enabled
                else None,
            )
            if self.nodes is not None:
                self.runner = NodeRunner(
                    self.nodes, self.core, self.tasks_dir, events.enabled, spool, clock
                )
            else:
                self.runner = TaskRunner(self.core, self.tasks_dir, events.enabled, spool, clock)
        if self.journal.enabled:
            self.runner.on_spawn = lambda items: self.journal.write(
                [spawn_record(t.spec.uid, keys, not t.spec.output_staging) for t, keys in items]
            )
        self.poller = zmq.Poller()
        if self.core is not None:
            self.poller.register(self.core.notify_fd, zmq.POLLIN)
        if self.services is not None:
            self.poller.register(self.services.sock, zmq.POLLIN)
        self.wiring = LaunchWiring(
            table,
            self.runner,
            self.poller,
            desc,
            self.sandbox,
            clock,
            self.model if self.sim else None,
        )
        if self.nodes is not None:
            self.wiring.nodes = self.nodes
            for fd in self.nodes.fds:
                self.poller.register(fd, zmq.POLLIN)
        # MPI tasks without a launcher: PMI worlds served by the node executors and, on the
        # agent's own node, by the agent (agent/pmi/worlds.py)
        self.pmi = None
        if not self.sim:
            from .pmi.worlds import PmiWorlds, agent_node, kill_ranks, routes

            self.pmi = PmiWorlds(
                agent_node(self.resources), kill_ranks(self.runner), self.nodes, clock.real_mono
            )
            self.runner.pmi = self.pmi  # type: ignore[union-attr]  # a real pilot's TaskRunner
            if self.nodes is not None:
                self.nodes.pmi = self.pmi
            self.poller.register(self.pmi.fileno(), zmq.POLLIN)
            table.pmi_route = routes(desc, self.resources, self.nodes)
        self.launchers = Launchers(self.wiring.make, self.wiring.spawn_aux, events, self.uid, clock)
        table.use(self.runner, self.launchers)
        self.elastic = Elastic(
            table,
            self.launchers,
            self.resources,
            self.default_launcher,
            policy,
            os.environ.get("PILOTFISH_REBALANCE", "1") != "0",
            self.wiring.changed,
            self.wiring.forget,
        )
        if self.services is not None:
            self.elastic.leaving.append(self.services)
        # function tasks' workers and queues (functions.py), made on first use
        self.pool: FunctionPool | None = None
        self.deadline = self.t_start + float(desc["runtime"])
        if job_left is not None:
            self.deadline = min(self.deadline, clock.now() + job_left)
        self.drain_at = self.deadline - drain_margin(float(desc["runtime"]))

        # every partition's launcher starts now, all at once; none is waited for: tasks for a
        # partition whose launcher is still starting wait for it (partition.py)
        for p in self.partitions:
            self.launchers.get(p, None)
            if table.single_node_launcher is not None:
                self.launchers.get(p, "nodes")
        changed = self.launchers.poll()
        self.wiring.changed(
            changed
            + [
                lm
                for p in self.partitions
                for lm in p.launchers.values()
                if lm.state == FAILED and lm not in changed
            ]
        )

        self.sock = client_link(self.ctx, self.uid, config.address, config.curve)
        t = clock.now()
        events.record(self.uid, S.ACTIVE, None, t)
        self._last_heard = self._last_sent = clock.real_mono()  # liveness: real time
        self._hello(t)
        events.flush()

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
        poller = self.poller
        poller.register(self.sock, zmq.POLLIN)
        sock = self.sock
        clock = self.clock
        launchers = self.launchers
        table = self.table
        elastic = self.elastic
        sim = self.sim
        last_poll = last_tick = last_asked = 0.0
        from .explain import POLL_S, requests

        while table.stopping is None:
            timeout = 1000
            now = clock.now()
            if sim:
                timeout = self._sim_timeout()
            elif table.timers:
                timeout = max(0, min(timeout, int((table.next_timer - now) * 1000) + 1))
            sups = self.wiring.supervisors
            if sups:
                mono = clock.mono()
                due = min(s.due for s in sups)
                timeout = max(0, min(timeout, int((due - mono) * 1000) + 1))
            if launchers.starting and not sim:  # starting daemons are polled, never waited for
                timeout = min(timeout, 10)
            services = self.services
            if services is not None and services.due < math.inf:
                timeout = max(0, min(timeout, int((services.due - clock.mono()) * 1000) + 1))
            if sim and timeout == 0 and clock.real_mono() - last_poll < SIM_POLL_S:
                ready = {}  # running through virtual time: the socket is looked at now and then
            else:
                ready = dict(poller.poll(timeout))
                last_poll = clock.real_mono()
            if sock in ready:
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_frame(frame)
            pool = self.pool
            if pool is not None:
                if pool.sock in ready:
                    pool.on_readable()
                elif pool.workers:
                    pool.dispatch()  # (and idle workers stop)
                if pool.parked:
                    pool.expire_parked()
            if services is not None:
                if services.sock in ready:
                    services.on_readable()
                if clock.mono() >= services.due:
                    services.tick()
            if self.wiring.notes:
                for fd, (sup, lm) in self.wiring.notes.items():
                    if fd in ready:
                        sup.read_notes(lm)
            nodes = self.nodes
            if nodes is not None:
                if any(fd in ready for fd in nodes.fds):
                    nodes.on_readable()
                if clock.real_mono() - last_tick >= 0.1:
                    nodes.tick()
                    last_tick = clock.real_mono()
            pmi = self.pmi
            if pmi is not None:
                if pmi.fileno() in ready:
                    pmi.local.poll()
                pmi.tick()
            if launchers.starting:
                changed = launchers.poll()
                if changed:
                    self.wiring.changed(changed)
            table.reap()
            if table.stopping is not None:
                break
            # a simulated burst: placed whole, on its word, once its process has accepted it
            placing = not (sim and (self.word.held or self.cpu.accepting(clock.mono())))
            if placing:
                table.schedule()
            if placing and elastic.rebalance_on:
                moves = rebalance(self.partitions)
                for p, moved in moves:
                    table.move_to(p, moved)
                if moves:
                    table.schedule()
            now = clock.now()
            if table.next_timer <= now:
                table.fire_timers(now)
            if sups:
                mono = clock.mono()
                for sup in sups:
                    if mono >= sup.due:
                        sup.tick(mono)
            if table.drain_check:
                elastic.check_drained()
            if services is not None:
                services.flush()
            self._flush()
            real = clock.real_mono()
            if now >= self.drain_at:
                table.stop(S.DONE, "walltime reached", StopWhy.WALLTIME)
            elif real - self._last_heard > self.client_timeout:
                table.stop(
                    S.CANCELED,
                    f"client silent for {real - self._last_heard:.0f}s "
                    f"(bound {self.client_timeout:g}s)",
                    StopWhy.CLIENT_GONE,
                )
            elif real - self._last_sent >= self.heartbeat_s:
                self.sock.send(_wire.encode(_wire.Heartbeat(now)))
                self._last_sent = real
            if real - last_asked >= POLL_S:  # `pilotfish explain` asks through files
                last_asked = real
                self._doors_said()
                requests(self.sandbox, self._explain)
            if sim and not self.word.held:
                self._sim_jump()
        return self._shutdown()

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

    def _sim_timeout(self) -> int:
        """poll() timeout (ms) of a simulated pilot: none while the clock may jump to a next
        event; else a while (for the client's word, or something to do)."""
        return 100 if self.word.held or self._next_event() == math.inf else 0

    def _sim_jump(self) -> None:
        nxt = self._next_event()
        if nxt < math.inf:
            assert isinstance(self.clock, VirtualClock)  # a simulated pilot's
            self.clock.jump_to(nxt)

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

            self.pool = FunctionPool(self.table)
            self.poller.register(self.pool.sock, zmq.POLLIN)
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
