"""Which MPI a task's program speaks, told from the program itself (no process is started).

The answer (MPICH, OPENMPI or None) decides which path can make a multi-rank task's ranks ONE
world (launch/mpi_route.py): the MPICH ABI speaks the simple PMI wire protocol (pilotfish's
own `pmi`, `srun --mpi=pmi2`, hydra's `mpiexec`), Open MPI 5 only PMIx (a PRRTE DVM, Open
MPI's `mpirun`). It is read from the library the program loads, never from words in it:

1. an ELF executable that is not a Python interpreter: its DT_NEEDED entries (read with
   pyelftools, the field's ELF reader) -- `libmpi.so.12` / `libmpich.so.12` (MPICH, Intel MPI,
   MVAPICH) or `libmpi.so.40` (Open MPI). An ELF file without them (/bin/hostname, bash) is
   not MPI itself; the task's `MPI4PY_MPIABI` / `MPI4PY_LIBMPI` then still say what a script
   it runs loads (`sh -c "python x.py"`).
2. a Python interpreter: the library its mpi4py would load, resolved as mpi4py 4 resolves it
   (mpi4py/_mpiabi.py): `MPI4PY_MPIABI` in the task's environment; else each entry of
   `MPI4PY_LIBMPI` (a file, a name searched like dlopen does, or a directory holding
   libmpi.so, libmpi.so.12 or libmpi.so.40, tried in that order); else the same three names
   in the interpreter's prefix's lib/ (a venv's, the user base's, a system prefix other than
   /usr) and then the dynamic linker's own search. The first that dlopen would accept -- an
   ELF file: a GNU ld linker script named libmpi.so is skipped as dlopen skips it -- says
   the ABI by its DT_SONAME (or name).
   Whether the program uses MPI at all cannot be read from a Python interpreter: a task
   that chooses its library (MPI4PY_LIBMPI / MPI4PY_MPIABI) is taken to, and so is one whose
   code names mpi4py (the script, `-c` code, or `-m` module's source) -- an optimisation
   only: a multi-rank program the pilot did not recognise runs where no MPI can start as a
   singleton (launch/mpi_route.py: `SINGLETON_GUARD`), so its MPI_Init fails and names the
   fix instead of running as N copies of rank 0 of 1.

Anything else is None: not known to be MPI (a shell script, a program without libmpi).

Answers about files are cached per (path, size, mtime): looking costs a stat per task after
the first.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

MPICH = "mpich"
OPENMPI = "openmpi"
NAMES = {MPICH: "MPICH", OPENMPI: "Open MPI"}  # for reasons

_SONAMES = {
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
LIBMPI_NAMES = ("libmpi.so", "libmpi.so.12", "libmpi.so.40")  # mpi4py's order, in each dir
# where the dynamic linker looks after LD_LIBRARY_PATH (Debian multiarch first)
_SYSTEM_LIB_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
)
_CODE_BYTES = 256 * 1024  # how much of a Python program's source is searched for "mpi4py"
_cache: dict[tuple, Any] = {}


def _remember(key: tuple, value: Any) -> Any:
    if len(_cache) > 4096:
        _cache.clear()
    _cache[key] = value
    return value


def of_library(name: str) -> str | None:
    """MPICH / OPENMPI for a library's file name or soname (libmpi.so.40.30.5 too)."""
    base = os.path.basename(str(name))
    for lib, kind in _SONAMES.items():
        if base == lib or base.startswith(lib + "."):
            return kind
    return None


def abi_name(value: str) -> str | None:
    """MPICH / OPENMPI for an MPI4PY_MPIABI value ("mpich", "Open MPI", "impi", ...)."""
    return _ABI.get(re.sub(r"[\s_-]", "", str(value)).lower())


def elf_dynamic(path: str) -> tuple[str | None, tuple[str, ...]] | None:
    """(DT_SONAME, DT_NEEDED entries) of an ELF file; None when path is not a readable ELF
    file (a linker script, a shell script, missing)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = ("elf", path, st.st_size, st.st_mtime_ns)
    if key in _cache:
        return _cache[key]
    found: tuple[str | None, tuple[str, ...]] | None = None
    try:
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                from elftools.elf.dynamic import DynamicSection
                from elftools.elf.elffile import ELFFile

                f.seek(0)
                soname, needed = None, []
                for sec in ELFFile(f).iter_sections():
                    if isinstance(sec, DynamicSection):
                        for tag in sec.iter_tags():
                            if tag.entry.d_tag == "DT_NEEDED":
                                needed.append(tag.needed)  # type: ignore[attr-defined]  # pyelftools sets it at run time (setattr); its types omit it
                            elif tag.entry.d_tag == "DT_SONAME":
                                soname = tag.soname  # type: ignore[attr-defined]  # set at run time, as needed above
                found = (soname, tuple(needed))
    except Exception:  # noqa: BLE001 -- a file we cannot read as ELF is simply not known MPI
        found = None
    return _remember(key, found)


def elf_mpi(path: str) -> str | None:
    """MPICH / OPENMPI when the ELF executable at path links that ABI's libmpi, else None
    (also for a file that is not ELF or cannot be read)."""
    dyn = elf_dynamic(path)
    if dyn is None:
        return None
    for lib in dyn[1]:
        kind = of_library(lib)
        if kind is not None:
            return kind
    return None


def library_mpi(path: str) -> str | None:
    """The ABI of a shared library file: its DT_SONAME, else its (resolved) file name."""
    dyn = elf_dynamic(path)
    if dyn is None:
        return None
    return of_library(dyn[0] or "") or of_library(os.path.realpath(path))


# -- what mpi4py loads ----------------------------------------------------------------------


def _search_dirs(env: Mapping[str, Any]) -> list[str]:
    """Where dlopen looks for a bare library name: LD_LIBRARY_PATH, then the system's dirs."""
    ld = str(env.get("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", "")))
    return [d for d in ld.split(":") if d] + list(_SYSTEM_LIB_DIRS)


def _loadable(path: str) -> bool:
    """Would dlopen accept this file? An ELF file (a linker script is refused by dlopen)."""
    return os.path.isfile(path) and elf_dynamic(path) is not None


def _find(name: str, env: Mapping[str, Any]) -> str | None:
    if "/" in name:
        return name if _loadable(name) else None
    for d in _search_dirs(env):
        cand = os.path.join(d, name)
        if _loadable(cand):
            return cand
    return None


def python_prefixes(python: str, env: Mapping[str, Any] | None = None) -> list[str]:
    """The prefixes whose lib/ mpi4py searches under this interpreter (mpi4py's
    _site_prefixes): a venv's own; the user base when user site-packages are on; the base
    prefix of an interpreter that is not a venv's (never /usr)."""
    env = env or {}
    home = str(env.get("HOME") or os.environ.get("HOME") or "")
    key = ("prefixes", python, home, env.get("PYTHONUSERBASE"), env.get("PYTHONNOUSERSITE"))
    if key in _cache:  # (an interpreter's prefixes do not move while the pilot runs)
        return list(_cache[key])
    out: list[str] = []
    venv = None
    for d in (os.path.dirname(os.path.dirname(python)),):  # (a venv's bin/python is a link)
        if os.path.isfile(os.path.join(d, "pyvenv.cfg")):
            venv = d
    real = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if venv is None and os.path.isfile(os.path.join(real, "pyvenv.cfg")):
        venv = real
    user_site = True
    if venv is not None:
        out.append(venv)
        try:
            with open(os.path.join(venv, "pyvenv.cfg")) as f:
                cfg = f.read()
        except OSError:
            cfg = ""
        user_site = bool(re.search(r"include-system-site-packages\s*=\s*true", cfg, re.I))
    if user_site and not str(env.get("PYTHONNOUSERSITE", "")):
        base = str(env.get("PYTHONUSERBASE") or (os.path.join(home, ".local") if home else ""))
        if base:
            out.append(base)
    if venv is None and real != "/usr":
        out.append(real)
    return list(_remember(key, [p for p in dict.fromkeys(out) if p != "/usr"]))


def mpi4py_library(python: str, env: Mapping[str, Any] | None = None) -> str | None:
    """The file mpi4py would load under this interpreter and environment (None: none)."""
    env = env or {}
    libmpi = str(env.get("MPI4PY_LIBMPI") or "")
    entries = libmpi.split(os.pathsep) if libmpi else [*python_prefixes(python, env), ""]
    for entry in entries:
        entry = os.path.expanduser(os.path.expandvars(entry)) if entry else ""
        if entry and not libmpi:
            entry = os.path.join(entry, "lib")
        if entry == "" or os.path.isdir(entry):
            for name in LIBMPI_NAMES:
                found = _find(os.path.join(entry, name) if entry else name, env)
                if found:
                    return found
        else:
            found = _find(entry, env)
            if found:
                return found
    return None


def mpi4py_mpi(python: str, env: Mapping[str, Any] | None = None) -> str | None:
    """MPICH / OPENMPI for what mpi4py loads under this interpreter and environment."""
    env = env or {}
    abi = env.get("MPI4PY_MPIABI")
    if abi:
        return abi_name(str(abi))
    lib = mpi4py_library(python, env)
    if lib is not None:
        return library_mpi(lib)
    named = str(env.get("MPI4PY_LIBMPI") or "")  # (not here: maybe only on the compute nodes)
    return next((k for k in map(of_library, named.split(os.pathsep)) if k), None)


def python_lib(python: str, kind: str) -> str | None:
    """This interpreter's prefix's library of that ABI (libmpi.so.12 / .40), when it has one:
    what MPI4PY_LIBMPI can name to make mpi4py speak the launcher's protocol."""
    name = {MPICH: "libmpi.so.12", OPENMPI: "libmpi.so.40"}[kind]
    for prefix in python_prefixes(python):
        path = os.path.join(prefix, "lib", name)
        if _loadable(path):
            return path
    return None


# -- the program ------------------------------------------------------------------------------


def is_python(path: str) -> bool:
    return re.match(r"python(\d+(\.\d+)?)?\Z", os.path.basename(path)) is not None


def _module_source(python: str, module: str, cwd: str | None) -> str | None:
    """The file `python -m module` runs, searched in cwd and the interpreter's site-packages
    (nothing is imported)."""
    parts = module.split(".")
    roots = [cwd or os.getcwd()]
    for prefix in python_prefixes(python) or [os.path.dirname(os.path.dirname(python))]:
        lib = os.path.join(prefix, "lib")
        try:
            roots += [
                os.path.join(lib, d, "site-packages")
                for d in sorted(os.listdir(lib))
                if d.startswith("python3")
            ]
        except OSError:
            pass
    for root in roots:
        base = os.path.join(root, *parts)
        for cand in (base + ".py", os.path.join(base, "__main__.py")):
            if os.path.isfile(cand):
                return cand
    return None


def _names_mpi4py(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = ("src", path, st.st_size, st.st_mtime_ns)
    if key not in _cache:
        try:
            with open(path, "rb") as f:
                _remember(key, b"mpi4py" in f.read(_CODE_BYTES))
        except OSError:
            _remember(key, False)
    return bool(_cache.get(key))


def python_uses_mpi(python: str, arguments: Sequence[str], cwd: str | None) -> bool:
    """Does this Python command line's code name mpi4py (script, -c code, -m module)?"""
    args = [str(a) for a in arguments]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-c" or (a.startswith("-") and not a.startswith("--") and a.endswith("c")):
            return i + 1 < len(args) and "mpi4py" in args[i + 1][:_CODE_BYTES]
        if a == "-m":
            src = _module_source(python, args[i + 1], cwd) if i + 1 < len(args) else None
            return src is not None and _names_mpi4py(src)
        if a in ("-X", "-W", "--check-hash-based-pycs"):
            i += 2
            continue
        if a.startswith("-") and a != "-":
            i += 1
            continue
        script = a if os.path.isabs(a) or not cwd else os.path.join(cwd, a)
        return _names_mpi4py(script)
    return False


_SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "env")


def opaque(executable: str) -> bool:
    """Can a program run MPI that this module cannot see? A script (not ELF), a Python
    interpreter or a shell -- not an ELF binary without libmpi (/bin/hostname)."""
    path = executable if "/" in executable else shutil.which(executable)
    if not path:
        return True
    if is_python(path) or is_python(os.path.realpath(path)):
        return True
    if os.path.basename(path) in _SHELLS or os.path.basename(os.path.realpath(path)) in _SHELLS:
        return True
    return elf_dynamic(path) is None


def program_mpi(
    executable: str,
    arguments: Sequence[str] = (),
    environment: Mapping[str, Any] | None = None,
    cwd: str | None = None,
) -> str | None:
    """MPICH, OPENMPI or None for a task's program (see the module docstring)."""
    env = environment or {}
    chosen = bool(env.get("MPI4PY_MPIABI") or env.get("MPI4PY_LIBMPI"))
    path = executable if "/" in executable else shutil.which(executable)
    if path and cwd and not os.path.isabs(path):
        path = os.path.join(cwd, path)
    if path and (is_python(executable) or is_python(os.path.realpath(path))):
        if chosen or python_uses_mpi(path, arguments, cwd):
            return mpi4py_mpi(path, env)
        return None
    kind = elf_mpi(path) if path else None
    if kind is None and chosen:  # a wrapper (sh -c "python x.py") of a chosen library
        kind = mpi4py_mpi(path or executable, env)
    return kind
