"""Every multi-rank MPI task one world, whatever its MPI (issue 51, item 1; launch/mpi_route.py),
on Slurm pilots of two hosts of the test cluster: no task ends DONE with ranks that each see a
world of size 1. Each row failed before:

- a pilot that names no launcher: an Open MPI program (C against libmpi.so.40, or mpi4py with
  MPI4PY_LIBMPI=libmpi.so.40) that fits on one host ran as plain processes through the node
  executors -- DONE, every rank "size 1"; on two hosts it was refused ("use launcher='prrte'").
  Now it goes to the pilot's own PMIx servers (launch method `pmix`, issue 51 item 2; a PRRTE
  DVM where OpenPMIx's library is missing): DONE, one world.
- a Python program that uses MPI where the pilot cannot read it (no "mpi4py" in its text) ran
  as plain processes: DONE as singletons. Now its MPI_Init fails and the reason names the fix.
- a pilot with launcher="prrte": one-host tasks took the same shortcut (DONE as singletons,
  Open MPI and MPICH alike); an MPICH program is now refused before it reaches the DVM, naming
  the launcher to use (on two hosts it reached the DVM and died of "unsupported PMI version
  PMIx"); a Python program gets the DVM's library and forms one world.
- (item 4) a rank that hangs before MPI_Init under a task timeout: FAILED for the timeout, not
  "ended without speaking PMI: not a program of the MPICH ABI".

/bin/hostname per rank stays DONE everywhere.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_one_world.py
"""

from __future__ import annotations

import os
import sys

import pytest
from mpi_programs import OPENMPI_LIB, PROGS, build_hello, build_ompi_hello

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.prrte, pytest.mark.timeout(600)]

PY = sys.executable
CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)
SIZE_OF = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "os.write(1, f'rank {c.rank} size {c.size} host {MPI.Get_processor_name()}\\n'.encode())"
)
OMPI = {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
HUNG_TIMEOUT = 5  # (users met it with 20 s; the PMI init timeout is 60 s)


@pytest.fixture(scope="module")
def progs(tmp_path_factory) -> dict[str, str]:
    """The C worlds, and a Python program whose MPI comes from a module it imports (no word in
    the script says so)."""
    d = tmp_path_factory.mktemp("nowords")
    (d / "helper_world.py").write_text(
        "from mpi4py import MPI\n"
        "def hello():\n"
        "    c = MPI.COMM_WORLD\n"
        "    return f'rank {c.rank} size {c.size} host {MPI.Get_processor_name()}'\n"
    )
    (d / "work.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        # (one write per line: PRRTE gives ranks a pty, where print() writes the line and its
        # newline apart, and two ranks' lines interleave: "rank 0 ... n1rank 1 ... n1")
        "import helper_world\nos.write(1, (helper_world.hello() + '\\n').encode())\n"
    )
    return {
        "mpich": build_hello(tmp_path_factory),
        "ompi": build_ompi_hello(tmp_path_factory),
        "nowords": str(d / "work.py"),
    }


def _run(slurm, tmp_path_factory, launcher, cases):
    """One two-host pilot (launcher: the pilot's, or None), every case submitted at once;
    {name: task} once all ended."""
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        pilot, tmgr = slurm_pilot(s, nodes=2, **({"launcher": launcher} if launcher else {}))
        names = list(cases)
        tasks = tmgr.submit_tasks([pf.TaskDescription(**cases[n]) for n in names])
        tmgr.wait_tasks([t.uid for t in tasks], timeout=300)
        out = dict(zip(names, tasks))
        pilot.cancel()
    out["events"] = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    return out


@pytest.fixture(scope="module")
def default_pilot(slurm, tmp_path_factory, progs):
    return _run(
        slurm,
        tmp_path_factory,
        None,
        {
            "ompi_c_one_host": dict(executable=progs["ompi"], ranks=2),
            "ompi_c_two_hosts": dict(executable=progs["ompi"], ranks=2, cores_per_rank=CORES),
            "ompi_py_4x4": dict(
                executable=PY,
                arguments=["-c", SIZE_OF],
                ranks=4,
                cores_per_rank=4,
                environment=OMPI,
            ),
            "ompi_py_two_hosts": dict(
                executable=PY,
                arguments=[str(PROGS / "mpi4py_hello.py")],
                ranks=2,
                cores_per_rank=CORES,
                environment=OMPI,
            ),
            "mpich_c": dict(executable=progs["mpich"], ranks=2),
            "nowords": dict(executable=PY, arguments=[progs["nowords"]], ranks=2),
            "hostname": dict(executable="/bin/hostname", ranks=2),
            # (a rank on each host: one on the agent's own, whose PMI server is the agent's)
            "hung": dict(
                executable=progs["mpich"],
                arguments=["presleep", "300"],
                ranks=2,
                cores_per_rank=CORES,
                timeout=HUNG_TIMEOUT,
            ),
        },
    )


@pytest.fixture(scope="module")
def prrte_pilot(slurm, tmp_path_factory, progs):
    return _run(
        slurm,
        tmp_path_factory,
        "prrte",
        {
            # (retries: PRRTE's own transients across hosts -- a rank that never starts, now
            # and then; launch/prrte.py -- cost a run, never the check of one world)
            "ompi_c_one_host": dict(executable=progs["ompi"], ranks=2, retries=2),
            "ompi_c_two_hosts": dict(
                executable=progs["ompi"], ranks=2, cores_per_rank=CORES, retries=2
            ),
            "mpich_c_one_host": dict(executable=progs["mpich"], ranks=2),
            "mpich_c_two_hosts": dict(executable=progs["mpich"], ranks=2, cores_per_rank=CORES),
            "mpi4py_default": dict(
                executable=PY, arguments=[str(PROGS / "mpi4py_hello.py")], ranks=2, retries=2
            ),
            "nowords": dict(executable=PY, arguments=[progs["nowords"]], ranks=2, retries=2),
            "hostname": dict(executable="/bin/hostname", ranks=2),
            # (item 3) ranks that start and fail: final at once, never launched again
            "rank1_fails": dict(
                executable="/bin/sh",
                arguments=["-c", 'sleep 1; exit $((7 * PILOTFISH_RANK))'],
                ranks=2,
                cores_per_rank=CORES,
            ),
        },
    )


def one_world(t, n):
    """DONE, n ranks, each saying `rank r size n`."""
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
    rows = sorted(ln.split()[:4] for ln in t.stdout.splitlines() if ln.startswith("rank "))
    assert rows == sorted(["rank", str(r), "size", str(n)] for r in range(n)), t.stdout


@pytest.mark.parametrize(
    "name, n",
    [
        ("ompi_c_one_host", 2),
        ("ompi_c_two_hosts", 2),
        ("ompi_py_4x4", 4),
        ("ompi_py_two_hosts", 2),
        ("mpich_c", 2),
    ],
)
def test_no_launcher_named_one_world_whatever_the_mpi(default_pilot, name, n):
    one_world(default_pilot[name], n)
    if name.endswith("two_hosts"):
        assert len({s.node for s in default_pilot[name].slots}) == 2


def test_an_mpi_the_pilot_cannot_read_fails_naming_the_fix(default_pilot):
    """mpi4py through a module, no word of it in the script: the pilot cannot tell it is MPI,
    runs it as plain processes guarded -- MPI_Init fails there instead of N singletons."""
    t = default_pilot["nowords"]
    assert t.state == pf.FAILED, (t.state, t.stdout)
    assert "size 1" not in (t.stdout or "")
    assert "MPICH's libmpi in a PMIx environment" in t.reason, t.reason
    assert "launcher='pmi'" in t.reason, t.reason


def test_a_program_that_is_not_mpi_stays_done(default_pilot, prrte_pilot):
    for t in (default_pilot["hostname"], prrte_pilot["hostname"]):
        assert t.state == pf.DONE and len(t.stdout.split()) == 2, (t.state, t.reason)


def test_a_rank_hung_before_mpi_init_fails_for_its_timeout(default_pilot):
    t = default_pilot["hung"]
    assert t.state == pf.FAILED
    assert f"timed out after {HUNG_TIMEOUT}s" in t.reason, t.reason
    assert "MPICH ABI" not in t.reason, t.reason


@pytest.mark.parametrize(
    "name, n",
    [("ompi_c_one_host", 2), ("ompi_c_two_hosts", 2), ("mpi4py_default", 2), ("nowords", 2)],
)
def test_a_prrte_pilot_makes_one_world(prrte_pilot, name, n):
    """Open MPI, and Python given the DVM's library (mpi4py's default here is MPICH's)."""
    one_world(prrte_pilot[name], n)


@pytest.mark.parametrize("name", ["mpich_c_one_host", "mpich_c_two_hosts"])
def test_a_prrte_pilot_refuses_mpich_before_the_dvm(prrte_pilot, name):
    t = prrte_pilot[name]
    assert t.state == pf.FAILED, (t.state, t.stdout)
    assert t.reason.startswith("launch failed: an MPICH program"), t.reason
    assert "launcher 'prrte' serves PMIx" in t.reason and "launcher='pmi'" in t.reason, t.reason
    assert not t.stdout and not t.stderr  # nothing ran


def test_a_prrte_task_whose_ranks_started_and_failed_is_never_launched_again(prrte_pilot):
    """(item 3: a failing task was relaunched 6 times and the DVM replaced twice, the reason
    "the launch ended (exit code 7) before any rank started; gave up after 6 launches") Rank 1
    of two hosts exits 7 after both started: FAILED once, naming the rank and its code; no
    relaunch, no DVM replaced, and the pilot's other tasks ran as they should."""
    t = prrte_pilot["rank1_fails"]
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert t.reason.startswith(f"exit code 7; rank 1 exited with 7 on {t.slots[1].node} first"), \
        t.reason
    assert "gave up" not in t.reason and "before any rank started" not in t.reason, t.reason
    mine = [e for e in prrte_pilot["events"] if e[1] == t.uid]
    assert [e for e in mine if e[2] == E.LAUNCH_RETRY] == [], mine
    assert len([e for e in mine if e[2] == E.EXEC_START]) == 1, mine
    replaced = [e for e in prrte_pilot["events"] if e[2] in (E.LAUNCHER_RESTART,)]
    assert replaced == [], replaced
    one_world(prrte_pilot["ompi_c_two_hosts"], 2)
