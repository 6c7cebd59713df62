"""Tests marked prrte/mpi/slurm start real launchers and daemons: they run inside the substrate
namespace (scripts/substrates/slurm.sh exec ...), else fail with the recipe
(PILOTFISH_SUBSTRATES=skip skips them). Helpers: tests/substrates/substrate_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "substrates"))

from substrate_helpers import NETNS, SUBSTRATE_MARKS, _missing, in_netns  # noqa: E402


@pytest.fixture(autouse=True)
def _needs_netns(request):
    if any(request.node.get_closest_marker(m) for m in SUBSTRATE_MARKS) and not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")
