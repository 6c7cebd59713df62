"""Open MPI worlds across hosts without a launcher (issue 51 item 2): on a Slurm pilot of two
hosts of the test cluster, an Open MPI task that names no launcher goes to launch method
`pmix` -- the agent spawns its ranks on its own host, each node executor on its own, every
one of those processes' OpenPMIx server serves its ranks, and fences cross hosts through the
agent's relay (agent/pmix_relay.py). No prterun, no DVM. Before: these tasks went to a PRRTE
DVM (`prrte`).

- a C world of 2 (one rank per host) and of 4 (two per host), an mpi4py world of 2: one world
  (size, distinct ranks, an allreduce), each rank on the host the placer chose;
- a rank on the second host that exits 3: FAILED naming the rank, the other killed.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_pmix_hosts.py
"""

from __future__ import annotations

import os
import sys

import pytest
from mpi_programs import OPENMPI_LIB, PROGS, build_ompi_hello

import pilotfish as pf
from pilotfish.launch.pmix import available
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.mpi,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not available(), reason="needs libpmix2 (OpenPMIx)"),
]

PY = sys.executable
CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)
OMPI = {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
DIES = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD\n"
    "if c.rank == 1: os._exit(3)\n"
    "c.Barrier()\n"
)


@pytest.fixture(scope="module")
def ran(slurm, tmp_path_factory):
    ompi = build_ompi_hello(tmp_path_factory)
    cases = {
        "c2": dict(executable=ompi, ranks=2, cores_per_rank=CORES),
        "c4": dict(executable=ompi, ranks=4, cores_per_rank=CORES // 2),
        "py2": dict(
            executable=PY,
            arguments=[str(PROGS / "mpi4py_hello.py")],
            ranks=2,
            cores_per_rank=CORES,
            environment=OMPI,
        ),
        "dies": dict(
            executable=PY,
            arguments=["-c", DIES],
            ranks=2,
            cores_per_rank=CORES,
            environment=OMPI,
            timeout=60,
        ),
    }
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        pilot, tmgr = slurm_pilot(s, nodes=2)
        names = list(cases)
        tasks = tmgr.submit_tasks([pf.TaskDescription(**cases[n]) for n in names])
        tmgr.wait_tasks([t.uid for t in tasks], timeout=300)
        out = dict(zip(names, tasks))
        sandbox = pilot.sandbox
        pilot.cancel()
    return out, sandbox


@pytest.mark.parametrize("name, n", [("c2", 2), ("c4", 4), ("py2", 2)])
def test_open_mpi_ranks_on_two_hosts_form_one_world(ran, name, n):
    t = ran[0][name]
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
    rows = sorted(ln.split() for ln in t.stdout.splitlines() if ln.startswith("rank "))
    assert [r[:4] for r in rows] == [["rank", str(r), "size", str(n)] for r in range(n)], t.stdout
    assert len({r[5] for r in rows}) == 2, t.stdout  # (its ranks on both hosts)
    if name.startswith("c"):
        assert all(r[-1] == str(n * (n - 1) // 2) for r in rows), t.stdout  # the allreduce


def test_the_path_is_pmix_not_a_dvm(ran):
    tasks, sandbox = ran
    assert os.path.isdir(os.path.join(sandbox, "pmix")), os.listdir(sandbox)
    assert not os.path.exists(os.path.join(sandbox, "prrte")), os.listdir(sandbox)
    served = [
        n
        for n in os.listdir(os.path.join(sandbox, "nodes"))
        if os.path.isdir(os.path.join(sandbox, "nodes", n, "pmix"))
    ]
    assert served, "no node executor served PMIx"


def test_a_rank_on_the_other_host_exiting_3_fails_the_task_naming_it(ran):
    t = ran[0]["dies"]
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert t.reason.startswith("rank 1 exited with code 3"), t.reason
