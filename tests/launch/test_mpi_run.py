"""mpirun (Open MPI) and mpiexec (MPICH) commands really run, where the tools are installed.

Both PyPI wheels ship an `mpirun` and an `mpiexec`; each test checks that the tool found in
PATH is the implementation it builds for (ompi_info / mpichversion beside it).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from launch_cases import EMULATED, UID
from pilotfish._wire import RankSlot, TaskSpec
from pilotfish.launch import get_launcher


def tool_beside(name, sibling):
    path = shutil.which(name)
    if path and os.path.exists(os.path.join(os.path.dirname(path), sibling)):
        return path
    return None


TASK = TaskSpec(uid=UID, executable="/bin/sh", ranks=3, environment={"MODE": "m"},
                arguments=["-c", 'echo "$PILOTFISH_RANK $PILOTFISH_CORES $MODE $OMP_NUM_THREADS"'])
SLOTS = [RankSlot("node0000", 0, (0,), ()), RankSlot("node0000", 0, (1,), ()),
         RankSlot("node0001", 1, (7,), ())]


def run(proc, cwd):
    return subprocess.run(proc.argv, env={**os.environ, **proc.env}, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.mpi
@pytest.mark.skipif(not tool_beside("mpirun", "ompi_info"), reason="needs Open MPI's mpirun")
def test_mpirun_runs_ranks_with_their_placement(tmp_path):
    lm = get_launcher("mpirun", EMULATED, {"mpirun": tool_beside("mpirun", "ompi_info")})
    (p,) = lm.build(TASK, SLOTS, str(tmp_path))
    r = run(p, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 0 m 1", "1 1 m 1", "2 7 m 1"]


@pytest.mark.mpi
@pytest.mark.skipif(not tool_beside("mpiexec", "mpichversion"), reason="needs MPICH's mpiexec")
def test_mpiexec_runs_ranks_with_their_placement(tmp_path):
    lm = get_launcher("mpiexec", EMULATED, {"mpiexec": tool_beside("mpiexec", "mpichversion")})
    (p,) = lm.build(TASK, SLOTS, str(tmp_path))
    r = run(p, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 0 m 1", "1 1 m 1", "2 7 m 1"]
    fail = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", "exit 4"], ranks=2)
    (p,) = lm.build(fail, SLOTS[:2], str(tmp_path))
    assert run(p, tmp_path).returncode == 4
