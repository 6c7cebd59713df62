"""One world per multi-rank MPI task, whatever its MPI: which path forms it, which refuses it.

A multi-rank task's ranks are ONE MPI world only where the launcher speaks its MPI's wire
protocol; anywhere else each rank's MPI_Init makes a world of its own (a singleton) and N
copies of "rank 0 of 1" end DONE. The MPI is read from the program (launch/mpi_abi.py):

    program         | pmi, mpiexec      | srun              | prrte, mpirun,    | direct, nodes
                    |                   |                   | pmix              |
    ----------------+-------------------+-------------------+-------------------+--------------
    MPICH ABI       | one world         | one world (pmi2)  | refused at build  | refused
    Open MPI        | refused at build  | pmix, or refused  | one world         | refused
    Python, mpi4py  | its lib: .so.12   | its own library   | its lib: .so.40   | refused
    not known MPI   | as it is (*)      | pmi2              | as it is (*)      | guarded

("its lib": MPI4PY_LIBMPI=<its prefix>/lib/libmpi.so.N where the task did not choose its
library; (*) a Python program gets its lib too; ssh: refused as direct, not guarded.)

- `route()` (the agent, when a task arrives): a multi-rank task of a known MPI that names no
  launcher is given the path of its MPI -- MPICH: `pmi` where the pilot routes there
  (agent/pmi/worlds.routes), Open MPI: `pmix` (the pilot's own OpenPMIx server, launch/pmix.py)
  where every rank is on the agent's host (a local pilot) or on nodes with node executors
  (`pmix_routes`) and OpenPMIx's library is installed, else `prrte` (a DVM the agent starts
  on first need) or else Open MPI's `mpirun` -- and where none of them is, `pmix` still,
  whose start refuses it naming the package to install (libpmix2); on a pilot that names
  its launcher, that launcher, whose build says whether it can (the pilot's single-node
  shortcut to plain processes, `nodes`, never takes a known MPI program). A program the
  pilot cannot read (a script, a Python interpreter, a shell) goes to the launcher a pilot
  names when that is an MPI launcher -- it may be MPI; an ELF binary without libmpi
  (/bin/hostname) keeps the pilot's shortcut.
- `check()` (launch/mpi_check.py, at each launch method's build): a program whose MPI cannot
  form one world through this launcher is refused before anything starts (LaunchError: the
  task FAILS naming the MPI it saw and the launcher to use). A Python program that did not
  choose its library is not refused where its interpreter's prefix holds the launcher's: it
  gets MPI4PY_LIBMPI naming it (both wheels installed side by side: mpi4py speaks either).
- `SINGLETON_GUARD` (mpi_check.py; the plain processes of a multi-rank task, `direct` and
  `nodes`: "guarded"): a program not known to be MPI may still be (a script the pilot cannot
  read); the guard makes any MPI library that initialises there fail loudly instead of
  running as a singleton -- MPICH aborts on finding a PMIx environment ("unsupported PMI
  version PMIx"), Open MPI on finding no PMIx server for its namespace ("Open MPI requires
  access to a local PMIx server"). Programs that are not MPI ignore it (checked:
  /bin/hostname, shells). _mpi.libmpi_hint turns either message into the fix.

What no path can tell: a program not known to be MPI that runs Open MPI under an MPICH-family
launcher (hydra, srun --mpi=pmi2) runs as singletons: the guard (PMIX_NAMESPACE) would break
MPICH there ("Found both env vars PMI_SIZE and PMIX_NAMESPACE").
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from .mpi_abi import MPICH, opaque, program_mpi
from .pmix import available as pmix_available


_openmpi_launcher: list[str | None] = []


def openmpi_launcher() -> str | None:
    """The launcher an Open MPI task gets when it names none: `prrte` when PRRTE's tools
    (prte, prterun) are installed, else `mpirun` when Open MPI's is, else None. Looked up
    once."""
    if not _openmpi_launcher:
        from .base import find_tool
        from .mpirun import OPENMPI_TOOLS, is_openmpi_launcher

        if find_tool(("prte",)) and find_tool(("prun", "prterun")):
            _openmpi_launcher.append("prrte")
        elif find_tool(OPENMPI_TOOLS, is_openmpi_launcher):
            _openmpi_launcher.append("mpirun")
        else:
            _openmpi_launcher.append(None)
    return _openmpi_launcher[0]


def pmix_routes(desc: dict, resources: Any, link: Any = None) -> bool:
    """May this pilot send a multi-rank Open MPI task that names no launcher to `pmix`? One
    whose description names no launcher, and whose nodes are all the agent's host (a local
    pilot) or have node executors (link: agent/node_link.py); not when PILOTFISH_PMIX=0 (what a
    benchmark's baseline sets)."""
    if desc.get("launcher") or os.environ.get("PILOTFISH_PMIX", "1").strip() in ("0", "off"):
        return False
    return link is not None or getattr(resources, "source", None) in ("local", "declared")


def _starts_mpi(name: str | None) -> bool:
    """Whether the launch method of this name starts MPI worlds (its class's starts_mpi)."""
    from . import launchers

    cls = launchers().get(name) if name else None
    return cls is not None and cls.starts_mpi()


def route(
    spec: Any, cwd: str | None, pmi: bool, pilot_launcher: str | None, pmix: bool = False
) -> Any:
    """The task (a multi-rank one that names no launcher) with the launcher of its MPI, or as
    it is when its program is not known to be MPI (module docstring). pmi: this pilot runs
    MPICH worlds itself (agent/pmi/worlds.routes); pilot_launcher: the pilot's named one;
    pmix: this pilot may run Open MPI worlds itself (pmix_routes)."""
    kind = program_mpi(
        spec.executable or "", list(spec.arguments or ()), dict(spec.environment or {}), cwd
    )
    if kind is None:
        if _starts_mpi(pilot_launcher) and opaque(spec.executable or ""):
            # (a script or interpreter: MPI or not, the pilot's MPI launcher can tell)
            return msgspec.structs.replace(spec, launcher=pilot_launcher)
        return spec
    if pilot_launcher:
        name: str | None = pilot_launcher
    elif kind == MPICH:
        name = "pmi" if pmi else None
    elif pmix and pmix_available():
        name = "pmix"
    else:
        name = openmpi_launcher() or ("pmix" if pmix else None)  # (pmix: refused, named)
    return msgspec.structs.replace(spec, launcher=name) if name else spec
