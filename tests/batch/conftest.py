"""Fixtures for pilots on the project's real Slurm (scripts/substrates/slurm.sh).

Run inside the substrate namespace:
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch
Outside it, tests marked slurm/prrte/mpi fail with that recipe (PILOTFISH_SUBSTRATES=skip
skips them). The helpers are tests/substrates/substrate_helpers.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "substrates"))

from substrate_helpers import (  # noqa: E402
    SlurmInfo,
    project_slurm,
    require_netns_for,
)


@pytest.fixture(autouse=True)
def _needs_netns(request):
    require_netns_for(request.node)


@pytest.fixture(scope="session")
def slurm() -> SlurmInfo:
    """The project's Slurm, answering sinfo; SLURM_CONF exported for PSI/J and the agents."""
    os.environ.setdefault("PILOTFISH_BATCH_POLL_S", "0.5")  # PSI/J's queue polling, for tests
    return project_slurm()
