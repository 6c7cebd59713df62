"""The task table: the agent's live tasks and everything that happens to them -- accept, bind,
place, launch, reap, final, cancel, kill, retry, requeue, and their timers. A task's state
changes only through tasks.move(), called from here and from the scheduler's placement.

The table is also the *host* (ports.Host) of the rooms that make tasks of their own or watch
them: the function pool (its workers), the service registry (its members), the launch
supervisors (relaunches) and the elastic part (drains). They are given the table, never the
agent's loop (agent/_main.py), and told of every task's end (ports.TaskEnded).

Apart, as functions of the table: what happens to a partition whose launcher changed
(partition_close.py); its timers' heap is timers.py, a function call's end reports.py.

In batches throughout: a round's placements are launched in one spawn call, its exits
reaped in one call, its events recorded in one append, its updates sent in one frame (by the
loop, from reports.Reports).
"""

from __future__ import annotations

import logging
import signal as _signal
from typing import Any

import msgspec

from .. import _events as E
from .. import _wire
from .. import states as S
from .._journal import final_record, out_record
from .._inert import one_line
from .._mpi import stderr_reason
from .._paths import task_cwd
from .._staging import stage
from ..launch.mpi_route import pmix_routes
from ..launch.mpi_route import route as mpi_route
from .checks import check_spec, misfit_reason
from .containment import kill_marked
from .task_runner import REASON_TAIL, signal_name
from . import partition_close
from .partition import (
    DEGRADED,
    READY,
    STARTING,
    Partition,
    add_work,
    bind,
    by_partition,
    remove_work,
    task_work,
    waiting,
)
from .ports import CallPool, StopWhy, TaskEnded, Waiting
from .reports import Reports
from .tasks import BACKOFF, FINAL, HELD, RUNNING, AgentTask, move
from .timers import Timer, Timers

log = logging.getLogger("pilotfish.agent")

REQUEUE = E.REQUEUE  # kill_reason state of a restartable task stopped for a drain: queued again
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL for timeouts, cancels, shutdown


class TaskTable:
    """Live tasks by uid, and what is done to them. Implements ports.Host."""

    def __init__(
        self,
        *,
        uid: str,
        sandbox: str,
        tasks_dir: str,
        desc: dict,
        resources: Any,
        ctx: Any,
        clock: Any,
        events: Any,
        reports: Reports,
        partitions: list[Partition],
        sim: bool,
        mpi_launcher: str | None | bool,
    ):
        """The runner and the launchers come after (use()): the service registry, a room of
        this table, must exist before the runner (its address is in every task's
        environment, which the core is made with)."""
        self.uid = uid
        self.sandbox = sandbox
        self.tasks_dir = tasks_dir
        self.desc = desc
        self.resources = resources
        self.ctx = ctx
        self.clock = clock
        self.events = events
        self.reports = reports
        self.runner: Any = None
        self.launchers: Any = None
        # where a single-node task that names no launcher goes, if not to its partition's
        # default: "nodes" on a pilot with node executors (node_link.py); its link, for exits
        self.single_node_launcher: str | None = None
        # a multi-rank task of the MPICH ABI that names no launcher goes to "pmi"
        # (pmi/worlds.routes: a real pilot whose other nodes have executors)
        self.pmi_route = False
        self.pmix_route: bool | None = None  # ... of Open MPI to "pmix" (at first need)
        self.nodes: Any = None
        self.partitions = partitions  # (the agent's list: elastic.py grows and shrinks it)
        self.sim = sim
        # a multi-rank task on a local pilot that names no launcher anywhere gets an installed
        # MPI launcher (MPI rank variables, one launch per task); looked up on first need
        self._mpi_launcher = mpi_launcher
        self.tasks: dict[str, AgentTask] = {}  # live tasks (queued or running), by uid
        self.seq = 0
        self.misfits: dict[tuple, object] = {}  # request shape -> misfit (check_spec memo)
        # (when, seq, kind, task, its gen then): a timer set for an earlier run is skipped
        self.timers = Timers()
        self._stopping: tuple[str, str, StopWhy] | None = None  # (pilot state, reason, why)
        self.drain_check = False  # something of a draining unit ended: is it empty now?
        self.calls: CallPool | None = None  # the function pool, once it runs
        self.ended: list[TaskEnded] = []  # told of every task's end

    def use(self, runner: Any, launchers: Any) -> None:
        """The runner (ports.Runner) that starts tasks, the launcher instances they use."""
        self.runner = runner
        self.launchers = launchers
        runner.signal_ranks = self._signal_ranks

    # -- the host (ports.Host) ---------------------------------------------------------------
    @property
    def stopping(self) -> tuple[str, str, StopWhy] | None:
        return self._stopping

    def stop(self, pilot_state: str, reason: str, why: StopWhy) -> None:
        """The pilot stops (the first reason given wins)."""
        if self._stopping is None:
            self._stopping = (pilot_state, reason, why)

    @property
    def shapes(self) -> list:
        return [p.shape for p in self.partitions]

    def misfit(self, shape: tuple) -> str | None:
        return misfit_reason(shape, self.shapes, self.misfits)

    def check(self, spec: _wire.TaskSpec) -> str | None:
        """Why this task could not run here, or None (checks.check_spec)."""
        return check_spec(spec, self.shapes, self.tasks_dir, self.sandbox, self.misfits)

    def send(self, msg: Any) -> None:
        self.reports.send(msg)

    def signal(self, tasks: list[AgentTask], sig: int) -> None:
        self.runner.kill(tasks, sig)

    def waiting_for(self, partition: Partition) -> Waiting:
        """What waits in the partition's queue and what is free (partition.waiting)."""
        return waiting(partition)

    def call_final(self, uid: str, state: str, *args: Any, **kw: Any) -> None:
        """A function call's end (functions.py; ports.Host.call_final's arguments): its
        events, journal record and update (reports.Reports.call_final)."""
        self.reports.call_final(self.events, uid, state, *args, **kw)

    # -- arrival -----------------------------------------------------------------------------
    def _with_mpi_launcher(self, spec: _wire.TaskSpec) -> _wire.TaskSpec:
        if self._mpi_launcher is None:
            from ..launch import installed_mpi_launcher

            self._mpi_launcher = installed_mpi_launcher() or False
            self.events.record(self.uid, E.MPI_LAUNCHER, self._mpi_launcher or "none")
        if not self._mpi_launcher:
            return spec
        return msgspec.structs.replace(spec, launcher=self._mpi_launcher)

    def accept(self, specs: list[_wire.TaskSpec]) -> None:
        """Tasks (not function calls) from the client or a hosted room: checked again (the
        wire is an API too), input staged, queued; what cannot run fails alone."""
        now = self.clock.now()
        events = self.events
        profile = events.enabled
        shapes = self.shapes
        ready = []
        for spec in specs:
            t = AgentTask(spec, self.seq)
            self.seq += 1
            if profile:
                events.record(spec.uid, S.AGENT_SCHEDULING, None, now)
            if spec.uid in self.tasks:  # the live one keeps running; this copy fails alone
                events.record(spec.uid, S.FAILED, "a task with this uid is already live", now)
                continue
            try:
                if spec.ranks > 1 and spec.launcher is None and not self.sim:
                    # one world per MPI task: its MPI's launcher (launch/mpi_route.py)
                    if self.pmix_route is None:  # (pmix_routes: once the executors are known)
                        self.pmix_route = pmix_routes(self.desc, self.resources, self.nodes)
                    how = (self.pmi_route, self.desc.get("launcher"), self.pmix_route)
                    spec = t.spec = mpi_route(spec, self.cwd_of(spec), *how)
                if spec.ranks > 1 and spec.launcher is None and self._mpi_launcher is not False:
                    spec = t.spec = self._with_mpi_launcher(spec)
                problem = check_spec(spec, shapes, self.tasks_dir, self.sandbox, self.misfits)
                if problem is None and self.sim and spec.duration is None:
                    problem = (
                        "duration = None: required on a simulated pilot (a task runs "
                        "for its duration)"
                    )
                if problem is None and spec.input_staging:
                    try:
                        stage(spec.input_staging, self.cwd_of(spec), sandbox=self.sandbox)
                    except (OSError, ValueError) as e:
                        problem = f"input staging failed: {e}"
            except Exception as e:  # noqa: BLE001 -- whatever the spec holds, it fails alone
                problem = f"cannot handle this task: {type(e).__name__}: {e}"
            if problem is not None:
                t.reason = problem
                self.final(t, S.FAILED, now)
                continue
            self.tasks[spec.uid] = t
            self.reports.update(_wire.Update(spec.uid, S.AGENT_SCHEDULING, now))
            ready.append(t)
        self.bind(ready, self.clock.mono())

    def bind(self, tasks: list[AgentTask], mono: float, why: str | None = None) -> None:
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
            bound = bind(parts, t.spec, work)
            if bound is None:
                t.partition = None
                t.reason = (
                    (f"{why}; " if why else "")
                    + "no open partition can hold it: "
                    + "; ".join(f"p{q.index}: {q.closed_reason or 'too small'}" for q in parts)
                )[:1000]
                self.final(t, S.FAILED)
                continue
            t.partition = bound
            t.work = work
            add_work(bound, t.spec, work)
            by_part.setdefault(bound, []).append(t)
        for p, ts in by_part.items():
            p.scheduler.add(ts, mono)

    def move_to(self, p: Partition, tasks: list) -> None:
        """Waiting tasks taken from other partitions' queues join p's."""
        for t in tasks:
            remove_work(t.partition, t.spec, t.work)
            t.partition, t.work = p, task_work(t.spec)
            add_work(p, t.spec, t.work)
        p.scheduler.add(tasks, self.clock.mono())

    def cwd_of(self, spec) -> str:
        return task_cwd(spec, spec.uid, self.tasks_dir)

    # -- placing and launching ---------------------------------------------------------------
    def schedule(self) -> None:
        launching = []
        events = []
        profile = self.events.enabled  # off: not even the event tuples are built
        mono = None
        left = False  # a round left tasks waiting
        for p in self.partitions:
            sched = p.scheduler
            if not ((sched.waiting and sched.dirty) or sched.unplaceable) or not p.open:
                continue
            if mono is None:
                mono = self.clock.mono()
            placed = sched.schedule(mono)
            left = left or bool(sched.waiting)
            if sched.plan_notes:
                for note in sched.plan_report(p.index):  # planning outcomes, as JSON
                    self.events.record(self.uid, E.QUEUE_PLAN, note)
            if sched.unplaceable:
                now = self.clock.now()
                for t, why in sched.take_unplaceable():
                    t.reason = why
                    self.final(t, S.FAILED, now)
            if not placed:
                continue
            now = self.clock.now()
            to_slots = p.to_slots
            first = p.first
            busy = 0
            for t, raw in placed:
                t.slots = to_slots(raw)
                s = t.spec
                busy += s.ranks * s.cores_per_rank
                if profile:  # where: "<ranks>x<cores>/<gpus> @<node index per rank>"
                    events.append(
                        (
                            now,
                            s.uid,
                            E.SCHEDULE_OK,
                            f"{s.ranks}x{s.cores_per_rank}/{s.gpus_per_rank} @"
                            + ",".join([str(first + r[0]) for r in raw]),
                        )
                    )
                launching.append(t)
            p.busy_cores += busy
        if launching:
            self.launch(launching, events)
        elif events:
            self.events.record_many(events)
        if left and self.calls is not None:
            self.calls.give_way()  # (idle function workers, for what the rounds left waiting)

    def launch(self, tasks: list[AgentTask], events: list, relaunch: bool = False) -> None:
        """Spawn placed tasks whose launcher is ready; the others wait for theirs (held, on
        their slots); those that cannot be spawned fail alone. A task is EXECUTING (update
        with its slots and partition) when it is launched, not while it is held: it may
        still move to another partition then."""
        go = []
        get = self.launchers.get
        profile = self.events.enabled
        ups = self.reports.updates
        now = self.clock.now()
        single = self.single_node_launcher
        for t in tasks:
            name = t.spec.launcher
            if (
                name is None
                and single is not None
                and t.slots
                and all(s.node == t.slots[0].node for s in t.slots)
            ):
                name = single
            lm = get(t.partition, name)
            if lm.state == READY:
                t.lm = lm.method
                move(t, RUNNING)
                go.append(t)
                if relaunch or (t.launch is not None and t.launch.attempt):
                    continue  # the client knows it runs; this is the supervisor's retry
                uid = t.spec.uid
                if profile:
                    events += (
                        (now, uid, S.EXECUTING, None),
                        (now, uid, E.EXEC_START, lm.name),
                    )
                ups.append(
                    _wire.Update(
                        uid,
                        S.EXECUTING,
                        now,
                        slots=t.slots,
                        partition=t.partition.index,
                        launcher=lm.name,
                    )
                )
            else:  # starting (or degraded): it waits; failed: launchers_changed judges it
                lm.held.append(t)
                t.held = lm
                move(t, HELD)
                if lm.state not in (STARTING, DEGRADED):
                    self.launchers_changed([lm])
        if not go:
            self.events.record_many(events)
            return
        self._spawn(go, events)
        now = self.clock.now()
        for t in go:
            if t.spec.timeout and t.running and not t.timed:
                t.timed = True
                self.timer(now + t.spec.timeout, Timer.TIMEOUT, t)

    def _spawn(self, launching: list[AgentTask], events: list) -> None:
        """Spawn placed tasks; those that cannot be spawned fail alone."""
        failed, spawn_events = self.runner.launch(launching)
        events.extend(spawn_events)
        self.events.record_many(events)
        if failed:
            self.release(failed)
            now = self.clock.now()
            for t in failed:
                started = t.procs or t.rkeys  # (ranks here, or on node executors)
                if (
                    not started
                    and t.kill_reason is not None
                    and t.kill_reason[0] == REQUEUE
                    and self._stopping is None
                ):
                    t.reason = None
                    self.requeue(t, now)  # (a node executor's node was lost: it never ran)
                elif not started:
                    self.final(t, S.FAILED)
                elif t.kill_reason is None or t.kill_reason[0] != REQUEUE:
                    # other ranks were killed; finalized (or queued again, when a node of
                    # theirs was lost before they started) once they are reaped
                    t.kill_reason = (S.FAILED, t.reason or "launch failed")
        if any(p.supervisor is not None for p in self.partitions):
            for p, ts in by_partition(launching).items():
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
        self.launch(
            tasks,
            [(now, t.spec.uid, E.EXEC_START, None) for t in tasks] if self.events.enabled else [],
            relaunch=True,
        )

    def _signal_ranks(self, t: AgentTask, sig: int) -> None:
        sup = t.partition.supervisor if t.partition is not None else None
        if sup is not None:
            sup.signal_ranks(t, sig)

    def launchers_changed(self, changed: list) -> None:
        """Launcher instances that became ready or failed (partition_close.py)."""
        partition_close.launchers_changed(self, changed)

    # -- exits ---------------------------------------------------------------------------------
    def reap(self, block_s: float | None = None) -> None:
        finished, events, aux_exits = self.runner.reap(block_s)
        self.events.record_many(events)
        supervisors = [p.supervisor for p in self.partitions if p.supervisor is not None]
        for name, pid, code, sig in aux_exits:
            log.info("%s (pid %s) exited (code %s, signal %s)", name, pid, code, sig)
            if self.nodes is not None and name.startswith("nodes "):
                self.nodes.aux_exited(code, sig)
            for sup in supervisors:
                sup.daemon_exited(pid, code, sig)
        done = [t for t in finished if t.final_state is None]
        if done and supervisors:
            kept: list = []
            for p, ts in by_partition(done).items():
                kept += p.supervisor.exited(ts) if p.supervisor is not None else ts
            done = kept
        if not done:
            return
        killed = {t.spec.uid for t in done if t.kill_reason is not None and not t.rkeys}
        if killed and not self.sim:  # stopped for good: so is what it started outside its group
            kill_marked(self.sandbox, "PILOTFISH_TASK_UID", killed, sig=_signal.SIGKILL)
        if self.nodes is not None:  # (on other hosts: by their node executors)
            away: dict[str, set[str]] = {}
            for t in done:
                if t.kill_reason is not None and t.rkeys and t.slots:
                    away.setdefault(t.slots[0].node, set()).add(t.spec.uid)
            if away:
                self.nodes.kill_marked(away)
        self.release(done)
        now = self.clock.now()
        ran = [t for t in done if t.spool >= 0 or t.rkeys]  # their outputs, in one call
        outputs = dict(zip(ran, self.runner.read_outputs(ran))) if ran else {}
        stopping = self._stopping
        for t in done:
            if t.kill_reason is not None and t.kill_reason[0] == REQUEUE:
                if stopping is None:
                    self.requeue(t, now)
                    continue
                t.kill_reason = (S.CANCELED, f"pilot stopped: {stopping[1]}")
            if t.kill_reason is not None:
                state, t.reason = t.kill_reason
            elif t.exit_code == 0:
                state = S.DONE
            else:
                state = S.FAILED
            if (
                state == S.FAILED
                and t.attempt < t.spec.retries
                and stopping is None
                and (
                    t.kill_reason is None
                    or t.kill_reason[1].startswith(("timed out", "launch failed"))
                )
            ):
                self.retry(t, now)
                continue
            self.final(t, state, now, ran=True, outputs=outputs.get(t, (None, None)))

    def release(self, tasks: list[AgentTask]) -> None:
        """Give the tasks' slots back to their partitions' placers (once per task)."""
        held = [t for t in tasks if t.slots is not None and not t.released]
        if not held:
            return
        for t in held:
            t.released = True
        mono = self.clock.mono()  # (policy "plan" learns how long each held its slots)
        if len(self.partitions) == 1:
            p = self.partitions[0]
            p.scheduler.release([t.key for t in held], mono)
            p.busy_cores -= sum(t.spec.ranks * t.spec.cores_per_rank for t in held)
        else:
            for p, ts in by_partition(held).items():
                p.scheduler.release([t.key for t in ts], mono)
                p.busy_cores -= sum(t.spec.ranks * t.spec.cores_per_rank for t in ts)
        if self.events.enabled:
            now = self.clock.now()
            self.events.record_many([(now, t.spec.uid, E.UNSCHEDULE, None) for t in held])

    # -- again -----------------------------------------------------------------------------
    def requeue(self, t: AgentTask, now: float) -> None:
        """A restartable task stopped by a drain: queued again, as a new arrival."""
        why = t.kill_reason[1]  # type: ignore[index]  # a drained task has a kill reason
        if t.spool >= 0:
            self.runner.read_outputs([t])
        self._again(t, now, E.REQUEUE, why, f"requeued: {why}")
        t.seq = self.seq
        self.seq += 1
        self.drain_check = True  # (it may have been the last thing on its unit)
        self.bind([t], self.clock.mono(), why=why)

    def retry(self, t: AgentTask, now: float) -> None:
        """Run a failed task again after a backoff (0.5 s doubling, at most 30 s). The client
        sees a `retry` sub-event with the reason, never a FAILED it would have to take back."""
        why = one_line(t.reason) or (
            f"killed by {signal_name(t.signal)}" if t.signal else f"exit code {t.exit_code}"
        )
        t.attempt += 1
        delay = min(30.0, 0.5 * 2 ** (t.attempt - 1))
        detail = f"attempt {t.attempt + 1} of {t.spec.retries + 1} in {delay:g}s: {why}"[:300]
        self._again(t, now, E.RETRY, detail, detail)
        move(t, BACKOFF)  # out of the queue until its backoff ends (a cancel finalizes it)
        self.timer(now + delay, Timer.BACKOFF_END, t)

    def _again(self, t: AgentTask, now: float, event: str, detail: str, reason: str) -> None:
        """t goes back to waiting (a retry, a requeue): its event, the client's `retry`
        sub-event -- never a final it would have to take back."""
        self.events.record(t.spec.uid, event, detail, now)
        self.reports.update(_wire.Update(t.spec.uid, E.RETRY, now, reason=reason))
        t.reset_for_retry()
        t.timed = False

    # -- the end -------------------------------------------------------------------------------
    def final(
        self,
        t: AgentTask,
        state: str,
        now: float | None = None,
        ran: bool = False,
        outputs: tuple[str | None, str | None] | None = None,
    ) -> None:
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
                    stage(
                        spec.output_staging,
                        t.cwd or self.cwd_of(spec),
                        outbound=True,
                        sandbox=self.sandbox,
                    )
                except Exception as e:  # noqa: BLE001 -- staging out fails: the task says why
                    if state == S.FAILED:
                        also = f"output staging failed too: {e}"
                    else:
                        state, t.reason = S.FAILED, f"output staging failed: {e}"
            if outputs is None:
                outputs = self.runner.read_outputs([t])[0] if t.spool >= 0 else (None, None)
            stdout, stderr = outputs
            if stdout or stderr:  # journaled with the final: a re-attached client gets them
                self.reports.journal.append(out_record(spec.uid, stdout, stderr))
            if state == S.FAILED and t.reason is None:
                t.reason = (
                    f"killed by {signal_name(t.signal)}" if t.signal else f"exit code {t.exit_code}"
                )
                if stderr:  # (from a line's start; and the fix of an MPI mismatch: _mpi.py)
                    t.reason += stderr_reason(stderr, REASON_TAIL)
            if also:
                t.reason = f"{t.reason}; {also}" if t.reason else also
            now = self.clock.now()
        elif t.spool >= 0:  # it never ran this time (canceled in its retry backoff)
            self.runner.read_outputs([t])
        t.reason = one_line(t.reason)  # (what a task or peer said: escaped, bounded: _inert.py)
        t.final_state = state
        move(t, FINAL)
        if t.work and t.partition is not None:
            remove_work(t.partition, t.spec, t.work)
            t.work = 0.0
        self.tasks.pop(spec.uid, None)
        self.events.record(spec.uid, state, t.reason, now)
        self.reports.journal.append(
            final_record(spec.uid, state, t.exit_code if ran else None, t.signal, t.reason, now)
        )
        self.reports.update(
            _wire.Update(
                spec.uid,
                state,
                now,
                exit_code=t.exit_code if ran else None,
                signal=t.signal,
                reason=t.reason,
                stdout=stdout,
                stderr=stderr,
            )
        )
        if t.partition is not None and t.partition.draining:
            self.drain_check = True
        for listener in self.ended:
            listener.task_ended(t, state, stderr)

    def cancel(
        self,
        uids: list[str],
        reason: str = "canceled by the user",
        running_state: str = S.CANCELED,
        waiting_state: str = S.CANCELED,
    ) -> None:
        if self.calls is not None and self.calls.calls:
            uids = self.calls.cancel(uids, running_state, reason)
        to_kill = []
        for uid in uids:
            t = self.tasks.get(uid)
            if t is None or t.final_state is not None:
                continue
            if t.slots is None:  # still waiting
                if t.partition is not None:
                    t.partition.scheduler.discard(t)
                t.reason = reason
                self.final(t, waiting_state)
            elif t.held is not None:  # placed, waiting for its launcher: it never ran
                t.held.held.remove(t)
                t.held = None
                self.release([t])
                t.reason = reason
                self.final(t, waiting_state)
            elif t.kill_reason is None or t.kill_reason[0] == REQUEUE:
                t.kill_reason = (running_state, reason)
                to_kill.append(t)
        self.kill(to_kill)

    def kill(self, tasks: list[AgentTask]) -> None:
        """SIGTERM now, SIGKILL after KILL_GRACE (a timer)."""
        if not tasks:
            return
        self.runner.kill(tasks, _signal.SIGTERM)
        # what left the task's process group (setsid) is signalled by its environment mark
        if not self.sim:
            kill_marked(
                self.sandbox, "PILOTFISH_TASK_UID", {t.spec.uid for t in tasks}, _signal.SIGTERM
            )
        when = self.clock.now() + KILL_GRACE
        for t in tasks:
            self.timer(when, Timer.KILL, t)

    def stop_all(self, task_state: str, task_reason: str, waiting_reason: str) -> None:
        """The pilot's end: what waits is canceled, what runs is stopped (task_state)."""
        for p in self.partitions:
            for t in p.scheduler.drain_waiting():
                t.reason = waiting_reason
                self.final(t, S.CANCELED)
        running = [t.spec.uid for t in self.tasks.values() if t.final_state is None]
        self.cancel(running, task_reason, running_state=task_state)

    # -- timers ---------------------------------------------------------------------------------
    def timer(self, when: float, kind: Timer, t: AgentTask) -> None:
        self.timers.add(when, kind, t)

    @property
    def next_timer(self) -> float:
        """When the next timer is due (the agent's clock.now() time), inf if none is set."""
        return self.timers.next

    def fire_timers(self, now: float) -> None:
        to_term = []
        for kind, t, gen in self.timers.due(now):
            if kind is Timer.BACKOFF_END:
                if t.final_state is None and self._stopping is None:
                    t.seq = self.seq  # a new arrival: behind what waits already
                    self.seq += 1
                    if t.partition is not None and t.partition.open:
                        t.partition.scheduler.add([t], self.clock.mono())
                    else:
                        self.bind([t], self.clock.mono())
                continue
            if t.final_state is not None or not t.running or gen != t.gen:
                continue
            if kind is Timer.TIMEOUT and t.kill_reason is None:
                t.kill_reason = (S.FAILED, f"timed out after {t.spec.timeout:g}s")
                to_term.append(t)
            elif kind is Timer.KILL:
                self.runner.kill([t], _signal.SIGKILL)
        self.kill(to_term)
