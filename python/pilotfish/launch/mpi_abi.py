"""Which MPI a task's program speaks, told from the program itself (no process is started).

A multi-rank task that names no launcher goes through pilotfish's own PMI server (launch
method `pmi`: no launcher process per task) when its program is of the MPICH ABI, since that is
the family whose libraries speak the simple PMI wire protocol; anything else keeps the
partition's launcher. The answer, in order:

1. the task's environment: `MPI4PY_MPIABI` (mpi4py >= 4: "mpich", "openmpi", "impi",
   "mpi-abi") or `MPI4PY_LIBMPI` (the library mpi4py loads: `libmpi.so.12` is MPICH's ABI,
   `libmpi.so.40` Open MPI's);
2. the executable, when it is an ELF file: its DT_NEEDED entries (read with pyelftools, the
   field's ELF reader): `libmpi.so.12` / `libmpich.so.12` (MPICH, Intel MPI, MVAPICH) or
   `libmpi.so.40` (Open MPI);
3. a Python interpreter running a script whose text names `mpi4py`: the library mpi4py loads
   by default in that interpreter's environment, `<prefix>/lib/libmpi.so` (a file, a link
   or a linker script naming the real one), as mpi4py itself resolves it (_mpi.py).

Anything else is None: not known to be MPI (a shell script, a program without libmpi). Such a
task keeps the pilot's launcher; naming `launcher="pmi"` routes it anyway, and a rank that then
ends without speaking PMI fails the task loudly (agent/pmi_worlds.py) -- never N singletons.

Answers are cached per (path, size, mtime): looking costs a stat per task after the first.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

MPICH = "mpich"
OPENMPI = "openmpi"

_NEEDED = {
    "libmpi.so.12": MPICH,
    "libmpich.so.12": MPICH,
    "libmpi_mt.so.12": MPICH,
    "libmpi.so.40": OPENMPI,
}
_ABI = {
    "mpich": MPICH,
    "impi": MPICH,
    "intelmpi": MPICH,
    "mvapich": MPICH,
    "openmpi": OPENMPI,
    "ompi": OPENMPI,
}
_SCRIPT_BYTES = 256 * 1024  # how much of a Python script is searched for "mpi4py"
_cache: dict[tuple, str | None] = {}


def _of_library(name: str) -> str | None:
    base = os.path.basename(name)
    for lib, kind in _NEEDED.items():
        if base.startswith(lib):
            return kind
    return None


def elf_mpi(path: str) -> str | None:
    """MPICH / OPENMPI when the ELF file at path links that ABI's libmpi, else None (also for a
    file that is not ELF or cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = ("elf", path, st.st_size, st.st_mtime_ns)
    if key in _cache:
        return _cache[key]
    kind = None
    try:
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                from elftools.elf.dynamic import DynamicSection
                from elftools.elf.elffile import ELFFile

                f.seek(0)
                for sec in ELFFile(f).iter_sections():
                    if isinstance(sec, DynamicSection):
                        for tag in sec.iter_tags("DT_NEEDED"):
                            kind = kind or _of_library(tag.needed)
    except Exception:  # noqa: BLE001 -- a file we cannot read as ELF is simply not known MPI
        kind = None
    if len(_cache) > 4096:
        _cache.clear()
    _cache[key] = kind
    return kind


def _python_default(python: str) -> str | None:
    """What mpi4py loads by default under this interpreter: <prefix>/lib/libmpi.so."""
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    for cand in dict.fromkeys((os.path.dirname(os.path.dirname(python)), prefix)):
        lib = os.path.join(cand, "lib", "libmpi.so")
        if not os.path.exists(lib):
            continue
        if os.path.islink(lib):
            return _of_library(os.path.realpath(lib))
        try:
            with open(lib, "rb") as f:
                head = f.read(4096)
        except OSError:
            continue
        m = re.search(rb"INPUT\s*\(\s*([^\s)]+)", head)  # a GNU ld linker script
        if m:
            return _of_library(m.group(1).decode(errors="replace"))
        return elf_mpi(lib) and _of_library(lib)
    return None


def _is_python(path: str) -> bool:
    return re.match(r"python(\d+(\.\d+)?)?\Z", os.path.basename(path)) is not None


def program_mpi(
    executable: str,
    arguments: list[str] | tuple = (),
    environment: dict[str, Any] | None = None,
    cwd: str | None = None,
) -> str | None:
    """MPICH, OPENMPI or None for a task's program (see the module docstring)."""
    env = environment or {}
    abi = str(env.get("MPI4PY_MPIABI") or "").lower()
    if abi in _ABI:
        return _ABI[abi]
    lib = env.get("MPI4PY_LIBMPI")
    if lib:
        kind = _of_library(str(lib))
        if kind is not None:
            return kind
    path = executable if "/" in executable else shutil.which(executable)
    if not path:
        return None
    if cwd and not os.path.isabs(path):
        path = os.path.join(cwd, path)
    if _is_python(executable) or _is_python(os.path.realpath(path)):
        script = next((a for a in arguments if not str(a).startswith("-")), None)
        if script is None:
            return None
        script = str(script)
        if cwd and not os.path.isabs(script):
            script = os.path.join(cwd, script)
        try:
            st = os.stat(script)
        except OSError:
            return None
        key = ("py", path, script, st.st_size, st.st_mtime_ns)
        if key not in _cache:
            try:
                with open(script, "rb") as f:
                    uses = b"mpi4py" in f.read(_SCRIPT_BYTES)
            except OSError:
                uses = False
            _cache[key] = _python_default(path) if uses else None
        return _cache[key]
    return elf_mpi(path)
