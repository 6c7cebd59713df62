"""Each launch method's side of one world per multi-rank MPI task (launch/mpi_route.py has
the table): `check()` at build refuses a program whose MPI cannot form one world through
that launcher (LaunchError, naming the MPI it saw and the launcher to use) or gives a Python
program the launcher's library (MPI4PY_LIBMPI); `plain_guard()` gives the plain processes of a
multi-rank task SINGLETON_GUARD, so that an MPI library the pilot did not recognise fails in
MPI_Init instead of running as a singleton.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import msgspec

from .base import LaunchError
from .mpi_abi import MPICH, NAMES, OPENMPI, is_python, program_mpi, python_lib

# in the ranks' environment on plain paths (mpi_route.py); a name, never a server
SINGLETON_GUARD = {"PMIX_NAMESPACE": "pilotfish.no-mpi-launcher"}


def _chosen(task: Any) -> bool:
    env = task.environment or {}
    return bool(env.get("MPI4PY_LIBMPI") or env.get("MPI4PY_MPIABI"))


def python_env(task: Any, kind: str) -> dict[str, str]:
    """{MPI4PY_LIBMPI: its prefix's library of `kind`} for a Python program that did not
    choose its library, when its interpreter's prefix has one; else {}."""
    exe = str(task.executable or "")
    if not exe or _chosen(task):
        return {}
    path = exe if "/" in exe else shutil.which(exe)
    if not path or not (is_python(exe) or is_python(os.path.realpath(path))):
        return {}
    lib = python_lib(path, kind)
    return {"MPI4PY_LIBMPI": lib} if lib else {}


def _use_instead(kind: str) -> str:
    if kind == MPICH:
        return (
            "launcher='pmi' (the pilot's own PMI; what a task that names none gets on a "
            "pilot that names none), 'mpiexec' or 'srun'"
        )
    return "launcher='prrte' (or 'mpirun')"


def check(lm: Any, task: Any, cwd: str | None = None) -> dict[str, str]:
    """What launch method `lm` (a LaunchMethod or its class: its name and `mpi_world`) needs
    to make this task's ranks one world: {} or the environment a Python program gets
    (python_env); raises LaunchError when its program's MPI cannot form one world there.
    Single-rank tasks, and launchers that choose for themselves (srun: "either") or whose
    world is not known (None: flux, jsrun, aprun), pass."""
    world, method = lm.mpi_world, lm.name
    if task.ranks < 2 or world in (None, "either"):
        return {}
    kind = program_mpi(
        str(task.executable or ""), list(task.arguments or ()), dict(task.environment or {}), cwd
    )
    speaks = None if world == "plain" else world
    if speaks is not None and (kind is None or kind == speaks):
        return python_env(task, speaks)  # (a Python program's mpi4py: the launcher's library)
    if kind is None:
        return {}
    if speaks is not None:
        env = python_env(task, speaks)
        if env:
            return env
    saw = NAMES[kind]
    if speaks is None:
        why = f"launcher '{method}' starts its {task.ranks} ranks as plain processes"
    elif speaks == OPENMPI:
        why = f"launcher '{method}' serves PMIx, which {saw} does not speak"
    else:
        why = f"launcher '{method}' serves PMI, and {saw} speaks only PMIx"
    raise LaunchError(
        f"an {saw} program ({task.executable}) cannot form one MPI world of "
        f"{task.ranks} ranks here ({why}: each would be a world of its own): use "
        f"{_use_instead(kind)}"
    )


def one_world(lm: Any, task: Any, cwd: str | None = None) -> Any:
    """The task as launch method `lm` runs it: with check()'s environment; LaunchError
    when its ranks cannot form one world there."""
    env = check(lm, task, cwd)
    if not env:
        return task
    return msgspec.structs.replace(task, environment={**(task.environment or {}), **env})


def plain_guard(lm: Any, task: Any, cwd: str | None = None) -> dict[str, str]:
    """The environment every rank of a multi-rank task started as plain processes gets
    (SINGLETON_GUARD; {} for one rank); LaunchError for a program known to be MPI."""
    if task.ranks < 2:
        return {}
    check(lm, task, cwd)
    return dict(SINGLETON_GUARD)
