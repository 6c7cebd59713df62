"""One world has one name on every host (issue 51): MPICH knows a rank's world by the KVS name
its process manager tells it (PMI-1 get_my_kvsname, PMI-2 job-getid). Ranks of one world told
different names on different hosts -- each node executor drew a fresh name of its own -- took
each other for processes of another world: MPI_Intercomm_create_from_groups aborted every rank
("allreduce_group.c ... (cdst) != MPI_UNDEFINED"), mpi4py's test_comm_inter with it, while local
`mpiexec` and one host passed. A 2-rank and a 4-rank mpi4py world on the default path across
hosts (tests/agent/pmi_progs/mpi4py_groups.py) rebuild an intercommunicator and COMM_WORLD from
their groups, CONGRUENT on every rank."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish.launch.base import by_node
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

PROG = Path(__file__).resolve().parents[1] / "agent" / "pmi_progs" / "mpi4py_groups.py"
CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)


@pytest.fixture(scope="module")
def pilot(slurm, tmp_path_factory):
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        yield slurm_pilot(s)


@pytest.mark.parametrize("n", [2, 4])
def test_communicators_from_groups_across_hosts(pilot, n):
    _, tmgr = pilot
    (t,) = tmgr.submit_tasks(
        [
            pf.TaskDescription(
                executable=sys.executable, arguments=[str(PROG)], ranks=n, cores_per_rank=CORES
            )
        ]
    )
    tmgr.wait_tasks([t.uid], timeout=120)
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr[-2000:])
    assert len({s.node for s in by_node(t.slots)}) == n, t.slots  # (a host per rank)
    lines = sorted(t.stdout.splitlines())
    assert lines == [f"rank {r} intercomm congruent world congruent" for r in range(n)], t.stdout
