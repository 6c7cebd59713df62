"""Shared fixtures: real sessions and real local pilots (agent processes over ZeroMQ)."""

from __future__ import annotations

import pytest

import pilotfish as pf


@pytest.fixture
def session(tmp_path):
    with pf.Session(path=tmp_path / "session") as s:
        yield s


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """One emulated 4 x (16 cores, 2 GPUs) pilot shared by a module's tests."""
    path = tmp_path_factory.mktemp("emulated") / "session"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(
            nodes=4, cores_per_node=16, gpus_per_node=2, runtime="30m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
        yield s, pilot, tmgr
