"""How an allocation is obtained: one small module per batch system.

Each batch system's module (local.py, slurm.py, pbs.py, lsf.py, flux.py, simulated.py)
registers its `BatchSystem` record (registry.py); plug-ins ($PILOTFISH_PLUGINS) register
more. `make_batch_job` picks the adapter for a PilotDescription's `resource`: an agent
process here (LocalJob) or a PSI/J batch job (psij_job.py).
"""

from __future__ import annotations

# (imported for their registration, in the order the descriptions' errors list them)
from . import local, slurm, pbs, lsf, flux, simulated  # (the order of registration)
from .base import BatchJob, JobState
from .local import LocalJob
from .registry import SYSTEMS, BatchSystem, batch_system, names, register, systems


def make_batch_job(pilot_uid: str, description, sandbox: str, agent_argv: list[str]) -> BatchJob:
    if batch_system(description.resource).runs_here:  # an agent process here
        return LocalJob(pilot_uid, description, sandbox, agent_argv)
    from .psij_job import PsijBatchJob  # imported lazily: psij is only needed for batch systems

    return PsijBatchJob(pilot_uid, description, sandbox, agent_argv)


__all__ = [
    "SYSTEMS",
    "BatchJob",
    "BatchSystem",
    "JobState",
    "LocalJob",
    "batch_system",
    "make_batch_job",
    "names",
    "register",
    "systems",
]
