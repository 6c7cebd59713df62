"""resource="slurm": Slurm, through PSI/J's "slurm" executor.

Its job's nodes come from SLURM_JOB_NODELIST and friends (_batch_env.slurm_nodes); its time
left from squeue; a failed job's account from `scontrol show job`. Its nodes run node
executors (started by srun, the default launcher), and a Slurm pilot grows by a second job
(batch/holder.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from .._batch_env import parse_slurm_time, slurm_nodes
from .registry import BatchSystem, register


def time_left(env: Mapping[str, str]) -> float | None:
    """Seconds until Slurm ends this job (squeue's %L), None when unknown."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        r = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%L"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_slurm_time(r.stdout.strip())


def job_info(native_id: str) -> str:
    """Slurm's own account of a finished job (while slurmctld still holds its record)."""
    try:
        r = subprocess.run(
            ["scontrol", "show", "job", "-o", str(native_id)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if r.returncode != 0:
        return ""
    fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
    keep = [f"{k}={fields[k]}" for k in ("JobState", "Reason", "ExitCode") if k in fields]
    return ("slurm: " + " ".join(keep)) if keep else ""


SLURM = register(
    BatchSystem(
        name="slurm",
        psij_executor="slurm",
        job_name_attribute="slurm.job-name",
        # without them Slurm kills and requeues the whole job once SlurmdTimeout passes
        node_failure_directives=("#SBATCH --no-kill", "#SBATCH --no-requeue"),
        gpus_attribute="slurm.gpus-per-node",  # not --gpus-per-task (it reaches every step)
        job_info=job_info,
        nodes=slurm_nodes,
        source="slurm",
        time_left=time_left,
        node_executors=True,
        default_launcher="srun",
        grows=True,
        rp_schemes=("slurm",),
    )
)

__all__ = ["SLURM", "job_info", "time_left"]
