"""When the agent must stop: its own walltime, and the batch system's for its job."""

from __future__ import annotations

import os

from ..batch.registry import batch_system


def drain_margin(runtime: float) -> float:
    """How long before the walltime the agent stops: enough to report, not much more."""
    return min(60.0, max(1.0, 0.1 * runtime))


def batch_time_left(resource: str, env=os.environ) -> float | None:
    """Seconds until the batch system ends this job, as it says itself (None: unknown; its
    record's `time_left`, batch/registry.py).

    The job's clock starts before the agent's, and batch systems round walltimes (Slurm to
    whole minutes): the agent drains before the earlier of its own deadline and this one.
    Asked once, before the executor starts (its reaper would collect this child too).
    """
    try:
        system = batch_system(resource)
    except ValueError:
        return None
    return None if system.time_left is None else system.time_left(env)
