"""One world per multi-rank MPI task (issue 51, item 1): which MPI a program speaks, read from
the library it loads (launch/mpi_abi.py) -- never from words in a script for the ABI -- and
what each launch method does with it (launch/mpi_route.py): the path of its MPI when it names
no launcher, refused at build where its MPI cannot form one world, a Python program given the
launcher's library, and plain processes guarded so that an MPI the pilot did not recognise
fails loudly instead of running as singletons. The end-to-end runs on the cluster of hosts:
tests/batch/test_one_world.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_cases import EMULATED, UID
from mpi_programs import OPENMPI_LIB, PROGS, build_hello, build_ompi_hello

from pilotfish._mpi import libmpi_hint
from pilotfish._wire import RankSlot, TaskSpec
from pilotfish.launch import LAUNCHERS, LaunchError, get_launcher
from pilotfish.launch.mpi_abi import MPICH, OPENMPI, mpi4py_library, program_mpi
from pilotfish.launch.mpi_check import SINGLETON_GUARD, check
from pilotfish.launch.mpi_route import openmpi_launcher, route

VENV = Path(sys.prefix)
PY = str(VENV / "bin" / "python")
MPICH_LIB = VENV / "lib" / "libmpi.so.12"
SLOTS2 = [RankSlot("node0000", 0, (0,), ()), RankSlot("node0000", 0, (1,), ())]


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> str:
    return build_hello(tmp_path_factory)


@pytest.fixture(scope="module")
def ompi(tmp_path_factory) -> str:
    return build_ompi_hello(tmp_path_factory)


def spec(executable, arguments=(), ranks=2, **kw):
    return TaskSpec(uid=UID, executable=executable, arguments=list(arguments), ranks=ranks, **kw)


def test_a_binary_says_its_mpi_by_the_library_it_links(hello, ompi, tmp_path):
    assert program_mpi(hello) == MPICH and program_mpi(ompi) == OPENMPI
    assert program_mpi("/bin/hostname") is None and program_mpi("hostname") is None
    # a stray MPI4PY_* does not change what a linked binary loads
    assert program_mpi(ompi, [], {"MPI4PY_MPIABI": "mpich"}) == OPENMPI
    # a wrapper that is not MPI itself: the library its environment chooses
    assert (
        program_mpi("/bin/sh", ["-c", "python x.py"], {"MPI4PY_LIBMPI": str(OPENMPI_LIB)})
        == OPENMPI
    )


def test_python_by_the_library_mpi4py_loads(tmp_path):
    """The default: this venv's lib/libmpi.so is a linker script (dlopen refuses it), so
    mpi4py loads libmpi.so.12 -- MPICH; MPI4PY_LIBMPI as a path, a bare name on
    LD_LIBRARY_PATH, a directory, a link, or a list."""
    assert mpi4py_library(PY) == str(MPICH_LIB)
    assert program_mpi(PY, [str(PROGS / "mpi4py_hello.py")]) == MPICH
    assert program_mpi(PY, ["-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]) == MPICH
    assert program_mpi(PY, ["-u", "-m", "mpi4py.bench", "helloworld"]) == MPICH
    assert program_mpi(PY, ["-c", "print(1)"]) is None  # (not known to use MPI)
    libdir = tmp_path / "ompi" / "lib"
    libdir.mkdir(parents=True)
    (libdir / "libmpi.so").write_text("INPUT(libmpi.so.12)\n")  # a linker script: skipped
    (libdir / "libmpi.so.40").symlink_to(OPENMPI_LIB)
    link = tmp_path / "libmpi-link.so"
    link.symlink_to(OPENMPI_LIB)
    plain = tmp_path / "work.py"
    plain.write_text("import helpers  # (which use MPI: no word here says so)\n")
    for value, env in (
        (str(OPENMPI_LIB), {}),
        (str(libdir), {}),
        (str(link), {}),
        ("libmpi.so.40", {"LD_LIBRARY_PATH": str(libdir)}),
        (f"/nowhere/libmpi.so:{libdir}", {}),
    ):
        got = program_mpi(PY, [str(plain)], {"MPI4PY_LIBMPI": value, **env})
        assert got == OPENMPI, (value, got)
    assert program_mpi(PY, [str(plain)], {"MPI4PY_MPIABI": "Open MPI"}) == OPENMPI
    assert program_mpi(PY, [str(plain)], {"MPI4PY_LIBMPI": str(MPICH_LIB)}) == MPICH


def test_a_task_that_names_no_launcher_gets_the_path_of_its_mpi(hello, ompi):
    """MPICH: the pilot's own PMI where it routes there; Open MPI: PRRTE (the venv has it);
    a pilot that names its launcher: that one (its build judges); not MPI: as it is."""
    assert openmpi_launcher() == "prrte"
    assert route(spec(hello), None, True, None).launcher == "pmi"
    assert route(spec(hello), None, False, None).launcher is None
    assert route(spec(ompi), None, True, None).launcher == "prrte"
    assert route(spec(ompi), None, False, None).launcher == "prrte"
    py = spec(PY, ["x.py"], environment={"MPI4PY_LIBMPI": str(OPENMPI_LIB)})
    assert route(py, None, True, None).launcher == "prrte"
    assert route(spec(hello), None, False, "prrte").launcher == "prrte"
    assert route(spec("/bin/hostname"), None, True, None).launcher is None
    assert route(spec("/bin/hostname"), None, False, "prrte").launcher is None
    # what the pilot cannot read (an interpreter, a shell, a script) may be MPI: a pilot's
    # MPI launcher takes it, not the shortcut to plain processes
    assert route(spec(PY, ["-c", "print(1)"]), None, False, "prrte").launcher == "prrte"
    assert route(spec("/bin/sh", ["-c", "./a.out"]), None, False, "srun").launcher == "srun"
    assert route(spec(PY, ["-c", "print(1)"]), None, True, None).launcher is None
    assert route(spec(PY, ["-c", "print(1)"]), None, False, "direct").launcher is None


def test_a_launcher_refuses_an_mpi_it_cannot_make_one_world(hello, ompi):
    with pytest.raises(
        LaunchError,
        match=r"MPICH program .* one MPI world of 2 ranks .*"
        r"launcher 'prrte' serves PMIx.*launcher='pmi'",
    ):
        check(LAUNCHERS["prrte"], spec(hello))
    with pytest.raises(LaunchError, match=r"MPICH program.*launcher='pmi'"):
        check(LAUNCHERS["mpirun"], spec(hello))
    for method in ("pmi", "mpiexec"):
        with pytest.raises(
            LaunchError,
            match=rf"Open MPI program .*'{method}' serves PMI, "
            r"and Open MPI speaks only PMIx.*'prrte'",
        ):
            check(LAUNCHERS[method], spec(ompi))
    for method in ("nodes", "direct"):
        with pytest.raises(
            LaunchError,
            match=rf"Open MPI.*'{method}' starts its 2 ranks as "
            r"plain processes.*launcher='prrte'",
        ):
            check(LAUNCHERS[method], spec(ompi))
    assert check(LAUNCHERS["prrte"], spec(ompi)) == {} and check(LAUNCHERS["pmi"], spec(hello)) == {}
    assert check(LAUNCHERS["prrte"], spec(hello, ranks=1)) == {}  # one rank: its own world
    assert check(LAUNCHERS["srun"], spec(ompi)) == {}  # (srun chooses --mpi itself: srun.py)
    assert check(LAUNCHERS["nodes"], spec("/bin/hostname")) == {}


def test_python_gets_the_launchers_library():
    """mpi4py speaks either ABI: under PRRTE a Python program that did not choose gets the
    Open MPI library of its prefix, under the pilot's PMI MPICH's; one that chose keeps it
    and is refused where it cannot form one world."""
    prog = spec(PY, [str(PROGS / "mpi4py_hello.py")])
    assert check(LAUNCHERS["prrte"], prog) == {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
    assert check(LAUNCHERS["mpirun"], spec(PY, ["-c", "print(1)"])) == {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
    assert check(LAUNCHERS["pmi"], prog) == {"MPI4PY_LIBMPI": str(MPICH_LIB)}
    chose = spec(
        PY, [str(PROGS / "mpi4py_hello.py")], environment={"MPI4PY_LIBMPI": str(MPICH_LIB)}
    )
    with pytest.raises(LaunchError, match="MPICH program"):
        check(LAUNCHERS["prrte"], chose)
    lm = get_launcher("mpirun", EMULATED)
    (p,) = lm.build(prog, SLOTS2, "/tmp")
    assert p.env["MPI4PY_LIBMPI"] == str(OPENMPI_LIB)
    assert p.argv[p.argv.index("MPI4PY_LIBMPI") - 1] == "-x"  # (forwarded by name)


def test_plain_processes_of_a_multi_rank_task_are_guarded(hello):
    lm = get_launcher("direct", EMULATED)
    procs = lm.build(spec("/bin/hostname"), SLOTS2, "/tmp")
    assert [p.env.get("PMIX_NAMESPACE") for p in procs] == [SINGLETON_GUARD["PMIX_NAMESPACE"]] * 2
    (one,) = lm.build(spec("/bin/hostname", ranks=1), SLOTS2[:1], "/tmp")
    assert "PMIX_NAMESPACE" not in one.env
    with pytest.raises(LaunchError, match="MPICH program"):
        lm.build(spec(hello), SLOTS2, "/tmp")


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["mpich", "openmpi", "mpi4py"])
def test_the_guard_fails_an_mpi_that_would_be_a_singleton(hello, ompi, which):
    """Real libraries, no launcher: with the guard MPI_Init fails (MPICH: a PMIx environment
    it does not speak; Open MPI: no PMIx server) and the stderr names the fix; without it
    each would run as rank 0 of 1. A program that is not MPI does not notice."""
    argv = {"mpich": [hello], "openmpi": [ompi], "mpi4py": [PY, str(PROGS / "mpi4py_hello.py")]}[
        which
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "OMPI_", "PRTE"))}
    free = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert free.returncode == 0 and " size 1 " in free.stdout, (free.stdout, free.stderr)
    r = subprocess.run(
        argv, env={**env, **SINGLETON_GUARD}, capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and not r.stdout, (r.returncode, r.stdout, r.stderr)
    hint = libmpi_hint(r.stderr)
    want = (
        "Open MPI's libmpi without a PMIx server"
        if which == "openmpi"
        else "MPICH's libmpi in a PMIx environment"
    )
    assert hint is not None and want in hint, r.stderr
    h = subprocess.run(
        ["/bin/hostname"],
        env={**env, **SINGLETON_GUARD},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert h.returncode == 0 and h.stdout.strip()
