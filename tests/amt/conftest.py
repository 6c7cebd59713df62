"""pilotfish.amt tests: real MPI programs (tests/amt/progs) under MPICH's mpiexec."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amt_helpers import HYDRA  # noqa: E402


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here and not HYDRA and \
                getattr(item.module, "NEEDS_MPIEXEC", True):
            item.add_marker(pytest.mark.skip(reason="needs MPICH's mpiexec (PyPI mpich)"))
