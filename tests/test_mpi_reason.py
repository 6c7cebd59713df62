"""Issue 41, papercut 10: the stderr a failure reason quotes starts at a line's start (never
cut mid-word), and MPICH's libmpi under Open MPI's launcher names the fix (MPI4PY_LIBMPI).
The agent's reason (agent/table.py) is to call _mpi.stderr_reason: see
tests/test_issue41_papercuts.py::test_reason_quotes_stderr_from_a_line_start."""

from __future__ import annotations

from pilotfish._mpi import libmpi_hint, stderr_reason, stderr_tail

MPICH_UNDER_PMIX = ("Abort(1) on node 0: Fatal error in internal_Init: Other MPI error, "
                    "error stack:\nMPIR_Init_thread: unsupported PMI version PMIx\n")


def test_tail_starts_at_a_line():
    err = "x" * 40 + " padding\n" * 60 + MPICH_UNDER_PMIX
    tail = stderr_tail(err, 300)
    assert tail.startswith("padding") and tail.endswith("PMIx") and len(tail) <= 300
    assert stderr_tail("short\nerror", 300) == "short\nerror"


def test_one_long_line_is_cut_at_a_word():
    err = " ".join(f"word{i}" for i in range(200))
    tail = stderr_tail(err, 50)
    assert tail.startswith("...word") and tail.endswith("word199")


def test_mpich_under_pmix_names_the_fix(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmpi.so.40").write_text("")
    hint = libmpi_hint(MPICH_UNDER_PMIX, prefix=str(tmp_path))
    assert f"MPI4PY_LIBMPI={tmp_path}/lib/libmpi.so.40" in hint and "mpiexec" in hint
    assert libmpi_hint("Segmentation fault") is None
    r = stderr_reason("x" * 400 + "\n" + MPICH_UNDER_PMIX, 300)
    assert r.startswith("; stderr: Abort(1)") and "error stack:" in r and "MPI4PY_LIBMPI" in r
