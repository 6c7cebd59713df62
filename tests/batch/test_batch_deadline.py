"""The agent's deadline inside a batch job: the earlier of its own walltime and the time the
batch system says is left (Slurm rounds walltimes to minutes and starts its clock first)."""

from __future__ import annotations

from pilotfish.batch.slurm import parse_slurm_time
from pilotfish.agent.walltime import batch_time_left, drain_margin


def test_slurm_time_formats():
    assert parse_slurm_time("59") == 59
    assert parse_slurm_time("4:59") == 4 * 60 + 59
    assert parse_slurm_time("1:02:03") == 3723
    assert parse_slurm_time("2-01:00:00") == 2 * 86400 + 3600
    for text in ("UNLIMITED", "NOT_SET", "INVALID", "", "1:2:3:4", "x-1:00"):
        assert parse_slurm_time(text) is None, text


def test_no_batch_deadline_outside_slurm():
    assert batch_time_left("local", {}) is None
    assert batch_time_left("slurm", {}) is None  # no SLURM_JOB_ID: not in a job


def test_drain_margin():
    assert drain_margin(60) == 6.0 and drain_margin(5) == 1.0 and drain_margin(7200) == 60.0
