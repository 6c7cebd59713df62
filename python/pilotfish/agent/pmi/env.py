"""A rank's environment: what it must not inherit from whoever started its spawner, and the PMI
variables that make an MPICH-family library speak to our server (PMI_FD, PMI_RANK, PMI_SIZE,
PMI_JOBID) -- for a spawn with subprocess (rank_environment: the descriptor keeps its number)
and through the Rust core (core_rank: its pass_fd, which the child holds as RANK_FD).
"""

from __future__ import annotations

from collections.abc import Mapping

from .job import PmiJob

# environment a rank must not inherit from whoever started the node executor: another
# process manager's connection or identity (an outer srun --mpi=pmi2, mpiexec, PRRTE) would be
# read instead of ours, or make MPICH's auto-detection refuse ("both PMI_SIZE and
# PMIX_NAMESPACE"); PMI_HOSTNAME steers MPICH's choice of network interface (the owner sets it)
STALE_ENV = (
    "PMI_PORT",
    "PMI_ID",
    "PMI_SPAWNED",
    "PMI_TOTALVIEW",
    "PMI_HOSTNAME",
    "PMI2_CONNECT_TO_SERVER",
    "PRTE_LAUNCHED",
)
STALE_PREFIXES = ("PMIX_",)

# the descriptor a rank holds its connection as when the Rust core spawns it: the core's
# pass_fd (`_core.Executor.spawn_batch`, a spec's 8th field) puts it there by default
RANK_FD = 3


def clean_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` without another process manager's variables (STALE_ENV, STALE_PREFIXES)."""
    return {
        k: v for k, v in base.items() if k not in STALE_ENV and not k.startswith(STALE_PREFIXES)
    }


def rank_environment(
    base: Mapping[str, str], job: PmiJob, rank: int, fd: int | None = None
) -> dict[str, str]:
    """`base` without another process manager's variables, plus what rank `rank` of `job`
    needs: PMI_FD (the descriptor number the rank will hold: by default the number of
    job.rank_fds[rank], which subprocess's pass_fds keeps; RANK_FD for the Rust core),
    PMI_RANK, PMI_SIZE and PMI_JOBID (the KVS name: Slurm's libpmi2 sends it in fullinit)."""
    env = clean_environment(base)
    env.update(job.env(rank, fd))
    return env


def core_rank(job: PmiJob, rank: int) -> tuple[int, dict[str, str]]:
    """What a spawn of local rank `rank` through the Rust core takes: its pass_fd (the rank's
    end, which the child holds as RANK_FD) and its PMI variables, naming RANK_FD. The
    variables are an overlay: the executor's base environment must be clean already
    (clean_environment), since an overlay cannot remove another manager's variables."""
    if rank not in job.rank_fds:
        job.env(rank)  # (raises, naming why: not a local rank, or already released)
    return job.rank_fds[rank], job.env(rank, RANK_FD)
