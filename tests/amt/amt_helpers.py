"""Run real MPI programs for the pilotfish.amt tests: MPICH's hydra `mpiexec` from this
environment (found as the launch methods find it), mpi4py pinned to the same MPI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pilotfish.launch.base import find_tool
from pilotfish.launch.mpiexec import is_hydra
from substrate_helpers import run

HERE = Path(__file__).resolve().parent
PROGS = HERE / "progs"
REPO = HERE.parents[1]
HYDRA = find_tool(("mpiexec.hydra", "mpiexec"), is_hydra)


def libmpi_for(launcher: str | None) -> str | None:
    """MPICH's libmpi next to its mpiexec (prefix/bin/mpiexec -> prefix/lib/libmpi.so.12)."""
    if not launcher:
        return None
    lib = Path(launcher).resolve().parent.parent / "lib" / "libmpi.so.12"
    return str(lib) if lib.exists() else None


def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.pop("MPI4PY_MPIABI", None)
    lib = libmpi_for(HYDRA)
    if lib:
        env["MPI4PY_LIBMPI"] = lib
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"),
                                                      env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def mpirun(prog: str | Path, n: int, *args, timeout: float = 60, env: dict | None = None,
           expect_rc: int | None = 0):
    """`mpiexec -n N python prog args...`, SIGKILLed (whole group) at the timeout."""
    path = Path(prog) if Path(prog).is_absolute() else PROGS / prog
    argv = [HYDRA, "-n", str(n), "-launcher", "fork", sys.executable, str(path), *map(str, args)]
    r = run(argv, timeout=timeout, env=mpi_env(env), cwd=str(REPO))
    if expect_rc is not None:
        assert r.rc == expect_rc, str(r)
    return r
