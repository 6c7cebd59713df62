"""A batch system's pilot (batch/slurm.py, pbs.py, lsf.py, flux.py: its record says how) is a
batch job submitted through PSI/J.

The job's script runs `agent_argv` once (PSI/J's "single" launcher, on the job's first node);
the agent then owns the whole allocation (exclusive nodes). The job's stdout/stderr go to
`<sandbox>/agent.out` and `<sandbox>/agent.err`; PSI/J's own files (the generated submit script,
the job's exit-code and output files) stay in `<sandbox>/psij/<executor>/` for post-mortems.

Mapping of a PilotDescription (see docs/internals.md, "Batch adapters"):

    nodes            ResourceSpecV1(node_count=nodes, exclusive_node_use=True): one process (the
                     agent) per node as far as the batch system knows (Slurm: --nodes=N
                     --ntasks=N --ntasks-per-node=1 --exclusive; the job still holds every CPU
                     of its nodes, but SLURM_NTASKS/SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE
                     in the agent's environment say 1 per node: launchers must pass their own
                     counts -- srun -N/-n/--ntasks-per-node, prte a hostfile with slots)
    cores_per_node   not rendered (a declaration: exclusive nodes hold all their cores)
    gpus_per_node    Slurm: --gpus-per-node (custom attribute); LSF: -gpu num=G/task (one task
                     per node); PBS: not rendered by PSI/J's template
    mem_per_node     memory (MiB -> bytes; Slurm renders it as --mem, i.e. per node)
    runtime          JobAttributes.duration, rounded up to whole minutes (LSF's -W has no seconds)
    queue            JobAttributes.queue_name
    project          JobAttributes.account (--account / -A); for LSF only `-P` (custom attribute:
                     PSI/J would add `-G`, a fair-share group, which LSF checks)
    reservation      JobAttributes.reservation_id
    environment      JobSpec.environment (exported by the script; the client's environment is
                     inherited as well)
    pilot uid        the job name, through PSI/J custom attributes (slurm.job-name, pbs.N, lsf.J)

Job states (PSI/J JobState -> BatchJob state): NEW/QUEUED -> QUEUED, ACTIVE -> RUNNING,
COMPLETED -> DONE, FAILED -> FAILED, CANCELED -> CANCELED. A failed job's message is the batch
system's (PSI/J's JobStatus.message, e.g. "The job exhausted its time limit.", the agent's exit
code, `scontrol show job` state/reason for Slurm while it holds the record) plus the tail of the
agent's stderr. A rejected submission raises with
the submit command's own error text.

A node that fails is the pilot's to handle, not the batch system's: the agent fences it and
runs on with the others (agent/node_link.py). So the script asks the batch system neither to kill
nor to requeue the job when one of its nodes fails (its record's `node_failure_directives`,
rendered right after the script's first line, before PSI/J's own directives):

    slurm            #SBATCH --no-kill, #SBATCH --no-requeue (without them Slurm kills and
                     requeues the whole job once SlurmdTimeout passes: the agent dies with it)
    pbs              #PBS -r n (not rerunnable), #PBS -W tolerate_node_failures=all (PBS Pro /
                     OpenPBS 19.1 and later: a PBS that does not know it rejects the job, and
                     says so in the submit error)
    lsf              #BSUB -rn (not rerunnable; LSF has no job option against the kill)
    flux             nothing: PSI/J's Flux executor builds a jobspec, not a script, and drops
                     custom attributes; Flux ends a plain job that loses a node

The script's first command is `umask 077`: what the job creates (PSI/J's `<id>.out`, `.ec` and
`.nodefile`, `agent.out`/`agent.err`, and everything of the agent, its node executors and
tasks, which inherit it: srun passes the umask on to its steps) is 0600 in 0700 directories.
PSI/J's own files written here (the submit script, its launcher scripts, which it copies 0644
from site-packages) are made private after each submit (`_util.private_tree`).

PSI/J polls the queue in a thread; its interval is `PILOTFISH_BATCH_POLL_S` seconds (default 5).
A poll that fails (squeue/qstat/bjobs exits non-zero: a slurmctld restarting, a timeout) fails
nothing here -- PSI/J's own answer is to fail every job it follows on the third failure in a
row, and with it the pilot and its tasks. It is retried with back-off instead (the interval
doubling per failure up to `POLL_BACKOFF_MAX_S`; `poll_trouble()` says how it stands) until
the batch system answers again: only the agent's silence (client/pilot.py) or the batch
system's own word ends a pilot.
"""

from __future__ import annotations

import inspect
import io
import logging
import math
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from .._util import private_dir, private_tree
from .base import BatchJob, JobState, file_tail
from .registry import batch_system, systems

log = logging.getLogger("pilotfish.client")

SCRIPT_UMASK = "umask 077"
POLL_BACKOFF_MAX_S = 30.0  # the longest wait between two tries of a failing queue poll


def _poll_interval() -> float:
    try:
        return max(0.2, float(os.environ.get("PILOTFISH_BATCH_POLL_S", "5")))
    except ValueError:
        return 5.0


class PsijBatchJob(BatchJob):
    """One pilot as a PSI/J job on Slurm, PBS, LSF or Flux."""

    def __init__(self, pilot_uid: str, description: Any, sandbox: str, agent_argv: list[str]):
        super().__init__(pilot_uid, description, sandbox, agent_argv)
        self.resource = description.resource
        self.system = batch_system(self.resource)
        if self.system.psij_executor is None:
            raise ValueError(
                f"PsijBatchJob: no PSI/J executor for resource {self.resource!r} "
                f"(one of {', '.join(s.name for s in systems() if s.psij_executor)})"
            )
        self.executor_name: str = self.system.psij_executor
        if not self.agent_argv:
            raise ValueError("PsijBatchJob: agent_argv is empty")
        self.work_dir = os.path.join(sandbox, "psij")
        self.stdout_path = os.path.join(sandbox, "agent.out")
        self.stderr_path = os.path.join(sandbox, "agent.err")
        self._executor: Any = None
        self._job: Any = None
        self._canceled = False
        self._lock = threading.Lock()
        self._trouble: tuple[int, str, float] | None = None  # see poll_trouble

    # -- PSI/J objects -----------------------------------------------------------------------

    def executor(self) -> Any:
        """The PSI/J JobExecutor of this pilot (created once; its files go to <sandbox>/psij)."""
        if self._executor is None:
            import psij
            from psij.executors.batch.batch_scheduler_executor import BatchSchedulerExecutorConfig

            name = self.executor_name
            if not self.system.psij_script:
                config = psij.JobExecutorConfig(work_directory=Path(self.work_dir))
            else:
                config = BatchSchedulerExecutorConfig(
                    work_directory=Path(self.work_dir),
                    queue_polling_interval=_poll_interval(),  # type: ignore[arg-type]  # PSI/J takes a timedelta or seconds
                    initial_queue_polling_delay=1,
                    keep_files=True,
                )
            private_dir(self.work_dir)  # (PSI/J makes it 0755 else, and what it holds)
            try:
                ex = psij.JobExecutor.get_instance(name, config=config)
            except ValueError as e:
                raise RuntimeError(f"PSI/J executor {name!r} is not usable here: {e}") from None
            if hasattr(ex, "generate_submit_script"):  # (the instance's own: submit calls it)
                ex.generate_submit_script = self._script_writer(ex.generate_submit_script)
            thread = getattr(ex, "_queue_poll_thread", None)
            if thread is not None and hasattr(thread, "_handle_poll_error"):
                # (no job is registered yet: the thread polls nothing before this is set)
                thread._handle_poll_error = lambda *a, t=thread: self._poll_failed(t, *a)
            self._executor = ex
        return self._executor

    def _script_writer(self, generate):
        """PSI/J's script generator, followed by harden_script."""

        def write(job, context, submit_file) -> None:
            out = io.StringIO()
            generate(job, context, out)
            submit_file.write(harden_script(self.resource, out.getvalue()))

        return write

    # -- failed queue polls ------------------------------------------------------------------

    def _poll_failed(
        self, thread: Any, executor: Any, immediate: bool, error: Exception, message: str
    ) -> None:
        """In PSI/J's poll thread, in place of its _handle_poll_error (which fails every job
        the executor follows): count the failure, say so, and wait before the next try --
        the poll interval doubled per failure in a row, up to POLL_BACKOFF_MAX_S. The job
        keeps the state it last had; PSI/J resets the count on the first poll that works."""
        thread._poll_error_count += 1
        n = thread._poll_error_count
        text = " ".join(str(error).split())[:300] or type(error).__name__
        with self._lock:
            since = time.time() if self._trouble is None else self._trouble[2]
            self._trouble = (n, text, since)
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure in a row
            log.warning(
                "pilot %s: polling %s for job %s failed (%d in a row): %s; retrying",
                self.pilot_uid,
                self.resource,
                self.native_id,
                n,
                text,
            )
        interval = float(thread.config.queue_polling_interval)
        backoff = min(POLL_BACKOFF_MAX_S, interval * 2 ** min(n - 1, 20))  # (hours of it)
        end = time.monotonic() + backoff - interval  # (PSI/J sleeps the interval itself)
        while not thread.done and time.monotonic() < end:
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))

    def poll_trouble(self) -> tuple[int, str, float] | None:
        """While the batch system's queue polls fail: (failures in a row, the last error, since
        when, epoch seconds); None once a poll works again."""
        thread = getattr(self._executor, "_queue_poll_thread", None)
        with self._lock:
            if self._trouble is not None and thread is not None and thread._poll_error_count == 0:
                log.info(
                    "pilot %s: polling %s works again (%d failed in a row)",
                    self.pilot_uid,
                    self.resource,
                    self._trouble[0],
                )
                self._trouble = None
            return self._trouble

    def make_job(self) -> Any:
        """The PSI/J Job for this pilot (not submitted)."""
        import psij

        d = self.description
        custom: dict[str, Any] = {}
        resources: dict[str, Any] = {"node_count": int(d.nodes), "exclusive_node_use": True}
        # cores_per_node is not rendered: exclusive nodes hold all their cores, and a
        # --cpus-per-task would reach every srun step of the agent through SLURM_CPUS_PER_TASK
        if d.gpus_per_node and self.system.gpus_attribute:  # (Slurm's: not --gpus-per-task)
            custom[self.system.gpus_attribute] = int(d.gpus_per_node)
        elif d.gpus_per_node:
            resources["gpu_cores_per_process"] = int(d.gpus_per_node)
        if d.mem_per_node:
            resources["memory"] = int(d.mem_per_node) * 1024 * 1024
        minutes = max(1, math.ceil(float(d.runtime) / 60.0))
        attrs: dict[str, Any] = {
            "duration": timedelta(minutes=minutes),
            "queue_name": d.queue or None,
            "reservation_id": d.reservation or None,
        }
        if d.project and self.system.project_attribute:
            # (LSF: PSI/J renders an account as both `-G` (fair-share user group: a job is
            # rejected where the user is not in such a group) and `-P` (project): only -P)
            custom[self.system.project_attribute] = d.project
        elif d.project:
            # psij-python >= 0.9.10 calls it `account`; older releases `project_name`
            params = inspect.signature(psij.JobAttributes.__init__).parameters
            attrs["account" if "account" in params else "project_name"] = d.project
        if self.system.job_name_attribute:
            custom[self.system.job_name_attribute] = self.pilot_uid
        spec = psij.JobSpec(
            executable=self.agent_argv[0],
            arguments=list(self.agent_argv[1:]),
            directory=self.sandbox,
            environment={str(k): str(v) for k, v in (d.environment or {}).items()} or None,
            stdout_path=Path(self.stdout_path),
            stderr_path=Path(self.stderr_path),
            resources=psij.ResourceSpecV1(**resources),
            attributes=psij.JobAttributes(custom_attributes=custom or None, **attrs),
        )
        return psij.Job(spec)

    def render_script(self) -> str:
        """The submit script PSI/J would hand to the batch system (for checks and debugging)."""
        import io

        ex = self.executor()
        job = self.make_job()
        if not hasattr(ex, "generate_submit_script"):
            raise RuntimeError(f"the {self.resource} executor does not use submit scripts")
        ex._ensure_work_dir()
        out = io.StringIO()
        ex.generate_submit_script(job, ex._create_script_context(job), out)
        return out.getvalue()

    # -- the BatchJob contract ---------------------------------------------------------------

    def submit(self) -> None:
        import psij

        os.makedirs(self.sandbox, exist_ok=True)
        job = self.make_job()
        try:
            self.executor().submit(job)
        except psij.SubmitException as e:
            # the submit command's own words, e.g. "sbatch: error: Batch job submission failed:
            # Node count specification invalid"
            text = " ".join(str(e).split()) or repr(e)
            raise RuntimeError(f"{self.resource} rejected the pilot job: {text}") from None
        finally:
            private_tree(self.work_dir)  # the submit script, PSI/J's launcher scripts
        self._job = job

    @property
    def native_id(self) -> str | None:
        return None if self._job is None else self._job.native_id

    def poll(self) -> tuple[JobState, str | None]:
        if self._job is None:
            return "QUEUED", None
        from psij import JobState as S

        status = self._job.status
        state = status.state
        if self._trouble is not None:
            self.poll_trouble()  # (says when the polls work again)
        if state in (S.NEW, S.QUEUED):
            return "QUEUED", None
        if state == S.ACTIVE:
            ended = self.agent_ended()
            return ("RUNNING", None) if ended is None else ("FAILED", ended)
        if state == S.COMPLETED:
            return "DONE", None
        if state == S.CANCELED or self._canceled:  # (some systems report a killed job as failed)
            return "CANCELED", status.message or None
        # the job ended as its agent did (the keeper passes the agent's status on): say how
        return "FAILED", self.agent_ended() or self._failure_message(status)

    def cancel(self) -> None:
        self._canceled = True
        if self._job is None or self._job.native_id is None:
            return
        if self._job.status.state.final:
            return
        self.executor().cancel(self._job)

    # -- failure messages --------------------------------------------------------------------

    def _failure_message(self, status: Any) -> str:
        with self._lock:
            cached = getattr(self, "_message", None)
            if cached is not None:
                return cached
            parts = []
            msg = (status.message or "").strip()
            if msg:
                if "Traceback" in msg:  # PSI/J wraps its own errors in tracebacks: keep the end
                    msg = msg.strip().splitlines()[-1]
                parts.append(msg.rstrip("."))
            if status.exit_code not in (None, 0):
                parts.append(f"agent exit code {status.exit_code}")
            native = self._job.native_id if self._job is not None else None
            if self.system.job_info is not None and native:
                # (the script itself ends with 0 when the agent fails: PSI/J keeps the agent's
                # exit code in a file; Slurm's record then says COMPLETED and adds nothing)
                info = self.system.job_info(native)
                if info and "JobState=COMPLETED" not in info:
                    parts.append(info)
            tail = file_tail(self.stderr_path)
            if tail:
                parts.append("agent stderr: " + tail)
            text = "; ".join(parts) or f"{self.resource} job {native} failed"
            self._message = text
            return text


def harden_script(resource: str, script: str) -> str:
    """PSI/J's submit script with the batch system's node_failure_directives right after its
    first line (the `#!` line: directives must come before any command) and SCRIPT_UMASK as
    its first command (before the first line that is neither blank nor a comment)."""
    lines = script.splitlines(keepends=True)
    at = 1 if lines and lines[0].startswith("#!") else 0
    extra = [d + "\n" for d in batch_system(resource).node_failure_directives]
    lines[at:at] = extra
    first = next(
        (
            i
            for i, ln in enumerate(lines)
            if i >= at + len(extra) and ln.strip() and not ln.lstrip().startswith("#")
        ),
        len(lines),
    )
    lines.insert(first, f"{SCRIPT_UMASK}  # pilotfish: the job's files are its owner's alone\n")
    return "".join(lines)


__all__ = ["PsijBatchJob", "harden_script"]
