"""A 2-rank amt program runs as a pilotfish task on a local pilot (launch method mpiexec)."""

from __future__ import annotations

import re
import sys

import pytest
from amt_helpers import HYDRA, PROGS, libmpi_for

import pilotfish as pf

pytestmark = pytest.mark.mpi


def test_two_rank_amt_program_as_pilot_task(tmp_path):
    env = {"PYTHONUNBUFFERED": "1"}
    lib = libmpi_for(HYDRA)
    if lib:
        env["MPI4PY_LIBMPI"] = lib
    with pf.Session(path=tmp_path / "session") as session:
        pmgr = pf.PilotManager(session)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="local", runtime="5m"))
        tmgr = pf.TaskManager(session)
        tmgr.add_pilots(pilot)
        task = tmgr.submit_tasks(pf.TaskDescription(
            executable=sys.executable, arguments=[str(PROGS / "pilot_task.py")], ranks=2,
            launcher="mpiexec", environment=env, timeout="120s"))
        assert task.wait(timeout=150) == pf.DONE, (task.reason, task.stdout, task.stderr)
    # the two ranks share one stdout: match each rank's report wherever it landed
    found = sorted(re.findall(r"OK pilot task rank (\d) of 2 \(PILOTFISH_RANK=(\d)\) "
                              r"total=330 on (MPICH|Open MPI)", task.stdout))
    assert [f[:2] for f in found] == [("0", "0"), ("1", "1")], (task.stdout, task.stderr)
