"""Open MPI tasks without a launcher on a local pilot (issue 51 item 2, one host): launch
method `pmix` -- the agent spawns the ranks, the pilot's own OpenPMIx server
(agent/pmix_server.py) makes them one world. Before: the same tasks went to a PRRTE DVM
(`prrte`, one `prterun` per task); with neither a server nor PRRTE/mpirun they are refused
naming the package to install. A rank that exits non-zero fails its task naming the rank,
and the other ranks, blocked waiting for it, are killed."""

from __future__ import annotations

import os
import sys

import pytest
from launch_cases import EMULATED
from mpi_programs import OPENMPI_LIB, PROGS, build_hello, build_ompi_hello

import pilotfish as pf
from pilotfish.launch import LaunchError, get_launcher
from pilotfish.launch.mpi_route import pmix_routes, route
from pilotfish.launch.pmix import available

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not available(), reason="needs libpmix2 (OpenPMIx)"),
]

PY = sys.executable
OMPI = {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
# rank 1 exits 3 after MPI_Init while rank 0 waits in a barrier for it: without the kill,
# rank 0 would wait forever
DIES = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD\n"
    "if c.rank == 1: os._exit(3)\n"
    "c.Barrier()\n"
)

# MPI_Abort on rank 0: the server is told (logged), the rank exits with its code
ABORTS = "from mpi4py import MPI; c = MPI.COMM_WORLD\nif c.rank == 0: c.Abort(5)\nc.Barrier()\n"


@pytest.fixture(scope="module")
def ompi(tmp_path_factory) -> str:
    return build_ompi_hello(tmp_path_factory)


def _rows(t) -> list[list[str]]:
    return sorted(ln.split()[:4] for ln in t.stdout.splitlines() if ln.startswith("rank "))


def test_open_mpi_tasks_on_a_local_pilot_form_one_world_through_pmix(ompi, tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(
            pf.PilotDescription(resource="local", cores_per_node=4, runtime="5m")
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        c2, c4, py2, dies, aborts = tmgr.submit_tasks(
            [
                pf.TaskDescription(executable=ompi, ranks=2),
                pf.TaskDescription(executable=ompi, ranks=4),
                pf.TaskDescription(
                    executable=PY,
                    arguments=[str(PROGS / "mpi4py_hello.py")],
                    ranks=2,
                    environment=OMPI,
                ),
                pf.TaskDescription(
                    executable=PY, arguments=["-c", DIES], ranks=2, environment=OMPI, timeout=60
                ),
                pf.TaskDescription(
                    executable=PY, arguments=["-c", ABORTS], ranks=2, environment=OMPI, timeout=60
                ),
            ]
        )
        tmgr.wait_tasks(timeout=120)
        for t, n in ((c2, 2), (c4, 4), (py2, 2)):
            assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
            assert _rows(t) == [["rank", str(r), "size", str(n)] for r in range(n)], t.stdout
        assert "sum 1" in c2.stdout and "sum 6" in c4.stdout, (c2.stdout, c4.stdout)
        assert dies.state == pf.FAILED, (dies.state, dies.reason)
        assert dies.reason.startswith("rank 1 exited with code 3"), dies.reason
        assert "timeout" not in dies.reason, dies.reason
        assert aborts.state == pf.FAILED, (aborts.state, aborts.reason)
        assert aborts.reason.startswith("rank 0 exited with code 5"), aborts.reason
        sandbox = pilot.sandbox
    # the path: the pilot's PMIx server (its directory), no DVM, no mpirun
    assert os.path.isdir(os.path.join(sandbox, "pmix")), os.listdir(sandbox)
    assert not os.path.exists(os.path.join(sandbox, "prrte")), os.listdir(sandbox)


def test_routing_open_mpi_goes_to_pmix_on_a_local_pilot_only(ompi, monkeypatch):
    from pilotfish._wire import TaskSpec

    spec = TaskSpec(uid="t.1", executable=ompi, ranks=2)
    local = type("R", (), {"source": "local"})()
    slurm = type("R", (), {"source": "slurm"})()
    assert pmix_routes({}, local) and not pmix_routes({}, slurm)
    assert not pmix_routes({"launcher": "direct"}, local)
    assert route(spec, None, True, None, pmix_routes({}, local)).launcher == "pmix"
    assert route(spec, None, True, None, pmix_routes({}, slurm)).launcher in ("prrte", "mpirun")
    monkeypatch.setenv("PILOTFISH_PMIX", "0")
    assert route(spec, None, True, None, pmix_routes({}, local)).launcher in ("prrte", "mpirun")


def test_without_libpmix_pmix_is_refused_naming_the_package(monkeypatch, tmp_path):
    import pilotfish.launch.pmix as P

    monkeypatch.setattr(P, "LIBPMIX", (str(tmp_path / "libpmix.so.2"),))
    lm = get_launcher("pmix", EMULATED, {"dvm_dir": str(tmp_path / "pmix")})
    with pytest.raises(LaunchError, match="package libpmix2"):
        lm.begin()


def test_an_mpich_program_is_refused_by_pmix_at_build(tmp_path_factory):
    from pilotfish.launch import LAUNCHERS
    from pilotfish.launch.mpi_check import check
    from pilotfish._wire import TaskSpec

    mpich = build_hello(tmp_path_factory)
    with pytest.raises(LaunchError, match="serves PMIx"):
        check(LAUNCHERS["pmix"], TaskSpec(uid="t.2", executable=mpich, ranks=2))
