"""resource="slurm" | "pbs" | "lsf" | "flux": the pilot is a batch job submitted through PSI/J.

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

PSI/J polls the queue in a thread; its interval is `PILOTFISH_BATCH_POLL_S` seconds (default 5).
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from .base import BatchJob, JobState, file_tail

EXECUTORS = {"slurm": "slurm", "pbs": "pbs", "lsf": "lsf", "flux": "flux"}
_NAME_ATTRIBUTE = {"slurm": "slurm.job-name", "pbs": "pbs.N", "lsf": "lsf.J"}


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
        if self.resource not in EXECUTORS:
            raise ValueError(f"PsijBatchJob: no PSI/J executor for resource {self.resource!r} "
                             f"(one of {', '.join(EXECUTORS)})")
        if not self.agent_argv:
            raise ValueError("PsijBatchJob: agent_argv is empty")
        self.work_dir = os.path.join(sandbox, "psij")
        self.stdout_path = os.path.join(sandbox, "agent.out")
        self.stderr_path = os.path.join(sandbox, "agent.err")
        self._executor: Any = None
        self._job: Any = None
        self._canceled = False
        self._lock = threading.Lock()

    # -- PSI/J objects -----------------------------------------------------------------------

    def executor(self) -> Any:
        """The PSI/J JobExecutor of this pilot (created once; its files go to <sandbox>/psij)."""
        if self._executor is None:
            import psij
            from psij.executors.batch.batch_scheduler_executor import BatchSchedulerExecutorConfig

            name = EXECUTORS[self.resource]
            if name == "flux":
                config = psij.JobExecutorConfig(work_directory=Path(self.work_dir))
            else:
                config = BatchSchedulerExecutorConfig(
                    work_directory=Path(self.work_dir),
                    queue_polling_interval=_poll_interval(),  # type: ignore[arg-type]
                    initial_queue_polling_delay=1, keep_files=True)
            try:
                self._executor = psij.JobExecutor.get_instance(name, config=config)
            except ValueError as e:
                raise RuntimeError(f"PSI/J executor {name!r} is not usable here: {e}") from None
        return self._executor

    def make_job(self) -> Any:
        """The PSI/J Job for this pilot (not submitted)."""
        import psij

        d = self.description
        custom: dict[str, Any] = {}
        resources = {"node_count": int(d.nodes), "exclusive_node_use": True}
        # cores_per_node is not rendered: exclusive nodes hold all their cores, and a
        # --cpus-per-task would reach every srun step of the agent through SLURM_CPUS_PER_TASK
        if d.gpus_per_node and self.resource == "slurm":
            custom["slurm.gpus-per-node"] = int(d.gpus_per_node)  # not --gpus-per-task (steps)
        elif d.gpus_per_node:
            resources["gpu_cores_per_process"] = int(d.gpus_per_node)
        if d.mem_per_node:
            resources["memory"] = int(d.mem_per_node) * 1024 * 1024
        minutes = max(1, math.ceil(float(d.runtime) / 60.0))
        attrs: dict[str, Any] = {"duration": timedelta(minutes=minutes),
                                 "queue_name": d.queue or None,
                                 "reservation_id": d.reservation or None}
        if d.project and self.resource == "lsf":
            # PSI/J renders an LSF account as both `-G` (fair-share user group: a job is
            # rejected where the user is not in such a group) and `-P` (project): only -P
            custom["lsf.P"] = d.project
        elif d.project:
            # psij-python >= 0.9.10 calls it `account`; older releases `project_name`
            params = inspect.signature(psij.JobAttributes.__init__).parameters
            attrs["account" if "account" in params else "project_name"] = d.project
        if self.resource in _NAME_ATTRIBUTE:
            custom[_NAME_ATTRIBUTE[self.resource]] = self.pilot_uid
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
            if self.resource == "slurm" and native:
                # (the script itself ends with 0 when the agent fails: PSI/J keeps the agent's
                # exit code in a file; Slurm's record then says COMPLETED and adds nothing)
                info = _slurm_job_info(native)
                if info and "JobState=COMPLETED" not in info:
                    parts.append(info)
            tail = file_tail(self.stderr_path)
            if tail:
                parts.append("agent stderr: " + tail)
            text = "; ".join(parts) or f"{self.resource} job {native} failed"
            self._message = text
            return text


def _slurm_job_info(native_id: str) -> str:
    """Slurm's own account of a finished job (while slurmctld still holds its record)."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", str(native_id)], capture_output=True,
                           text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if r.returncode != 0:
        return ""
    fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
    keep = [f"{k}={fields[k]}" for k in ("JobState", "Reason", "ExitCode") if k in fields]
    return ("slurm: " + " ".join(keep)) if keep else ""


__all__ = ["EXECUTORS", "PsijBatchJob"]
