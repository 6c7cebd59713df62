"""When the agent must stop: its own walltime, and the batch system's for its job."""

from __future__ import annotations

import os
import subprocess

from .._batch_env import parse_slurm_time


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
