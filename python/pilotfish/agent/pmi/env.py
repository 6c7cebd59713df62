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

# the identity of the step and task the agent (or a node executor) itself runs as, which every
# task would otherwise inherit -- on the default path rank 1 of a 4-host world read
# SLURM_PROCID=0 SLURM_NTASKS=3 (its node executors' srun step) -- and of another process
# manager's rank (PMI_RANK, OMPI_COMM_WORLD_RANK ...). Job-level variables stay (SLURM_JOB_ID,
# SLURM_JOB_NODELIST, SLURM_CONF, SLURM_NTASKS_PER_NODE, SLURM_MPI_TYPE ...): srun and hydra
# read them to start steps in the pilot's allocation; the owner's settings stay too
# (OMPI_MCA_*, and whatever a description's `environment` sets, applied after this).
STEP_ENV = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_TASK_PID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_STEPID",
    "SLURM_GTIDS",
    "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT",
    "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_DISTRIBUTION",
    "SLURM_PRIO_PROCESS",
    "SLURM_UMASK",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_FD",
    "PMI_JOBID",
    "PMI_APPNUM",
    "PMI_LOCAL_RANK",
    "PMI_LOCAL_SIZE",
    "OMPI_UNIVERSE_SIZE",
    "OMPI_APP_CTX_NUM_PROCS",
    "OMPI_NUM_APP_CTX",
    "OMPI_FIRST_RANKS",
    "OMPI_ARGV",
    "OMPI_COMMAND",
    "OMPI_FILE_LOCATION",
)
STEP_PREFIXES = ("SLURM_STEP_", "SLURM_CPU_BIND", "OMPI_COMM_WORLD_")

# the descriptor a rank holds its connection as when the Rust core spawns it: the core's
# pass_fd (`_core.Executor.spawn_batch`, a spec's 8th field) puts it there by default
RANK_FD = 3


def stale(name: str) -> bool:
    """Whether a variable of the agent's (or a node executor's) own environment names another
    process manager or its own step and task (STALE_*, STEP_*): no task inherits it."""
    return (
        name in STALE_ENV
        or name in STEP_ENV
        or name.startswith(STALE_PREFIXES)
        or name.startswith(STEP_PREFIXES)
    )


def clean_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` without another process manager's variables nor those of the step it runs in
    (stale())."""
    return {k: v for k, v in base.items() if not stale(k)}


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
