"""The MPI test programs (tests/agent/pmi_progs/) built once per module that needs them: the C
world `mpi_hello.c` with the mpich wheel's mpicc (the hosts of the test cluster share this
machine's file system, so one build serves them all)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROGS = Path(__file__).resolve().parent / "agent" / "pmi_progs"
MPICC = Path(sys.executable).parent / "mpicc"


def build_hello(tmp_path_factory) -> str:
    """mpi_hello built into a fresh directory (a test skips where the mpich wheel is not)."""
    if not MPICC.exists():
        pytest.skip(f"needs the mpich wheel's mpicc ({MPICC})")
    exe = tmp_path_factory.mktemp("mpi") / "mpi_hello"
    r = subprocess.run([str(MPICC), "-O1", "-o", str(exe), str(PROGS / "mpi_hello.c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return str(exe)
