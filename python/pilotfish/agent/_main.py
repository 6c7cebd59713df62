"""The agent: one process per pilot, inside the allocation.

One loop, everything in batches: receive task batches and control messages over ZeroMQ, reap
exits (the Rust reaper signals one file descriptor), place what fits (Rust placer, policy in
scheduler.py), spawn the placed tasks in one call, send all state updates of the round in one
frame. The loop sleeps only when there is nothing to do.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import os
import signal as _signal
import subprocess
import sys

import msgspec
import zmq

from .. import _events as E
from .. import _wire
from .. import states as S
from .._events import EventWriter
from .._journal import Journal
from .._paths import resolve, task_cwd
from .._batch_env import parse_slurm_time
from .._util import hostname, raise_nofile_limit
from ..descriptions import (LAUNCHERS, MAX_CORES_PER_NODE, MAX_GPUS_PER_NODE, MAX_MEM_MIB, misfit,
                            misfit_partitions, partition_layout)
from .clock import REAL, Clock, VirtualClock
from .containment import become_subreaper, kill_marked
from .executor import REASON_TAIL, TaskRunner, signal_name
from .simulation import AUTOJUMP_S, SIM_POLL_S
from ..launch.base import LaunchError
from .partition import (DEGRADED, FAILED, READY, STARTING, Launchers, Partition, add_work, bind,
                        rebalance, remove_work, task_work)
from .._staging import stage
from .supervisor import Supervisor
from .tasks import BACKOFF, FINAL, HELD, RUNNING, AgentTask, move

log = logging.getLogger("pilotfish.agent")

REQUEUE = E.REQUEUE  # kill_reason state of a restartable task stopped for a drain: queued again
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL for timeouts, cancels, shutdown


def drain_margin(runtime: float) -> float:
    """How long before the walltime the agent stops: enough to report, not much more."""
    return min(60.0, max(1.0, 0.1 * runtime))


def batch_time_left(resource: str, env=os.environ) -> float | None:
    """Seconds until the batch system ends this job, as it says itself (None: unknown).

    The job's clock starts before the agent's, and batch systems round walltimes (Slurm to
    whole minutes): the agent drains before the earlier of its own deadline and this one.
    Asked once, before the executor starts (its reaper would collect this child too).
    """
    job = env.get("SLURM_JOB_ID")
    if resource != "slurm" or not job:
        return None
    try:
        r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True,
                           text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_slurm_time(r.stdout.strip())


class Agent:
    def __init__(self, config: dict, clock: Clock | None = None):
        desc = config["description"]
        # a simulated pilot (simulation.py): the same agent on a virtual clock
        self.sim = desc["resource"] == "simulated"
        if clock is None:
            clock = VirtualClock() if self.sim else REAL
        self.clock = clock
        self.t_start = clock.now()
        self.cfg = config
        self.uid: str = config["pilot_uid"]
        self.sandbox: str = config["sandbox"]
        self.desc = desc
        self.events = EventWriter(os.path.join(self.sandbox, "agent.events"),
                                  enabled=config.get("profile", True), now=clock.now)
        self.events.record(self.uid, E.BOOTSTRAP_START, None, self.t_start)
        raise_nofile_limit()
        # task processes that leave their group or session (setsid) stay our descendants
        self.subreaper = become_subreaper()
        # finals are journaled before they are sent: a resumed client learns what ran here
        self.journal = Journal(os.path.join(self.sandbox, "agent.journal"),
                               enabled=config.get("journal", True))
        self._journal_buf: list[list] = []
        self.heartbeat_s = float(config.get("heartbeat_s", 5.0))
        self.client_timeout = float(config.get("client_timeout", 60.0))

        from .resources import Resources, discover  # after the profiler: part of startup

        self.resources = discover(desc["resource"], desc["nodes"], desc.get("cores_per_node"),
                                  desc.get("gpus_per_node"), desc.get("mem_per_node"))
        # both may run a command (squeue, scontrol): before the executor's reaper starts
        job_left = batch_time_left(desc["resource"])
        from ..launch import default_launcher

        self.default_launcher = desc.get("launcher") or default_launcher(desc["resource"],
                                                                         self.resources)
        # a multi-rank task on a local pilot that names no launcher anywhere gets an installed
        # MPI launcher (MPI rank variables, one launch per task); looked up on first need
        self._mpi_launcher: str | None | bool = (
            False if desc.get("launcher") or desc["resource"] != "local"
            or self.default_launcher != "direct" else None)
        nodes = self.resources.nodes
        self.events.record(self.uid, E.RESOURCES_OK,
                           f"{len(nodes)} nodes, {sum(n.cores for n in nodes)} cores, "
                           f"{sum(n.gpus for n in nodes)} gpus ({self.resources.source})")
        # the partitions (one by default): each its nodes, placer, queue and launchers
        policy = os.environ.get("PILOTFISH_SCHEDULER", "utilization")
        self.partitions: list[Partition] = []
        for i, (first, n, launcher) in enumerate(partition_layout(
                len(nodes), desc.get("partitions"), self.default_launcher)):
            part_nodes = nodes[first:first + n]
            res = Resources(part_nodes, self.resources.source, self.resources.overrides)
            self.partitions.append(Partition(i, part_nodes, first, res,
                                             launcher or self.default_launcher, policy, clock))
        self.shapes = [p.shape for p in self.partitions]
        self._misfits: dict[tuple, object] = {}  # request shape -> misfit (check_spec memo)
        self._may_rebalance = os.environ.get("PILOTFISH_REBALANCE", "1") != "0"
        self._rebalance_on = len(self.partitions) > 1 and self._may_rebalance
        if len(self.partitions) > 1:
            for p in self.partitions:
                self.events.record(self.uid, E.PARTITION, json.dumps(
                    {"index": p.index, "nodes": p.names, "launcher": p.default_launcher}))

        base_env = dict(os.environ)
        base_env.update(desc.get("environment") or {})
        base_env["PILOTFISH_PILOT_UID"] = self.uid
        base_env["PILOTFISH_SANDBOX"] = self.sandbox
        self.ctx = zmq.Context()
        self.services = None  # service groups (services.py); every task learns where they are
        if not self.sim:
            from .services import ServiceRegistry

            self.services = ServiceRegistry(self, self.ctx)
            base_env.update(self.services.env)
        # the core writes every exit to agent.exits as it reaps it: with the spawn records of
        # the journal, what finished is known even if this process is killed a moment later
        self.tasks_dir = os.path.join(self.sandbox, "tasks")
        os.makedirs(self.tasks_dir, exist_ok=True)
        if self.sim:
            from .._launch_model import load_model
            from .simulation import SimRunner

            self.core = None
            self.model = load_model(desc.get("launch_model"))
            self.runner = SimRunner(clock, profile=self.events.enabled)
        else:
            from .. import _core

            self.core = _core.Executor([f"{k}={v}" for k, v in base_env.items()],
                                       exit_log=os.path.join(self.sandbox, "agent.exits")
                                       if self.journal.enabled else None)
            self.runner = TaskRunner(self.core, self.tasks_dir, profile=self.events.enabled,
                                     clock=clock)
        self.runner.signal_ranks = self._signal_ranks
        if self.journal.enabled:
            self.runner.on_spawn = lambda items: self.journal.write(
                [["spawn", t.spec.uid, keys, not t.spec.output_staging] for t, keys in items])
        self.launchers = Launchers(self._make_launcher, self._spawn_aux, self.events, self.uid,
                                   clock)
        self.poller = zmq.Poller()
        if self.core is not None:
            self.poller.register(self.core.notify_fd, zmq.POLLIN)
        if self.services is not None:
            self.poller.register(self.services.sock, zmq.POLLIN)
        self.supervisors: list[Supervisor] = []  # of partitions whose launchers need watching
        self._notes: dict[int, tuple[Supervisor, object]] = {}  # notes fd -> (its supervisor, launcher)

        self.tasks: dict[str, AgentTask] = {}  # live tasks (queued or running), by uid
        self.pool = None  # function tasks' workers and queues (functions.py), made on first use
        self._seq = 0
        self._updates: list[_wire.Update] = []
        # (when, seq, kind, task, its gen then): a timer set for an earlier run is skipped
        self._timers: list[tuple[float, int, str, AgentTask, int]] = []
        self._timer_seq = 0
        self.stopping: tuple[str, str, str] | None = None  # (pilot state, reason, task state)
        self._draining: list[Partition] = []  # grown units being shrunk (Pilot.shrink)
        self._drain_check = False  # something of a draining unit ended: is it empty now?
        self._outbox: list = []  # messages for the client, in order, sent by _flush
        self._policy = policy
        self._next_node = len(nodes)  # node and partition indices are never reused (events
        self._next_part = len(self.partitions)  # name them)
        self.deadline = self.t_start + float(desc["runtime"])
        if job_left is not None:
            self.deadline = min(self.deadline, clock.now() + job_left)
        self.drain_at = self.deadline - drain_margin(float(desc["runtime"]))

        # every partition's launcher starts now, all at once; none is waited for: tasks for a
        # partition whose launcher is still starting wait for it (partition.py)
        for p in self.partitions:
            self.launchers.get(p, None)
        changed = self.launchers.poll()
        self._launchers_changed(changed + [lm for p in self.partitions
                                           for lm in p.launchers.values()
                                           if lm.state == FAILED and lm not in changed])

        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.ROUTING_ID, self.uid.encode())
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 5000)
        curve = config.get("curve")
        if curve:  # the client proves itself with the session key; we with the pilot's
            self.sock.setsockopt(zmq.CURVE_SERVERKEY, curve["server"].encode())
            self.sock.setsockopt(zmq.CURVE_PUBLICKEY, curve["public"].encode())
            self.sock.setsockopt(zmq.CURVE_SECRETKEY, curve["secret"].encode())
        self.sock.connect(config["address"])
        t = clock.now()
        self.events.record(self.uid, S.ACTIVE, None, t)
        self._last_heard = self._last_sent = clock.real_mono()  # liveness: real time
        self._hello(t)
        self.events.flush()

    def send(self, msg) -> None:
        """A message for the client (service news, resizes), sent by this round's _flush
        after the task updates gathered before it: the client sees what happened in the
        order it happened, and the finals in them are journaled first."""
        if self._updates:
            self._outbox.append(_wire.Updates(self._updates))
            self._updates = []
        self._outbox.append(msg)

    def _hello(self, t: float) -> None:
        self.sock.send(_wire.encode(_wire.Hello(self.uid, self.resources.nodes,
                                                self.default_launcher, t, os.getpid(),
                                                hostname())))

    # -- launchers --------------------------------------------------------------------------
    def _with_mpi_launcher(self, spec: _wire.TaskSpec) -> _wire.TaskSpec:
        if self._mpi_launcher is None:
            from ..launch import installed_mpi_launcher

            self._mpi_launcher = installed_mpi_launcher() or False
            self.events.record(self.uid, E.MPI_LAUNCHER, self._mpi_launcher or "none")
        if not self._mpi_launcher:
            return spec
        return msgspec.structs.replace(spec, launcher=self._mpi_launcher)

    def _make_launcher(self, p: Partition, name: str):
        """A launch method over partition p's nodes (called by Launchers, which starts it)."""
        from ..launch import get_launcher

        if self.sim:
            from .simulation import ModeledLauncher

            if name not in self.model:
                raise LaunchError(f"no launch model for {name!r}")
            return ModeledLauncher(name, self.model[name], len(p.nodes), self.clock)

        options = dict((self.desc.get("launcher_options") or {}).get(name, {}))
        options.update(p.options.get(name, {}))  # a grown unit's own (its batch job)
        tag = name if len(self.partitions) == 1 else f"{name}.p{p.index}"
        options.setdefault("dvm_dir", os.path.join(self.sandbox, tag))
        lm = get_launcher(name, p.resources, options)
        lm.mono = self.clock.mono  # its deadlines on the agent's clock
        if lm.launch_retries or lm.supervised:
            if p.supervisor is None:
                p.supervisor = Supervisor(self, p)
                self.supervisors.append(p.supervisor)
            p.supervisor.watch(lm)
        return lm

    def _spawn_aux(self, detail: str, argv, env, stdout=None, stderr=None) -> int:
        """Start a launcher's daemon through the core (its exit is reaped like any child)."""
        tag = detail.replace(" ", ".")
        stdout = stdout or os.path.join(self.sandbox, f"{tag}.out")
        stderr = stderr or os.path.join(self.sandbox, f"{tag}.err")
        return self.runner.spawn_aux(detail, argv, env, stdout, stderr)

    def _launchers_changed(self, changed: list) -> None:
        """Launcher instances that became ready (launch what waited for them) or failed
        (close the partition, or fail the tasks that asked for that launcher)."""
        for lm in changed:
            held, lm.held = lm.held, []
            for t in held:
                t.held = None
            if lm.state == READY:
                sup = lm.partition.supervisor
                notes = getattr(lm.method, "notes", None)
                if sup is not None and notes is not None and notes.fileno() not in self._notes:
                    self._notes[notes.fileno()] = (sup, lm.method)
                    self.poller.register(notes.fileno(), zmq.POLLIN)
                live = [t for t in held if t.final_state is None and t.kill_reason is None]
                if live:
                    self._launch(live, [])
                for t in held:  # canceled or timed out while it waited: it never ran
                    if t.final_state is None and t.kill_reason is not None:
                        self._release([t])
                        t.reason = t.kill_reason[1]
                        self._final(t, t.kill_reason[0])
                continue
            p = lm.partition
            if lm.name == p.default_launcher and p.open:
                self._close_partition(p, f"launcher {lm.name} cannot be started: {lm.reason}",
                                      held)
            else:
                self._release(held)
                for t in held:
                    if t.final_state is None:
                        t.reason = (f"launch failed: launcher {lm.name} of partition "
                                    f"{p.index} cannot be started: {lm.reason}")
                        self._final(t, S.FAILED)

    def _close_partition(self, p: Partition, why: str, held: list) -> None:
        """Nothing can run on p any more: its nodes are reported, its waiting and held tasks
        go to the other partitions (or fail with the reason if none can hold them)."""
        self.events.record(self.uid, E.PARTITION_CLOSED,
                           f"p{p.index} ({', '.join(p.names[:8])}"
                           f"{'...' if len(p.names) > 8 else ''}): {why}"[:500])
        log.error("partition %d closed (%d nodes: %s): %s", p.index, len(p.names),
                  ",".join(p.names), why)
        moved = self._evacuate(p, held, why)
        if not any(q.open for q in self.partitions):
            if self.stopping is None:
                self.stopping = (S.FAILED, f"no partition can launch: {why}", "launchers")
            for t in moved:
                t.reason = f"partition {p.index} closed: {why}"
                self._final(t, S.FAILED)
            return
        self._bind(moved, self.clock.mono(), why=f"partition {p.index} closed: {why}")

    def _evacuate(self, p: Partition, held: list, why: str) -> list:
        """p takes nothing new (closed, or drained): its waiting tasks and those held for its
        launcher (their slots given back) come out, to be bound elsewhere."""
        p.open = False
        p.closed_reason = why
        self._release(held)
        moved = p.scheduler.drain_waiting()
        for t in held:
            if t.final_state is None and t.kill_reason is None:
                t.reset_for_retry()
                moved.append(t)
        return moved

    def _move_to(self, p: Partition, tasks: list) -> None:
        """Waiting tasks taken from other partitions' queues join p's."""
        for t in tasks:
            remove_work(t.partition, t.spec, t.work)
            t.partition, t.work = p, task_work(t.spec)
            add_work(p, t.spec, t.work)
        p.scheduler.add(tasks, self.clock.mono())

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        poller = self.poller
        poller.register(self.sock, zmq.POLLIN)
        sock = self.sock
        clock = self.clock
        launchers = self.launchers
        sim = self.sim
        last_poll = 0.0
        while self.stopping is None:
            timeout = 1000
            now = clock.now()
            if sim:
                timeout = self._sim_timeout()
            elif self._timers:
                timeout = max(0, min(timeout, int((self._timers[0][0] - now) * 1000) + 1))
            sups = self.supervisors
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
            if self._notes:
                for fd, (sup, lm) in self._notes.items():
                    if fd in ready:
                        sup.read_notes(lm)
            if launchers.starting:
                changed = launchers.poll()
                if changed:
                    self._launchers_changed(changed)
            self._reap()
            if self.stopping is not None:
                break
            self._schedule()
            if self._rebalance_on:
                moves = rebalance(self.partitions)
                for p, moved in moves:
                    self._move_to(p, moved)
                if moves:
                    self._schedule()
            now = clock.now()
            if self._timers and self._timers[0][0] <= now:
                self._fire_timers(now)
            if sups:
                mono = clock.mono()
                for sup in sups:
                    if mono >= sup.due:
                        sup.tick(mono)
            if self._drain_check:
                self._drain_check = False
                self._check_drained()
            if services is not None:
                services.flush()
            self._flush()
            real = clock.real_mono()
            if now >= self.drain_at:
                self.stopping = (S.DONE, "walltime reached", "walltime")
            elif real - self._last_heard > self.client_timeout:
                self.stopping = (S.CANCELED, f"client silent for {real - self._last_heard:.0f}s "
                                 f"(bound {self.client_timeout:g}s)", "client gone")
            elif real - self._last_sent >= self.heartbeat_s:
                self.sock.send(_wire.encode(_wire.Heartbeat(now)))
                self._last_sent = real
            if sim and real - self._last_heard >= AUTOJUMP_S:
                self._sim_jump()
        return self._shutdown()

    # -- simulated time ---------------------------------------------------------------------
    def _next_event(self) -> float:
        """Mono time of the next thing that will happen by itself (inf: nothing)."""
        clock = self.clock
        nxt = self.runner.next_event()
        if self._timers:
            nxt = min(nxt, self._timers[0][0] - (clock.now() - clock.mono()))
        for lm in self.launchers.starting:
            nxt = min(nxt, getattr(lm.method, "ready_at", math.inf))
        if self.tasks and nxt == math.inf:  # work waits that nothing will unblock: walltime
            nxt = self.drain_at - (clock.now() - clock.mono())
        return nxt

    def _sim_timeout(self) -> int:
        """poll() timeout (ms) of a simulated pilot: none while the clock may jump to a next
        event; else until the client has been quiet long enough, or a while."""
        quiet = self.clock.real_mono() - self._last_heard
        if quiet < AUTOJUMP_S:
            return int((AUTOJUMP_S - quiet) * 1000) + 1
        return 0 if self._next_event() < math.inf else 100

    def _sim_jump(self) -> None:
        nxt = self._next_event()
        if nxt < math.inf:
            self.clock.jump_to(nxt)

    def _on_frame(self, frame: bytes) -> None:
        """One frame from the client. Nothing in it may stop the agent: a frame that does not
        decode is salvaged task by task (the tasks that do decode run, the others fail with
        the reason); anything else is logged and dropped."""
        self._last_heard = self.clock.real_mono()
        try:
            msg = _wire.decode_to_agent(frame)
        except Exception as e:
            salvaged = _wire.salvage_submit(frame)
            if salvaged is None:
                log.warning("dropped an undecodable frame (%d bytes): %s", len(frame), e)
                self.events.record(self.uid, E.BAD_FRAME, str(e)[:200])
                return
            specs, bad = salvaged
            now = self.clock.now()
            for uid, why in bad:
                self.events.record(uid, S.FAILED, why, now)
                self._updates.append(_wire.Update(uid, S.FAILED, now, reason=why))
            msg = _wire.Submit(specs)
        try:
            self._on_message(msg)
        except Exception:  # a bug must not cost the pilot: log it, keep serving
            log.exception("handling %s failed", type(msg).__name__)

    def _on_message(self, msg) -> None:
        if isinstance(msg, _wire.Submit):
            self._accept(msg.tasks)
        elif isinstance(msg, _wire.Cancel):
            self._cancel(msg.uids)
        elif isinstance(msg, _wire.Shutdown):
            self.stopping = (S.DONE, msg.reason, "shutdown")
        elif isinstance(msg, _wire.Resync):
            self._resync(msg.uids)
        elif isinstance(msg, (_wire.GroupStart, _wire.GroupResize, _wire.GroupHold,
                              _wire.GroupRelease)):
            self._on_group(msg)
        elif isinstance(msg, _wire.Grow):
            self._grow(msg)
        elif isinstance(msg, _wire.Shrink):
            self._shrink(msg)

    def _on_group(self, msg) -> None:
        services = self.services
        name = msg.spec.name if isinstance(msg, _wire.GroupStart) else msg.name
        if services is None:
            self.send(_wire.GroupAck(name, getattr(msg, "token", "start"), -1,
                                     "service groups do not run on a simulated pilot"))
        elif isinstance(msg, _wire.GroupStart):
            services.start(msg.spec, msg.resume)
        elif isinstance(msg, _wire.GroupResize):
            services.resize(msg.name, msg.replicas)
        elif isinstance(msg, _wire.GroupHold):
            epoch, why = services.hold(msg.name, msg.token, None)
            self.send(_wire.GroupAck(msg.name, msg.token, epoch, why))
        else:
            services.release(msg.name, msg.token)

    def _resync(self, uids: list[str]) -> None:
        """A resumed client re-attached: hello again, then what became of each task."""
        now = self.clock.now()
        self.events.record(self.uid, E.CLIENT_REATTACH, f"{len(uids)} tasks asked")
        self._flush(force=True)  # journal and send what is pending first
        self._hello(now)
        done, outputs = (_finals_and_outputs(self.journal.path, set(uids)) if uids
                         else ({}, {}))
        ups, missing = [], []
        for uid in uids:
            t = self.tasks.get(uid)
            if t is not None:
                if t.state is RUNNING:
                    ups.append(_wire.Update(uid, S.EXECUTING, now, slots=t.slots,
                                            partition=t.partition.index))
                else:  # waiting, held for its launcher, or in its retry backoff
                    ups.append(_wire.Update(uid, S.AGENT_SCHEDULING, now))
                continue
            if self.pool is not None and uid in self.pool.calls:  # a function call, live
                ups.append(_wire.Update(uid, S.AGENT_SCHEDULING, now))
                continue
            r = done.get(uid)
            if r is None:
                missing.append(uid)
                continue
            _, _, state, code, sig, reason, t_final = r
            out, err = outputs.get(uid, ("", ""))
            ups.append(_wire.Update(uid, state, t_final, exit_code=code, signal=sig, reason=reason,
                                    stdout=out, stderr=err))
        for i in range(0, len(ups), 4096):
            self.sock.send(_wire.encode(_wire.Updates(ups[i:i + 4096])))
        self.sock.send(_wire.encode(_wire.Missing(missing)))
        self._last_sent = self.clock.real_mono()

    def _functions(self):
        if self.pool is None:
            from .functions import FunctionPool

            self.pool = FunctionPool(self)
            self.poller.register(self.pool.sock, zmq.POLLIN)
        return self.pool

    def _call_final(self, uid: str, state: str, started: float | None, ended: float,
                    result: bytes | None, reason: str | None, stdout: str | None = None,
                    stderr: str | None = None) -> None:
        """A function call's end (functions.py): its events, journal record and update."""
        if started is not None:
            self.events.record_many([(started, uid, S.EXECUTING, None),
                                     (ended, uid, state, reason)])
        else:
            self.events.record(uid, state, reason, ended)
        if stdout or stderr:  # journaled with the final, as a task's outputs are
            self._journal_buf.append(["out", uid, stdout, stderr])
        self._journal_buf.append(["final", uid, state, None, None, reason, ended])
        self._updates.append(_wire.Update(uid, state, ended, reason=reason, result=result,
                                          started=started, stdout=stdout, stderr=stderr))

    def _accept(self, specs: list[_wire.TaskSpec]) -> None:
        now = self.clock.now()
        events = self.events
        ready = []
        profile = events.enabled
        calls = []
        pool = self.pool
        for spec in specs:
            if spec.function is not None or spec.fn_ref is not None:  # a function call:
                # queued for a worker, no task
                if spec.uid in self.tasks or (pool is not None and spec.uid in pool.calls):
                    events.record(spec.uid, S.FAILED, "a task with this uid is already live",
                                  now)
                    if spec.function is not None and spec.fn_ref is not None \
                            and pool is not None:
                        pool.define(spec.fn_ref, spec.function)  # its siblings may need it
                    continue
                calls.append(spec)
                continue
            t = AgentTask(spec, self._seq)
            self._seq += 1
            if profile:
                events.record(spec.uid, S.AGENT_SCHEDULING, None, now)
            if spec.uid in self.tasks:  # the live one keeps running; this copy fails alone
                events.record(spec.uid, S.FAILED, "a task with this uid is already live", now)
                continue
            try:
                if spec.ranks > 1 and spec.launcher is None and self._mpi_launcher is not False:
                    spec = t.spec = self._with_mpi_launcher(spec)
                problem = check_spec(spec, self.shapes, self.tasks_dir, self.sandbox,
                                     self._misfits)
                if problem is None and self.sim and spec.duration is None:
                    problem = ("duration = None: required on a simulated pilot (a task runs "
                               "for its duration)")
                if problem is None and spec.input_staging:
                    try:
                        stage(spec.input_staging, self._cwd_of(spec), sandbox=self.sandbox)
                    except (OSError, ValueError) as e:
                        problem = f"input staging failed: {e}"
            except Exception as e:  # whatever the spec holds, it fails alone
                problem = f"cannot handle this task: {type(e).__name__}: {e}"
            if problem is not None:
                t.reason = problem
                self._final(t, S.FAILED, now)
                continue
            self.tasks[spec.uid] = t
            self._updates.append(_wire.Update(spec.uid, S.AGENT_SCHEDULING, now))
            ready.append(t)
        self._bind(ready, self.clock.mono())
        if calls:
            if self.sim:
                for spec in calls:
                    self._call_final(spec.uid, S.FAILED, None, now, None,
                                     "function tasks do not run on a simulated pilot")
            else:
                try:
                    pool = self._functions()
                except Exception as e:  # noqa: BLE001 -- the calls fail, with why
                    log.exception("cannot start the function pool")
                    for spec in calls:
                        self._call_final(spec.uid, S.FAILED, None, now, None,
                                         f"cannot start function workers: {e}"[:1000])
                else:
                    pool.accept(calls, now)

    def _bind(self, tasks: list[AgentTask], mono: float, why: str | None = None) -> None:
        """Send each task to its partition's queue (partition.bind: where it can start
        soonest). One partition: no choice to make."""
        parts = self.partitions
        if len(parts) == 1 and parts[0].open:
            p = parts[0]
            for t in tasks:
                t.partition = p
            p.scheduler.add(tasks, mono)
            return
        by_part: dict[Partition, list[AgentTask]] = {}
        for t in tasks:
            if t.partition is not None and t.work:
                remove_work(t.partition, t.spec, t.work)
                t.work = 0.0
            work = task_work(t.spec)
            p = bind(parts, t.spec, work)
            if p is None:
                t.partition = None
                t.reason = ((f"{why}; " if why else "") + "no open partition can hold it: "
                            + "; ".join(f"p{q.index}: {q.closed_reason or 'too small'}"
                                        for q in parts))[:1000]
                self._final(t, S.FAILED)
                continue
            t.partition = p
            t.work = work
            add_work(p, t.spec, work)
            by_part.setdefault(p, []).append(t)
        for p, ts in by_part.items():
            p.scheduler.add(ts, mono)

    def _cwd_of(self, spec) -> str:
        return task_cwd(spec, spec.uid, self.tasks_dir)

    def _schedule(self) -> None:
        launching = []
        events = []
        profile = self.events.enabled  # off: not even the event tuples are built
        mono = None
        for p in self.partitions:
            sched = p.scheduler
            if not ((sched.waiting and sched._dirty) or sched.unplaceable) or not p.open:
                continue
            if mono is None:
                mono = self.clock.mono()
            placed = sched.schedule(mono)
            if sched.unplaceable:
                now = self.clock.now()
                for t, why in sched.take_unplaceable():
                    t.reason = why
                    self._final(t, S.FAILED, now)
            if not placed:
                continue
            now = self.clock.now()
            to_slots = p.to_slots
            busy = 0
            for t, raw in placed:
                t.slots = to_slots(raw)
                uid = t.spec.uid
                busy += t.spec.ranks * t.spec.cores_per_rank
                if profile:
                    events.append((now, uid, E.SCHEDULE_OK, None))
                launching.append(t)
            p.busy_cores += busy
        if launching:
            self._launch(launching, events)
        elif events:
            self.events.record_many(events)

    def _launch(self, tasks: list[AgentTask], events: list, relaunch: bool = False) -> None:
        """Spawn placed tasks whose launcher is ready; the others wait for theirs (held, on
        their slots); those that cannot be spawned fail alone. A task is EXECUTING (update
        with its slots and partition) when it is launched, not while it is held: it may
        still move to another partition then."""
        go = []
        get = self.launchers.get
        profile = self.events.enabled
        ups = self._updates
        now = self.clock.now()
        for t in tasks:
            lm = get(t.partition, t.spec.launcher)
            if lm.state == READY:
                t.lm = lm.method
                move(t, RUNNING)
                go.append(t)
                if relaunch or (t.launch is not None and t.launch.attempt):
                    continue  # the client knows it runs; this is the supervisor's retry
                uid = t.spec.uid
                if profile:
                    events += ((now, uid, S.EXECUTING, None), (now, uid, E.EXEC_START, None))
                ups.append(_wire.Update(uid, S.EXECUTING, now, slots=t.slots,
                                        partition=t.partition.index))
            elif lm.state in (STARTING, DEGRADED):
                lm.held.append(t)
                t.held = lm
                move(t, HELD)
            else:  # failed: its partition is closed (default launcher) or the task fails
                lm.held.append(t)
                t.held = lm
                move(t, HELD)
                self._launchers_changed([lm])
        if not go:
            self.events.record_many(events)
            return
        self._spawn(go, events)
        now = self.clock.now()
        for t in go:
            if t.spec.timeout and t.running and not t.timed:
                t.timed = True
                self._timer(now + t.spec.timeout, "timeout", t)

    def _spawn(self, launching: list[AgentTask], events: list) -> None:
        """Spawn placed tasks; those that cannot be spawned fail alone."""
        failed, spawn_events = self.runner.launch(launching)
        events.extend(spawn_events)
        self.events.record_many(events)
        if failed:
            self._release(failed)
            for t in failed:
                if not t.procs:
                    self._final(t, S.FAILED)
                else:  # other ranks were killed; finalized when they are reaped
                    t.kill_reason = (S.FAILED, t.reason or "launch failed")
        if self.supervisors:
            for p, ts in _by_partition(launching).items():
                if p.supervisor is not None:
                    p.supervisor.launched(ts)

    def relaunch(self, tasks: list[AgentTask]) -> None:
        """Launch these tasks again on the slots they hold (the supervisor's retries)."""
        for t in tasks:
            t.procs = []
            t.running = 0
            t.exit_code = None
            t.signal = None
            t.reason = None
        now = self.clock.now()
        self._launch(tasks, [(now, t.spec.uid, E.EXEC_START, None) for t in tasks]
                     if self.events.enabled else [], relaunch=True)

    def _signal_ranks(self, t: AgentTask, sig: int) -> None:
        sup = t.partition.supervisor if t.partition is not None else None
        if sup is not None:
            sup.signal_ranks(t, sig)

    def _reap(self, block_s: float | None = None) -> None:
        finished, events, aux_exits = self.runner.reap(block_s)
        self.events.record_many(events)
        for name, pid, code, sig in aux_exits:
            log.info("%s (pid %s) exited (code %s, signal %s)", name, pid, code, sig)
            for sup in self.supervisors:
                sup.daemon_exited(pid, code, sig)
        done = [t for t in finished if t.final_state is None]
        if done and self.supervisors:
            kept = []
            for p, ts in _by_partition(done).items():
                kept += p.supervisor.exited(ts) if p.supervisor is not None else ts
            done = kept
        if not done:
            return
        killed = {t.spec.uid for t in done if t.kill_reason is not None}
        if killed and not self.sim:  # stopped for good: so is what it started outside its group
            kill_marked(self.sandbox, "PILOTFISH_TASK_UID", killed, sig=_signal.SIGKILL)
        self._release(done)
        now = self.clock.now()
        ran = [t for t in done if t.spool >= 0]  # their outputs, in one call to the core
        outputs = dict(zip(ran, self.runner.read_outputs(ran))) if ran else {}
        for t in done:
            if t.kill_reason is not None and t.kill_reason[0] == REQUEUE:
                if self.stopping is None:
                    self._requeue(t, now)
                    continue
                t.kill_reason = (S.CANCELED, f"pilot stopped: {self.stopping[1]}")
            if t.kill_reason is not None:
                state, t.reason = t.kill_reason
            elif t.exit_code == 0:
                state = S.DONE
            else:
                state = S.FAILED
            if state == S.FAILED and t.attempt < t.spec.retries and self.stopping is None \
                    and (t.kill_reason is None or t.kill_reason[1].startswith("timed out")):
                self._retry(t, now)
                continue
            self._final(t, state, now, ran=True, outputs=outputs.get(t, (None, None)))

    # -- elastic pilots ----------------------------------------------------------------------
    def _grow(self, msg: _wire.Grow) -> None:
        """New nodes join as a partition of their own, with its own launcher instance;
        placement sees them at once (waiting tasks move there by rebalance)."""
        from .resources import Resources

        now = self.clock.now()
        names = {n.name for p in self.partitions for n in p.nodes}
        problem = None
        if not msg.nodes:
            problem = "no nodes"
        elif any(p.unit == msg.unit for p in self.partitions):
            problem = f"unit {msg.unit!r} joined already"
        elif names & {n.name for n in msg.nodes}:
            problem = f"nodes {sorted(names & {n.name for n in msg.nodes})} are in the pilot already"
        elif any(not n.name or not 1 <= n.cores <= MAX_CORES_PER_NODE
                 or not 0 <= n.gpus <= MAX_GPUS_PER_NODE
                 or not 0 <= n.mem <= MAX_MEM_MIB for n in msg.nodes):
            problem = (f"nodes: each needs a name, 1..{MAX_CORES_PER_NODE} cores, "
                       f"0..{MAX_GPUS_PER_NODE} GPUs, mem >= 0")
        elif len({n.name for n in msg.nodes}) != len(msg.nodes):
            problem = "nodes: names repeat"
        elif msg.launcher is not None and msg.launcher not in LAUNCHERS:
            problem = f"launcher {msg.launcher!r} is not a launch method"
        if problem is not None:
            self.send(_wire.Resized(msg.unit, self._nodes(), now, problem))
            return
        if len(self.partitions) == 1:  # one partition binds without counting work: count it
            for t in self.tasks.values():
                if t.partition is not None and not t.work and t.final_state is None:
                    t.work = task_work(t.spec)
                    add_work(t.partition, t.spec, t.work)
        res = Resources(list(msg.nodes), self.resources.source, self.resources.overrides)
        p = Partition(self._next_part, list(msg.nodes),
                      self._next_node, res, msg.launcher or self.default_launcher,
                      self._policy, self.clock)
        self._next_node += len(msg.nodes)
        self._next_part += 1
        p.unit = msg.unit
        p.options = dict(msg.options)
        self.partitions.append(p)
        self.shapes.append(p.shape)
        self._misfits.clear()
        self._rebalance_on = self._may_rebalance
        self.events.record(self.uid, E.PILOT_GROW,
                           f"{msg.unit} {len(msg.nodes)} {len(self._nodes())}", now)
        self.events.record(self.uid, E.PARTITION, json.dumps(
            {"index": p.index, "nodes": p.names, "launcher": p.default_launcher,
             "unit": p.unit}))
        lm = self.launchers.get(p, None)
        self._launchers_changed(self.launchers.poll([lm]))
        self.send(_wire.Resized(msg.unit, self._nodes(), self.clock.now()))
        # what waits elsewhere and fits here starts here now (as many as fill its cores;
        # rebalance steals only from longer queues)
        room = p.cores
        for q in self.partitions:
            if q is p or not q.scheduler.waiting or room <= 0:
                continue
            moved = q.scheduler.take(room, lambda key, shape=p.shape: misfit(
                key[0], key[1], key[2], key[3], shape) is None)
            if moved:
                room -= sum(t.spec.ranks * t.spec.cores_per_rank for t in moved)
                self._move_to(p, moved)

    def _nodes(self) -> list:
        return [n for p in self.partitions for n in p.nodes]

    def _shrink(self, msg: _wire.Shrink) -> None:
        """Drain grown units: no new placements; waiting tasks move; restartable running
        tasks are stopped and queued again elsewhere, service members leave (and are
        replaced elsewhere), the others finish. Resized tells when a unit is gone."""
        now = self.clock.now()
        for unit in msg.units:
            p = next((q for q in self.partitions if q.unit == unit), None)
            if p is None or p.draining:
                self.send(_wire.Resized(unit, self._nodes(), now,
                                        f"no grown unit {unit!r} in this pilot" if p is None
                                        else f"unit {unit!r} is being drained already"))
                continue
            p.draining = True
            self.events.record(self.uid, E.PILOT_DRAIN, f"{unit} {len(p.nodes)}", now)
            self._draining.append(p)
            held = [t for lm in p.launchers.values() for t in lm.held]
            for lm in p.launchers.values():
                lm.held = []
            for t in held:
                t.held = None
            moved = self._evacuate(p, held, f"draining ({unit} leaves the pilot)")
            self._bind(moved, self.clock.mono(), why=f"partition {p.index} drained")
            members, workers, requeue = set(), set(), []
            for t in self.tasks.values():
                if t.partition is not p or not t.running or t.final_state is not None \
                        or t.kill_reason is not None:
                    continue
                if self.services is not None and t.spec.uid in self.services.members:
                    members.add(t.spec.uid)
                elif self.pool is not None and t.spec.uid in self.pool.workers:
                    workers.add(t.spec.uid)
                elif t.spec.restartable:
                    t.kill_reason = (REQUEUE, f"its node left the pilot ({unit})")
                    requeue.append(t)
            if members:
                self.services.drain_node_members(members, f"its node leaves the pilot ({unit})")
            if workers:
                self.pool.retire(workers)
            self._kill(requeue)
        self._check_drained()

    def _requeue(self, t: AgentTask, now: float) -> None:
        """A restartable task stopped by a drain: queued again, as a new arrival."""
        why = t.kill_reason[1]  # type: ignore[index]
        if t.spool >= 0:
            self.runner.read_outputs([t])
        self._again(t, now, E.REQUEUE, why, f"requeued: {why}")
        t.seq = self._seq
        self._seq += 1
        self._drain_check = True  # (it may have been the last thing on its unit)
        self._bind([t], self.clock.mono(), why=why)

    def _again(self, t: AgentTask, now: float, event: str, detail: str, reason: str) -> None:
        """t goes back to waiting (a retry, a requeue): its event, the client's `retry`
        sub-event -- never a final it would have to take back."""
        self.events.record(t.spec.uid, event, detail, now)
        self._updates.append(_wire.Update(t.spec.uid, E.RETRY, now, reason=reason))
        t.reset_for_retry()
        t.timed = False

    def _check_drained(self) -> None:
        """Let go of draining units that nothing runs on any more."""
        for p in list(self._draining):
            if any(t.partition is p and t.final_state is None for t in self.tasks.values()):
                continue
            self._draining.remove(p)
            for lm in p.launchers.values():
                if lm in self.launchers.starting:
                    self.launchers.starting.remove(lm)
                notes = getattr(lm.method, "notes", None)
                fd = notes.fileno() if notes is not None and not notes.closed else None
                if fd is not None and fd in self._notes:
                    del self._notes[fd]
                    self.poller.unregister(fd)
            if p.supervisor is not None and p.supervisor in self.supervisors:
                self.supervisors.remove(p.supervisor)
            self.launchers.stop_all([p])
            self.partitions.remove(p)
            self.shapes = [q.shape for q in self.partitions]
            self._misfits.clear()
            if len(self.partitions) == 1:
                self._rebalance_on = False
            now = self.clock.now()
            nodes = self._nodes()
            self.events.record(self.uid, E.PILOT_SHRINK, f"{p.unit} {len(p.nodes)} {len(nodes)}",
                               now)
            self.send(_wire.Resized(p.unit, nodes, now))  # type: ignore[arg-type]

    def _retry(self, t: AgentTask, now: float) -> None:
        """Run a failed task again after a backoff (0.5 s doubling, at most 30 s). The client
        sees a `retry` sub-event with the reason, never a FAILED it would have to take back."""
        why = t.reason or (f"killed by {signal_name(t.signal)}" if t.signal else f"exit code {t.exit_code}")
        t.attempt += 1
        delay = min(30.0, 0.5 * 2 ** (t.attempt - 1))
        detail = f"attempt {t.attempt + 1} of {t.spec.retries + 1} in {delay:g}s: {why}"[:300]
        self._again(t, now, E.RETRY, detail, detail)
        move(t, BACKOFF)  # out of the queue until its backoff ends (a cancel finalizes it)
        self._timer(now + delay, "backoff_end", t)

    def _release(self, tasks: list[AgentTask]) -> None:
        """Give the tasks' slots back to their partitions' placers (once per task)."""
        held = [t for t in tasks if t.slots is not None and not t.released]
        if not held:
            return
        for t in held:
            t.released = True
        if len(self.partitions) == 1:
            p = self.partitions[0]
            p.scheduler.release([t.key for t in held])
            p.busy_cores -= sum(t.spec.ranks * t.spec.cores_per_rank for t in held)
        else:
            for p, ts in _by_partition(held).items():
                p.scheduler.release([t.key for t in ts])
                p.busy_cores -= sum(t.spec.ranks * t.spec.cores_per_rank for t in ts)
        if self.events.enabled:
            now = self.clock.now()
            self.events.record_many([(now, t.spec.uid, E.UNSCHEDULE, None) for t in held])

    def _final(self, t: AgentTask, state: str, now: float | None = None, ran: bool = False,
               outputs: tuple[str | None, str | None] | None = None) -> None:
        """Report a task's end: output staging, captured output, exit code, signal, reason."""
        now = self.clock.now() if now is None else now
        spec = t.spec
        stdout = stderr = None
        also = None  # a failed task's output staging that failed as well
        if ran:
            self.events.record(spec.uid, S.STAGING_OUTPUT, None, now)
            # a failed task's outputs are staged only when asked (stage_on_error): they are
            # often missing, and the task's own failure is the reason to report
            if spec.output_staging and (state != S.FAILED or spec.stage_on_error):
                try:
                    stage(spec.output_staging, t.cwd or self._cwd_of(spec), outbound=True,
                          sandbox=self.sandbox)
                except Exception as e:
                    if state == S.FAILED:
                        also = f"output staging failed too: {e}"
                    else:
                        state, t.reason = S.FAILED, f"output staging failed: {e}"
            if outputs is None:
                outputs = self.runner.read_outputs([t])[0] if t.spool >= 0 else (None, None)
            stdout, stderr = outputs
            if stdout or stderr:  # journaled with the final: a re-attached client gets them
                self._journal_buf.append(["out", spec.uid, stdout, stderr])
            if state == S.FAILED and t.reason is None:
                t.reason = (f"killed by {signal_name(t.signal)}" if t.signal
                            else f"exit code {t.exit_code}")
                if stderr:
                    t.reason += f"; stderr: {stderr[-REASON_TAIL:].strip()}"
            if also:
                t.reason = f"{t.reason}; {also}" if t.reason else also
            now = self.clock.now()
        elif t.spool >= 0:  # it never ran this time (canceled in its retry backoff)
            self.runner.read_outputs([t])
        t.final_state = state
        move(t, FINAL)
        if t.work and t.partition is not None:
            remove_work(t.partition, t.spec, t.work)
            t.work = 0.0
        self.tasks.pop(spec.uid, None)
        self.events.record(spec.uid, state, t.reason, now)
        self._journal_buf.append(["final", spec.uid, state, t.exit_code if ran else None,
                                  t.signal, t.reason, now])
        self._updates.append(_wire.Update(
            spec.uid, state, now, exit_code=t.exit_code if ran else None,
            signal=t.signal, reason=t.reason, stdout=stdout, stderr=stderr))
        if t.partition is not None and t.partition.draining:
            self._drain_check = True
        if self.pool is not None and spec.uid in self.pool.workers:
            self.pool.worker_exited(t)
        services = self.services
        if services is not None:
            if spec.uid in services.members:
                services.member_exited(t, state, stderr)
            if spec.uid in services.hold_owners:
                services.task_ended(spec.uid)

    def _cancel(self, uids: list[str], reason: str = "canceled by the user",
                running_state: str = S.CANCELED, waiting_state: str = S.CANCELED) -> None:
        if self.pool is not None and self.pool.calls:
            uids = self.pool.cancel(uids, running_state, reason)
        to_kill = []
        for uid in uids:
            t = self.tasks.get(uid)
            if t is None or t.final_state is not None:
                continue
            if t.slots is None:  # still waiting
                if t.partition is not None:
                    t.partition.scheduler.discard(t)
                t.reason = reason
                self._final(t, waiting_state)
            elif t.held is not None:  # placed, waiting for its launcher: it never ran
                t.held.held.remove(t)
                t.held = None
                self._release([t])
                t.reason = reason
                self._final(t, waiting_state)
            elif t.kill_reason is None or t.kill_reason[0] == REQUEUE:
                t.kill_reason = (running_state, reason)
                to_kill.append(t)
        self._kill(to_kill)

    def _kill(self, tasks: list[AgentTask]) -> None:
        if not tasks:
            return
        self.runner.kill(tasks, _signal.SIGTERM)
        # what left the task's process group (setsid) is signalled by its environment mark
        if not self.sim:
            kill_marked(self.sandbox, "PILOTFISH_TASK_UID", {t.spec.uid for t in tasks},
                        _signal.SIGTERM)
        when = self.clock.now() + KILL_GRACE
        for t in tasks:
            self._timer(when, "kill", t)

    def _timer(self, when: float, kind: str, t: AgentTask) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, kind, t, t.gen))

    def _fire_timers(self, now: float) -> None:
        timers = self._timers
        to_term = []
        while timers and timers[0][0] <= now:
            _, _, kind, t, gen = heapq.heappop(timers)
            if kind == "backoff_end":
                if t.final_state is None and self.stopping is None:
                    t.seq = self._seq  # a new arrival: behind what waits already
                    self._seq += 1
                    if t.partition is not None and t.partition.open:
                        t.partition.scheduler.add([t], self.clock.mono())
                    else:
                        self._bind([t], self.clock.mono())
                continue
            if t.final_state is not None or not t.running or gen != t.gen:
                continue
            if kind == "timeout" and t.kill_reason is None:
                t.kill_reason = (S.FAILED, f"timed out after {t.spec.timeout:g}s")
                to_term.append(t)
            elif kind == "kill":
                self.runner.kill([t], _signal.SIGKILL)
        self._kill(to_term)

    def _flush(self, force: bool = False) -> None:
        if self._journal_buf:  # journaled before it is sent: never reported and then lost
            self.journal.write(self._journal_buf)
            self._journal_buf = []
        if self._outbox:
            outbox, self._outbox = self._outbox, []
            for msg in outbox:
                self.sock.send(_wire.encode(msg))
            self._last_sent = self.clock.real_mono()
        if self._updates:
            real = self.clock.real_mono()
            # running through virtual time, one frame per jump would be one per task end:
            # a simulated pilot sends what gathered every SIM_POLL_S of real time instead
            if force or not self.sim or real - self._last_sent >= SIM_POLL_S or \
                    len(self._updates) >= 4096 or self._next_event() == math.inf:
                self.sock.send(_wire.encode(_wire.Updates(self._updates)))
                self._updates = []
                self._last_sent = real
        self.journal.maybe_sync()
        self.events.maybe_flush()

    # -- the end ----------------------------------------------------------------------------
    def _shutdown(self) -> int:
        pilot_state, reason, why = self.stopping  # type: ignore[misc]
        clock = self.clock
        self.events.record(self.uid, E.DRAIN_START, reason)
        if self.pool is not None:
            self.pool.drain(S.FAILED if why == "walltime" else S.CANCELED,
                            "killed: the pilot reached its walltime" if why == "walltime"
                            else f"pilot stopped: {reason}")
        for p in self.partitions:
            for t in p.scheduler.drain_waiting():
                t.reason = f"pilot stopped before the task started: {reason}"
                self._final(t, S.CANCELED)
        running = [t for t in self.tasks.values() if t.final_state is None]
        if why == "walltime":
            task_state, task_reason = S.FAILED, "killed: the pilot reached its walltime"
        else:
            task_state, task_reason = S.CANCELED, f"pilot stopped: {reason}"
        self._cancel([t.spec.uid for t in running], task_reason, running_state=task_state)
        deadline = clock.real_mono() + KILL_GRACE + 2.0
        while self.runner.running and clock.real_mono() < deadline:
            self._reap(block_s=0.1)
            now = clock.now()
            if self._timers and self._timers[0][0] <= now:
                self._fire_timers(now)
            self._flush(force=True)
        self._flush(force=True)
        self.events.record(self.uid, E.DRAIN_STOP)
        self.launchers.stop_all(self.partitions)  # all at once
        # the pilot ends: nothing it started outlives it (setsid escapees included)
        left = kill_marked(self.sandbox) if not self.sim else 0
        if left:
            self.events.record(self.uid, E.LEFTOVERS_KILLED, str(left))
        self._flush(force=True)
        self.journal.close()
        self.events.record(self.uid, E.AGENT_STOP, reason)
        self.sock.send(_wire.encode(_wire.Bye(self.uid, pilot_state, reason, clock.now())))
        self.events.close()
        if self.pool is not None:
            self.pool.close()
        if self.services is not None:
            self.services.close()
        self.sock.close()  # lingers until the bye is out (LINGER)
        self.ctx.term()
        return 0


def _by_partition(tasks: list[AgentTask]) -> dict[Partition, list[AgentTask]]:
    out: dict[Partition, list[AgentTask]] = {}
    for t in tasks:
        out.setdefault(t.partition, []).append(t)
    return out


def _finals_and_outputs(path: str, uids: set[str]) -> tuple[dict[str, list], dict[str, tuple]]:
    """The final records, and the captured (stdout, stderr) journaled with them, of these
    tasks in an agent journal."""
    from .._journal import read_journal

    done: dict[str, list] = {}
    outputs: dict[str, tuple] = {}
    for r in read_journal(path):
        if r and len(r) > 1 and r[1] in uids:
            if r[0] == "final":
                done[r[1]] = r
            elif r[0] == "out" and len(r) >= 4:
                outputs[r[1]] = (r[2], r[3])
    return done, outputs


_SHAPE_FIELDS = ("ranks", "cores_per_rank", "gpus_per_rank", "mem_per_rank")


def misfit_reason(key: tuple, shapes: list, memo: dict | None = None) -> str | None:
    """"field = value: why" when no partition can ever hold a request of this shape (ranks,
    cores, GPUs, memory per rank), else None; memoized per shape (misfit is O(nodes))."""
    r = memo.get(key, memo) if memo is not None else memo
    if r is memo:
        r = misfit_partitions(*key, shapes)
        if memo is not None and all(type(x) is int for x in key):
            memo[key] = r
    if r is None:
        return None
    return f"{r[0]} = {key[_SHAPE_FIELDS.index(r[0])]}: {r[1]}"


def check_spec(spec: _wire.TaskSpec, shapes: list, tasks_dir: str, sandbox: str,
               memo: dict | None = None) -> str | None:
    """Why the agent cannot run this task, or None. The client checked it already; the agent
    checks again because the wire is an API too (a task must never kill the agent).
    shapes: per partition, its nodes' (cores, gpus, mem); memo: misfit per request shape
    (it is O(nodes); the request's numbers are checked by misfit itself the first time)."""
    why = misfit_reason((spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank),
                        shapes, memo)
    if why is not None:
        return why
    if not spec.uid or not spec.executable:
        return "uid and executable must not be empty"
    if "/" in spec.uid or spec.uid in (".", "..") or "\0" in spec.uid:
        return f"uid = {spec.uid!r}: must be one path component (it names the task's directory)"
    if spec.launcher is not None and spec.launcher not in LAUNCHERS:
        return f"launcher = {spec.launcher!r}: not a launch method"
    if spec.timeout is not None and not (0 < spec.timeout < 1e9):
        return f"timeout = {spec.timeout!r}: must be > 0 and finite"
    if spec.duration is not None and not (0 < spec.duration < 1e9):
        return f"duration = {spec.duration!r}: must be > 0 and finite"
    # (NUL bytes and text that is not UTF-8 in argv/env: the core refuses them per spec at
    # spawn, and the task fails alone there -- no per-task scan of every string here)
    if spec.sandbox is not None:
        resolve(tasks_dir, spec.sandbox, sandbox)
    for field in ("stdout", "stderr"):
        v = getattr(spec, field)
        if isinstance(v, str):  # (the common case, captured or discarded, needs no path)
            resolve(task_cwd(spec, spec.uid, tasks_dir), v, sandbox)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m pilotfish.agent AGENT_CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        config = json.load(f)
    logging.basicConfig(filename=os.path.join(config["sandbox"], "agent.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # SIGTERM from the batch system (or a cancel): drain like a shutdown request
    agent = Agent(config)
    _signal.signal(_signal.SIGTERM, lambda *_: _request_stop(agent, "terminated by signal"))
    # An open of a spool file while the output reader holds its write lease (for an instant)
    # signals the lease holder: SIGIO, whose default would kill the agent. (Tasks get it back
    # at its default.)
    _signal.signal(_signal.SIGIO, _signal.SIG_IGN)
    prof_path = os.environ.get("PILOTFISH_AGENT_CPROFILE")  # where the agent's time goes
    if not prof_path:
        return agent.run()
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(agent.run)
    finally:
        prof.dump_stats(prof_path)


def _request_stop(agent: Agent, reason: str) -> None:
    if agent.stopping is None:
        agent.stopping = (S.CANCELED, reason, "signal")
