"""How an allocation is obtained: one small module per batch system.

`make_batch_job` picks the adapter for a PilotDescription's `resource`.
"""

from __future__ import annotations

from .base import BatchJob, JobState
from .local import LocalJob


def make_batch_job(pilot_uid: str, description, sandbox: str, agent_argv: list[str]) -> BatchJob:
    if description.resource in ("local", "simulated"):  # an agent process here
        return LocalJob(pilot_uid, description, sandbox, agent_argv)
    from .psij_job import PsijBatchJob  # imported lazily: psij is only needed for batch systems

    return PsijBatchJob(pilot_uid, description, sandbox, agent_argv)


__all__ = ["BatchJob", "JobState", "LocalJob", "make_batch_job"]
