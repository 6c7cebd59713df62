"""Which MPI goes which way (launch/mpi_abi.py), and the PMI path on a local pilot (issue 39):
multi-rank tasks of the MPICH ABI that name no launcher run through launch method `pmi` (the
agent spawns the ranks and serves their PMI itself -- no mpiexec), anything else keeps its
launcher; the launch model learns the path from a real session (`pilotfish simulate --fit`)
and a simulated pilot runs on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_programs import build_hello

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from pilotfish.launch.mpi_abi import MPICH, OPENMPI, program_mpi

PROGS = Path(__file__).resolve().parent / "pmi_progs"

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> str:
    return build_hello(tmp_path_factory)


def test_the_program_says_which_mpi(hello, tmp_path):
    assert program_mpi(hello) == MPICH  # DT_NEEDED libmpi.so.12
    assert program_mpi("/bin/echo") is None  # ELF without libmpi
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho libmpi.so.12\n")
    assert program_mpi(str(script)) is None  # not ELF: not known
    assert program_mpi(sys.executable, [str(PROGS / "mpi4py_hello.py")]) == MPICH
    assert program_mpi(sys.executable, ["-c", "print(1)"]) is None
    plain = tmp_path / "p.py"
    plain.write_text("print('no mpi here')\n")
    assert program_mpi(sys.executable, [str(plain)]) is None
    assert program_mpi("/bin/sh", [], {"MPI4PY_MPIABI": "openmpi"}) == OPENMPI
    assert program_mpi(sys.executable, [str(PROGS / "mpi4py_hello.py")],
                       {"MPI4PY_LIBMPI": "/x/lib/libmpi.so.40"}) == OPENMPI
    assert program_mpi("no-such-program-here") is None


def test_a_local_pilot_runs_mpich_tasks_through_its_own_pmi(hello, tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            resource="local", cores_per_node=4, runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        c2, c4, py3, sh2, bad = tmgr.submit_tasks([
            pf.TaskDescription(executable=hello, ranks=2),
            pf.TaskDescription(executable=hello, ranks=4),
            pf.TaskDescription(executable=sys.executable, ranks=3,
                               arguments=[str(PROGS / "mpi4py_hello.py")]),
            pf.TaskDescription(executable="/bin/sh", ranks=2,
                               arguments=["-c", "echo $PILOTFISH_RANK"]),
            pf.TaskDescription(executable="/bin/true", ranks=2, launcher="pmi")])
        tmgr.wait_tasks(timeout=120)
        for t, n in ((c2, 2), (c4, 4), (py3, 3)):
            assert t.state == pf.DONE, (t.state, t.reason)
            lines = sorted(t.stdout.splitlines())
            assert [ln.split()[:4] for ln in lines] == [["rank", str(r), "size", str(n)]
                                                       for r in range(n)], t.stdout
        assert sh2.state == pf.DONE and sorted(sh2.stdout.split()) == ["0", "1"]
        assert bad.state == pf.FAILED and "ended without speaking PMI" in bad.reason
        session, sandbox = s.path, pilot.sandbox
    evs = read_all_events(os.path.join(sandbox, "agent.events"))  # (all written at its end)
    start = {who: d for _, who, name, d in evs if name == E.EXEC_START}
    assert start[c2.uid] == start[c4.uid] == start[py3.uid] == "pmi"
    assert start[sh2.uid] == sh2.launcher != "pmi"  # (not MPI: its launcher, as before)
    # the launch model learns the path, and a simulated pilot runs on it
    model = tmp_path / "model.json"
    r = subprocess.run([sys.executable, "-m", "pilotfish.cli", "simulate", "--fit", str(session),
                        "--out", str(model)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fitted = json.loads(model.read_text())
    assert fitted["pmi"]["latency_s"] > 0, fitted
    with pf.Session(path=tmp_path / "sim") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            resource="simulated", nodes=8, cores_per_node=8, runtime="100h", launcher="pmi",
            launch_model=str(model)))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        ts = tmgr.submit_tasks([pf.TaskDescription(executable="sim", ranks=4, cores_per_rank=2,
                                                   duration=60) for _ in range(40)])
        assert set(tmgr.wait_tasks([t.uid for t in ts], timeout=120)) == {pf.DONE}
