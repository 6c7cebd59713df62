"""resource="slurm": Slurm, through PSI/J's "slurm" executor.

Its job's nodes come from SLURM_JOB_NODELIST and friends (slurm_nodes); its time left from
squeue (Slurm's time strings: parse_slurm_time); a failed job's account from `scontrol show
job`. Its nodes run node executors (started by srun, the default launcher), and a Slurm pilot
grows by a second job (batch/holder.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from .._batch_env import expand_counts, expand_hostlist, int_var
from .._util import machine_shape
from .._wire import NodeInfo
from .registry import BatchSystem, register


def slurm_nodes(env: Mapping[str, str]) -> list[NodeInfo]:
    var = "SLURM_JOB_NODELIST" if "SLURM_JOB_NODELIST" in env else "SLURM_NODELIST"
    if var not in env:
        raise ValueError("SLURM_JOB_NODELIST is not set: not inside a Slurm allocation")
    names = expand_hostlist(env[var], var)

    # Slurm counts CPUs as configured (hardware threads where CPUs= says so): taken as cores.
    if "SLURM_JOB_CPUS_PER_NODE" in env:
        cores = expand_counts(env["SLURM_JOB_CPUS_PER_NODE"], "SLURM_JOB_CPUS_PER_NODE")
        if len(cores) != len(names):
            raise ValueError(
                f"SLURM_JOB_CPUS_PER_NODE = {env['SLURM_JOB_CPUS_PER_NODE']!r} "
                f"describes {len(cores)} nodes but {var} has {len(names)}"
            )
    elif "SLURM_CPUS_ON_NODE" in env:
        cores = [int_var(env, "SLURM_CPUS_ON_NODE")] * len(names)
    else:
        cores = [machine_shape()[0]] * len(names)

    gpus = _slurm_gpus(env)
    if "SLURM_MEM_PER_NODE" in env:
        mem = int_var(env, "SLURM_MEM_PER_NODE")  # MiB
    else:
        mem = machine_shape()[2]
    return [NodeInfo(n, c, gpus, mem) for n, c in zip(names, cores)]


def _slurm_gpus(env: Mapping[str, str]) -> int:
    if "SLURM_GPUS_ON_NODE" in env:
        return int_var(env, "SLURM_GPUS_ON_NODE")
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if var in env:
            return len([g for g in env[var].split(",") if g.strip()])
    return machine_shape()[1]


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

__all__ = ["SLURM", "job_info", "parse_slurm_time", "slurm_nodes", "time_left"]
