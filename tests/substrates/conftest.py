"""Fixtures for the real substrates (helpers in substrate_helpers.py).

Tests marked `slurm`, `prrte` or `mpi` must run inside the network namespace that
scripts/substrates/slurm.sh creates (no daemon or launcher may touch this machine's network):

    scripts/substrates/install.sh
    scripts/substrates/slurm.sh start
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/substrates

Outside it they fail with that recipe (PILOTFISH_SUBSTRATES=skip skips them instead).
"""

from __future__ import annotations

import os

import pytest
from substrate_helpers import (
    NETNS,
    REPO,
    SUBSTRATE_MARKS,
    Dvm,
    SlurmInfo,
    _missing,
    _venv_has,
    in_netns,
    mpich_env,
    openmpi_env,
    run,
)


@pytest.fixture(autouse=True)
def _needs_netns(request):
    if any(request.node.get_closest_marker(m) for m in SUBSTRATE_MARKS) and not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")


@pytest.fixture(scope="session")
def slurm() -> SlurmInfo:
    """The project's Slurm (scripts/substrates/slurm.sh start), answering sinfo."""
    if not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")
    conf = os.environ.get("SLURM_CONF") or str(REPO / ".substrates/slurm/etc/slurm.conf")
    if not os.path.exists(conf):
        _missing(f"no Slurm configuration at {conf}: Slurm is not started")
    os.environ["SLURM_CONF"] = conf  # for PSI/J and anything else this process starts
    env = dict(os.environ, SLURM_CONF=conf)
    r = run(["sinfo", "-h", "-N", "-o", "%N %t %c"], timeout=20, env=env)
    if r.rc != 0:
        _missing(f"sinfo does not answer (rc={r.rc}): {r.err.strip()}")
    rows = [line.split() for line in r.out.splitlines() if line.strip()]
    return SlurmInfo(conf=conf, nodes=len(rows), cpus=int(rows[0][2]) if rows else 0, env=env)


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
