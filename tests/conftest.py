"""Shared fixtures: real sessions and real local pilots (agent processes over ZeroMQ), and the
project's real Slurm.

Tests marked slurm/prrte/mpi start real daemons and launchers: they run inside the substrate
namespace (scripts/substrates/slurm.sh exec .venv/bin/python -m pytest ...), else fail with
that recipe (PILOTFISH_SUBSTRATES=skip skips them). Helpers: tests/substrates/substrate_helpers.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

import pilotfish as pf

# the suite is deterministic: the fuzz tests draw the same examples every run (a random
# example that fails blocks every landing, whoever made the change); the benches
# (bench/bench_fuzz.py, bench_wire_fuzz.py) explore with --seed
settings.register_profile("suite", derandomize=True, database=None)
settings.load_profile("suite")

sys.path.insert(0, str(Path(__file__).resolve().parent / "substrates"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # import_graph, for the shape tests

from substrate_helpers import (SlurmInfo, project_slurm, require_netns_for,  # noqa: E402
                               start_pilot)


@pytest.fixture(autouse=True)
def _needs_netns(request):
    require_netns_for(request.node)


@pytest.fixture(scope="session")
def slurm() -> SlurmInfo:
    """The project's Slurm, answering sinfo; SLURM_CONF exported for PSI/J and the agents."""
    os.environ.setdefault("PILOTFISH_BATCH_POLL_S", "0.5")  # PSI/J's queue polling, for tests
    return project_slurm()


@pytest.fixture
def session(tmp_path):
    with pf.Session(path=tmp_path / "session") as s:
        yield s


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """One emulated 4 x (16 cores, 2 GPUs) pilot shared by a module's tests."""
    path = tmp_path_factory.mktemp("emulated") / "session"
    with pf.Session(path=path) as s:
        pilot, tmgr = start_pilot(s, nodes=4, cores_per_node=16, gpus_per_node=2,
                                  runtime="30m")
        yield s, pilot, tmgr
