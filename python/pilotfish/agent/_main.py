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
import os
import signal as _signal
import subprocess
import sys
import time

import zmq

from .. import _wire
from .. import states as S
from .._events import EventWriter
from .._journal import Journal
from .._paths import resolve
from .._util import hostname, raise_nofile_limit
from ..descriptions import LAUNCHERS, misfit
from .containment import become_subreaper, kill_marked
from .executor import REASON_TAIL, AgentTask, TaskRunner, signal_name
from .scheduler import Scheduler
from .stager import stage
from .supervisor import Supervisor

log = logging.getLogger("pilotfish.agent")

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


def parse_slurm_time(text: str) -> float | None:
    """Slurm's time format ("[D-]HH:MM:SS", "MM:SS", "SS") in seconds; None for
    "UNLIMITED", "NOT_SET" or anything else."""
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not text or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return days * 86400.0 + seconds


class Agent:
    def __init__(self, config: dict):
        self.t_start = time.time()
        self.cfg = config
        self.uid: str = config["pilot_uid"]
        self.sandbox: str = config["sandbox"]
        desc = config["description"]
        self.desc = desc
        self.events = EventWriter(os.path.join(self.sandbox, "agent.events"),
                                  enabled=config.get("profile", True))
        self.events.record(self.uid, "bootstrap_start", None, self.t_start)
        raise_nofile_limit()
        # task processes that leave their group or session (setsid) stay our descendants
        self.subreaper = become_subreaper()
        # finals are journaled before they are sent: a resumed client learns what ran here
        self.journal = Journal(os.path.join(self.sandbox, "agent.journal"),
                               enabled=config.get("journal", True))
        self._journal_buf: list[list] = []
        self.heartbeat_s = float(config.get("heartbeat_s", 5.0))
        self.client_timeout = float(config.get("client_timeout", 60.0))

        from .resources import discover  # after the profiler: discovery is part of startup

        self.resources = discover(desc["resource"], desc["nodes"], desc.get("cores_per_node"),
                                  desc.get("gpus_per_node"), desc.get("mem_per_node"))
        # both may run a command (squeue, scontrol): before the executor's reaper starts
        job_left = batch_time_left(desc["resource"])
        from ..launch import default_launcher

        self.default_launcher = desc.get("launcher") or default_launcher(desc["resource"],
                                                                         self.resources)
        nodes = self.resources.nodes
        self.shape = [(n.cores, n.gpus, n.mem) for n in nodes]
        self.events.record(self.uid, "resources_ok",
                           f"{len(nodes)} nodes, {sum(n.cores for n in nodes)} cores, "
                           f"{sum(n.gpus for n in nodes)} gpus ({self.resources.source})")

        from .. import _core

        self.placer = _core.Placer([n.cores for n in nodes], [n.gpus for n in nodes],
                                   [n.mem for n in nodes])
        base_env = dict(os.environ)
        base_env.update(desc.get("environment") or {})
        base_env["PILOTFISH_PILOT_UID"] = self.uid
        base_env["PILOTFISH_SANDBOX"] = self.sandbox
        # the core writes every exit to agent.exits as it reaps it: with the spawn records of
        # the journal, what finished is known even if this process is killed a moment later
        self.core = _core.Executor([f"{k}={v}" for k, v in base_env.items()],
                                   exit_log=os.path.join(self.sandbox, "agent.exits")
                                   if self.journal.enabled else None)
        self.tasks_dir = os.path.join(self.sandbox, "tasks")
        os.makedirs(self.tasks_dir, exist_ok=True)
        self.runner = TaskRunner(self.core, self._launcher_for, self.tasks_dir,
                                 [n.name for n in nodes], profile=self.events.enabled)
        if self.journal.enabled:
            self.runner.on_spawn = lambda items: self.journal.write(
                [["spawn", t.spec.uid, keys, not t.spec.output_staging] for t, keys in items])
        # the policy across shapes (scheduler.py); "fifo" is kept for comparison runs
        self.scheduler = Scheduler(self.placer, capacity=self.shape,
                                   policy=os.environ.get("PILOTFISH_SCHEDULER", "utilization"))
        self.launchers: dict[str, object] = {}
        self.poller = zmq.Poller()
        self.poller.register(self.core.notify_fd, zmq.POLLIN)
        self.supervisor: Supervisor | None = None  # only once a launcher needs watching
        self._notes: dict[int, object] = {}  # rank-notes fd -> its launcher

        self.tasks: dict[str, AgentTask] = {}  # live tasks (queued or running), by uid
        self._seq = 0
        self._updates: list[_wire.Update] = []
        self._timers: list[tuple[float, int, str, AgentTask]] = []  # (when, seq, kind, task)
        self._timer_seq = 0
        self.stopping: tuple[str, str, str] | None = None  # (pilot state, reason, task state)
        self.deadline = self.t_start + float(desc["runtime"])
        if job_left is not None:
            self.deadline = min(self.deadline, time.time() + job_left)
        self.drain_at = self.deadline - drain_margin(float(desc["runtime"]))

        self._launcher_for(None)  # start the default launcher before saying hello

        self.ctx = zmq.Context()
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
        t = time.time()
        self.events.record(self.uid, S.ACTIVE, None, t)
        self._last_heard = self._last_sent = t
        self._hello(t)
        self.events.flush()

    def _hello(self, t: float) -> None:
        self.sock.send(_wire.encode(_wire.Hello(self.uid, self.resources.nodes,
                                                self.default_launcher, t, os.getpid(),
                                                hostname())))

    # -- launchers --------------------------------------------------------------------------
    def _launcher_for(self, name: str | None):
        name = name or self.default_launcher
        lm = self.launchers.get(name)
        if lm is None:
            from ..launch import get_launcher

            self.events.record(self.uid, "launcher_start", name)
            options = dict((self.desc.get("launcher_options") or {}).get(name, {}))
            options.setdefault("dvm_dir", os.path.join(self.sandbox, name))
            lm = get_launcher(name, self.resources, options)
            out, err = (os.path.join(self.sandbox, f"{name}.{x}") for x in ("out", "err"))
            lm.start(lambda argv, env, stdout=out, stderr=err, _n=name: self.runner.spawn_aux(
                _n, argv, env, stdout, stderr))
            self.launchers[name] = lm
            if lm.launch_retries or lm.supervised:
                self._supervise(lm)
            self.events.record(self.uid, "launcher_ready", name)
        return lm

    def _supervise(self, lm) -> None:
        if self.supervisor is None:
            self.supervisor = Supervisor(self)
            self.runner.signal_ranks = self.supervisor.signal_ranks
        self.supervisor.watch(lm)
        notes = getattr(lm, "notes", None)
        if notes is not None:
            self._notes[notes.fileno()] = lm
            self.poller.register(notes.fileno(), zmq.POLLIN)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        poller = self.poller
        poller.register(self.sock, zmq.POLLIN)
        sock = self.sock
        while self.stopping is None:
            timeout = 1000
            if self._timers:
                timeout = max(0, min(timeout, int((self._timers[0][0] - time.time()) * 1000) + 1))
            sup = self.supervisor
            if sup is not None:
                timeout = max(0, min(timeout, int((sup.due - time.monotonic()) * 1000) + 1))
            ready = dict(poller.poll(timeout))
            if sock in ready:
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_frame(frame)
            if self._notes:
                for fd, lm in self._notes.items():
                    if fd in ready:
                        sup.read_notes(lm)  # type: ignore[union-attr]
            self._reap()
            if self.stopping is not None:
                break
            self._schedule()
            now = time.time()
            if self._timers and self._timers[0][0] <= now:
                self._fire_timers(now)
            if sup is not None and time.monotonic() >= sup.due:
                sup.tick()
            self._flush()
            if now >= self.drain_at:
                self.stopping = (S.DONE, "walltime reached", "walltime")
            elif now - self._last_heard > self.client_timeout:
                self.stopping = (S.CANCELED, f"client silent for {now - self._last_heard:.0f}s "
                                 f"(bound {self.client_timeout:g}s)", "client gone")
            elif now - self._last_sent >= self.heartbeat_s:
                self.sock.send(_wire.encode(_wire.Heartbeat(now)))
                self._last_sent = now
        return self._shutdown()

    def _on_frame(self, frame: bytes) -> None:
        """One frame from the client. Nothing in it may stop the agent: a frame that does not
        decode is salvaged task by task (the tasks that do decode run, the others fail with
        the reason); anything else is logged and dropped."""
        self._last_heard = time.time()
        try:
            msg = _wire.decode_to_agent(frame)
        except Exception as e:
            salvaged = _wire.salvage_submit(frame)
            if salvaged is None:
                log.warning("dropped an undecodable frame (%d bytes): %s", len(frame), e)
                self.events.record(self.uid, "bad_frame", str(e)[:200])
                return
            specs, bad = salvaged
            now = time.time()
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

    def _resync(self, uids: list[str]) -> None:
        """A resumed client re-attached: hello again, then what became of each task."""
        now = time.time()
        self.events.record(self.uid, "client_reattach", f"{len(uids)} tasks asked")
        self._flush()  # journal what is pending first
        self._hello(now)
        done, outputs = (_finals_and_outputs(self.journal.path, set(uids)) if uids
                         else ({}, {}))
        ups, missing = [], []
        for uid in uids:
            t = self.tasks.get(uid)
            if t is not None:
                state = S.EXECUTING if t.slots is not None else S.AGENT_SCHEDULING
                ups.append(_wire.Update(uid, state, now, slots=t.slots))
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
        self._last_sent = time.time()

    def _accept(self, specs: list[_wire.TaskSpec]) -> None:
        now = time.time()
        events = self.events
        ready = []
        profile = events.enabled
        for spec in specs:
            t = AgentTask(spec, self._seq)
            self._seq += 1
            if profile:
                events.record(spec.uid, S.AGENT_SCHEDULING, None, now)
            if spec.uid in self.tasks:  # the live one keeps running; this copy fails alone
                events.record(spec.uid, S.FAILED, "a task with this uid is already live", now)
                continue
            try:
                problem = check_spec(spec, self.shape, self.tasks_dir, self.sandbox)
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
        self.scheduler.add(ready)

    def _cwd_of(self, spec) -> str:
        if not spec.sandbox:
            return self.tasks_dir
        return spec.sandbox if os.path.isabs(spec.sandbox) else os.path.join(self.tasks_dir, spec.sandbox)

    def _schedule(self) -> None:
        placed = self.scheduler.schedule()
        if self.scheduler.unplaceable:
            now = time.time()
            for t, why in self.scheduler.take_unplaceable():
                t.reason = why
                self._final(t, S.FAILED, now)
        if not placed:
            return
        now = time.time()
        events = []
        profile = self.events.enabled  # off: not even the event tuples are built
        to_slots = self.runner.to_slots
        ups = self._updates
        launching = []
        for t, raw in placed:
            t.slots = to_slots(raw)
            uid = t.spec.uid
            if profile:
                events += ((now, uid, "schedule_ok", None), (now, uid, S.EXECUTING, None),
                           (now, uid, "exec_start", None))
            ups.append(_wire.Update(uid, S.EXECUTING, now, slots=t.slots))
            launching.append(t)
        self._spawn(launching, events)
        for t in launching:
            if t.spec.timeout and t.running:
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
        if self.supervisor is not None:
            self.supervisor.launched(launching)

    def relaunch(self, tasks: list[AgentTask]) -> None:
        """Launch these tasks again on the slots they hold (the supervisor's retries)."""
        for t in tasks:
            t.procs = []
            t.running = 0
            t.exit_code = None
            t.signal = None
            t.reason = None
        now = time.time()
        self._spawn(tasks, [(now, t.spec.uid, "exec_start", None) for t in tasks]
                    if self.events.enabled else [])

    def _reap(self, block_s: float | None = None) -> None:
        finished, events, aux_exits = self.runner.reap(block_s)
        self.events.record_many(events)
        for name, pid, code, sig in aux_exits:
            log.info("%s (pid %s) exited (code %s, signal %s)", name, pid, code, sig)
            if self.supervisor is not None:
                self.supervisor.daemon_exited(pid, code, sig)
        done = [t for t in finished if t.final_state is None]
        if done and self.supervisor is not None:
            done = self.supervisor.exited(done)
        if not done:
            return
        killed = {t.spec.uid for t in done if t.kill_reason is not None}
        if killed:  # stopped for good: so is whatever it started outside its group
            kill_marked(self.sandbox, "PILOTFISH_TASK_UID", killed, sig=_signal.SIGKILL)
        self._release(done)
        now = time.time()
        ran = [t for t in done if t.spool >= 0]  # their outputs, in one call to the core
        outputs = dict(zip(ran, self.runner.read_outputs(ran))) if ran else {}
        for t in done:
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

    def _retry(self, t: AgentTask, now: float) -> None:
        """Run a failed task again after a backoff (0.5 s doubling, at most 30 s). The client
        sees a `retry` sub-event with the reason, never a FAILED it would have to take back."""
        why = t.reason or (f"killed by {signal_name(t.signal)}" if t.signal else f"exit code {t.exit_code}")
        t.attempt += 1
        delay = min(30.0, 0.5 * 2 ** (t.attempt - 1))
        detail = f"attempt {t.attempt + 1} of {t.spec.retries + 1} in {delay:g}s: {why}"[:300]
        self.events.record(t.spec.uid, "retry", detail, now)
        self._updates.append(_wire.Update(t.spec.uid, "retry", now, reason=detail))
        t.reset_for_retry()
        t.taken = True  # out of the queue until its backoff ends (a cancel finalizes it)
        self._timer(now + delay, "retry", t)

    def _release(self, tasks: list[AgentTask]) -> None:
        """Give the tasks' slots back to the placer (once per task)."""
        held = [t for t in tasks if t.slots is not None and not t.released]
        if not held:
            return
        for t in held:
            t.released = True
        self.scheduler.release([t.key for t in held])
        if self.events.enabled:
            now = time.time()
            self.events.record_many([(now, t.spec.uid, "unschedule", None) for t in held])

    def _final(self, t: AgentTask, state: str, now: float | None = None, ran: bool = False,
               outputs: tuple[str | None, str | None] | None = None) -> None:
        """Report a task's end: output staging, captured output, exit code, signal, reason."""
        now = time.time() if now is None else now
        spec = t.spec
        stdout = stderr = None
        if ran:
            self.events.record(spec.uid, S.STAGING_OUTPUT, None, now)
            if spec.output_staging:
                try:
                    stage(spec.output_staging, t.cwd or self.tasks_dir, outbound=True,
                          sandbox=self.sandbox)
                except Exception as e:
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
            now = time.time()
        elif t.spool >= 0:  # it never ran this time (canceled in its retry backoff)
            self.runner.read_outputs([t])
        t.final_state = state
        self.tasks.pop(spec.uid, None)
        self.events.record(spec.uid, state, t.reason, now)
        self._journal_buf.append(["final", spec.uid, state, t.exit_code if ran else None,
                                  t.signal, t.reason, now])
        self._updates.append(_wire.Update(
            spec.uid, state, now, exit_code=t.exit_code if ran else None,
            signal=t.signal, reason=t.reason, stdout=stdout, stderr=stderr))

    def _cancel(self, uids: list[str], reason: str = "canceled by the user",
                running_state: str = S.CANCELED, waiting_state: str = S.CANCELED) -> None:
        to_kill = []
        for uid in uids:
            t = self.tasks.get(uid)
            if t is None or t.final_state is not None:
                continue
            if t.slots is None:  # still waiting
                self.scheduler.discard(t)
                t.reason = reason
                self._final(t, waiting_state)
            elif t.kill_reason is None:
                t.kill_reason = (running_state, reason)
                to_kill.append(t)
        self._kill(to_kill)

    def _kill(self, tasks: list[AgentTask]) -> None:
        if not tasks:
            return
        self.runner.kill(tasks, _signal.SIGTERM)
        # what left the task's process group (setsid) is signalled by its environment mark
        kill_marked(self.sandbox, "PILOTFISH_TASK_UID", {t.spec.uid for t in tasks},
                    _signal.SIGTERM)
        when = time.time() + KILL_GRACE
        for t in tasks:
            self._timer(when, "kill", t)

    def _timer(self, when: float, kind: str, t: AgentTask) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, kind, t))

    def _fire_timers(self, now: float) -> None:
        timers = self._timers
        to_term = []
        while timers and timers[0][0] <= now:
            _, _, kind, t = heapq.heappop(timers)
            if kind == "retry":
                if t.final_state is None and self.stopping is None:
                    t.taken = False
                    t.seq = self._seq  # a new arrival: behind what waits already
                    self._seq += 1
                    self.scheduler.add([t])
                continue
            if t.final_state is not None or not t.running:
                continue
            if kind == "timeout" and t.kill_reason is None:
                t.kill_reason = (S.FAILED, f"timed out after {t.spec.timeout:g}s")
                to_term.append(t)
            elif kind == "kill":
                self.runner.kill([t], _signal.SIGKILL)
        self._kill(to_term)

    def _flush(self) -> None:
        if self._journal_buf:  # journaled before it is sent: never reported and then lost
            self.journal.write(self._journal_buf)
            self._journal_buf = []
        if self._updates:
            self.sock.send(_wire.encode(_wire.Updates(self._updates)))
            self._updates = []
            self._last_sent = time.time()
        self.journal.maybe_sync()
        self.events.maybe_flush()

    # -- the end ----------------------------------------------------------------------------
    def _shutdown(self) -> int:
        pilot_state, reason, why = self.stopping  # type: ignore[misc]
        self.events.record(self.uid, "drain_start", reason)
        for t in self.scheduler.drain_waiting():
            t.reason = f"pilot stopped before the task started: {reason}"
            self._final(t, S.CANCELED)
        running = [t for t in self.tasks.values() if t.final_state is None]
        if why == "walltime":
            task_state, task_reason = S.FAILED, "killed: the pilot reached its walltime"
        else:
            task_state, task_reason = S.CANCELED, f"pilot stopped: {reason}"
        self._cancel([t.spec.uid for t in running], task_reason, running_state=task_state)
        deadline = time.time() + KILL_GRACE + 2.0
        while self.runner.running and time.time() < deadline:
            self._reap(block_s=0.1)
            now = time.time()
            if self._timers and self._timers[0][0] <= now:
                self._fire_timers(now)
            self._flush()
        self._flush()
        self.events.record(self.uid, "drain_stop")
        for name, lm in self.launchers.items():
            try:
                lm.stop()
            except Exception:
                log.exception("stopping launcher %s", name)
            self.events.record(self.uid, "launcher_stop", name)
        # the pilot ends: nothing it started outlives it (setsid escapees included)
        left = kill_marked(self.sandbox)
        if left:
            self.events.record(self.uid, "leftovers_killed", str(left))
        self._flush()
        self.journal.close()
        self.events.record(self.uid, "agent_stop", reason)
        self.sock.send(_wire.encode(_wire.Bye(self.uid, pilot_state, reason, time.time())))
        self.events.close()
        self.sock.close()  # lingers until the bye is out (LINGER)
        self.ctx.term()
        return 0


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


def check_spec(spec: _wire.TaskSpec, shape: list, tasks_dir: str, sandbox: str) -> str | None:
    """Why the agent cannot run this task, or None. The client checked it already; the agent
    checks again because the wire is an API too (a task must never kill the agent)."""
    r = misfit(spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank, shape)
    if r is not None:
        return f"{r[0]} = {getattr(spec, r[0])}: {r[1]}"
    if not spec.uid or not spec.executable:
        return "uid and executable must not be empty"
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
        if isinstance(v, str):
            resolve(tasks_dir, v, sandbox)
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
