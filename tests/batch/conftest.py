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
    NETNS,
    REPO,
    SUBSTRATE_MARKS,
    SlurmInfo,
    _missing,
    in_netns,
    run,
)


@pytest.fixture(autouse=True)
def _needs_netns(request):
    if any(request.node.get_closest_marker(m) for m in SUBSTRATE_MARKS) and not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")


@pytest.fixture(scope="session")
def slurm() -> SlurmInfo:
    """The project's Slurm, answering sinfo; SLURM_CONF exported for PSI/J and the agents."""
    if not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")
    conf = os.environ.get("SLURM_CONF") or str(REPO / ".substrates/slurm/etc/slurm.conf")
    if not os.path.exists(conf):
        _missing(f"no Slurm configuration at {conf}: Slurm is not started")
    os.environ["SLURM_CONF"] = conf
    os.environ.setdefault("PILOTFISH_BATCH_POLL_S", "0.5")  # PSI/J's queue polling, for tests
    env = dict(os.environ)
    r = run(["sinfo", "-h", "-N", "-o", "%N %t %c"], timeout=20, env=env)
    if r.rc != 0:
        _missing(f"sinfo does not answer (rc={r.rc}): {r.err.strip()}")
    rows = [line.split() for line in r.out.splitlines() if line.strip()]
    return SlurmInfo(conf=conf, nodes=len(rows), cpus=int(rows[0][2]) if rows else 0, env=env)
