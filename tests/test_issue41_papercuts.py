"""Issue 41's papercuts 1, 2 and 10 on a local pilot, end to end: a runtime given as a
number-string, an output path whose directory is missing, a failure reason quoting stderr
from a line's start with the fix for MPICH under PMIx. (Papercut 2 on other hosts:
tests/batch/test_node_papercuts.py; 4: tests/test_resume_walltime.py; 9: tests/parsl.)"""

from __future__ import annotations


import pytest

import pilotfish as pf
from pilotfish._errors import DescriptionError


@pytest.fixture(scope="module")
def tmgr(tmp_path_factory):
    path = tmp_path_factory.mktemp("i41") / "session"
    with pf.Session(path=str(path)) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            {"resource": "local", "nodes": 1, "cores_per_node": 2, "runtime": "10m"}))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        yield tm


# -- 1: runtime "15" (a string) and 15 (a number) are the same walltime, and both refused
#       with the hint (15 is almost surely minutes meant, as in RADICAL-Pilot)

@pytest.mark.parametrize("value", ["15", " 15 ", "15.0"])
def test_runtime_string_number_as_the_number(value):
    with pytest.raises(DescriptionError, match="15m"):
        pf.PilotDescription(runtime=value)
    assert pf.PilotDescription(runtime="90").runtime == pf.PilotDescription(runtime=90).runtime


# -- 2: an output file whose directory is missing is named as the cause

def test_missing_output_directory_is_named(tmgr, tmp_path):
    out = tmp_path / "nodir" / "x.txt"
    [t] = tmgr.submit_tasks([pf.TaskDescription(
        {"executable": "/bin/echo", "arguments": ["x"], "stdout": str(out)})])
    tmgr.wait_tasks(t.uid, timeout=60)
    assert t.state == "FAILED"
    assert str(out) in (t.reason or "") and "cannot execute" not in t.reason, t.reason


# -- 10: a failure reason quotes stderr from a line's start (not cut mid-word), and the
#        MPICH-under-PMIx failure says which MPI4PY_LIBMPI to set

def test_reason_quotes_stderr_from_a_line_start(tmgr):
    script = ("python3 -c \"import sys; sys.stderr.write('x' * 40 + ' padding\\n' * 60"
              " + 'Abort(1) on node 0: Fatal error in internal_Init: Other MPI error, "
              "error stack:\\nMPIR_Init_thread: unsupported PMI version PMIx\\n')\"; exit 1")
    [t] = tmgr.submit_tasks([pf.TaskDescription(
        {"executable": "/bin/sh", "arguments": ["-c", script]})])
    tmgr.wait_tasks(t.uid, timeout=60)
    tail = t.reason.split("; stderr: ", 1)[1]
    assert tail.startswith(("padding", "Abort", "...")), t.reason  # (a line's start)
    assert "error stack:" in t.reason and "unsupported PMI version PMIx" in t.reason
    assert "MPI4PY_LIBMPI" in t.reason, t.reason  # (the fix, where users read)
