"""One rank of mpi4py's own test suite, its outcome per test recorded (bench_mpi4py_suite.py runs
it under local mpiexec/prterun and as a pilotfish task):

    python bench/mpi4py_suite_rank.py OUTDIR <sdist>/test/main.py [main.py's arguments...]

runs main.py as its own `__main__` (same arguments, same exit status) and, at exit, writes
OUTDIR/rank-<world rank>.json: {"rank", "size", "library", "run": tests run, "outcomes": {test
id: ok|fail|error|skip|xfail|xpass, and each failing subtest's id: fail|error}, "why": {test id:
the last line of its traceback or the skip's reason (bounded)}}. Counted as unittest's summary
counts them: a test whose subtests failed is recorded by those subtests only. The rank is read
through mpi4py when the first test ends (MPI is initialized by then and not yet finalized).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import unittest

WHY_MAX = 300

out_dir, main_py, *args = sys.argv[1:]
record: dict = {"rank": None, "size": None, "library": None, "run": 0, "outcomes": {}, "why": {}}


def _who() -> None:
    if record["rank"] is None:
        from mpi4py import MPI

        record["rank"] = MPI.COMM_WORLD.Get_rank()
        record["size"] = MPI.COMM_WORLD.Get_size()
        record["library"] = MPI.Get_library_version().splitlines()[0][:80]


def _note(kind: str, why_of=None) -> None:
    """unittest's add<Outcome> of TextTestResult, wrapped to record `kind` for the test."""
    name = {
        "ok": "Success",
        "fail": "Failure",
        "error": "Error",
        "skip": "Skip",
        "xfail": "ExpectedFailure",
        "xpass": "UnexpectedSuccess",
    }[kind]
    orig = getattr(unittest.TextTestResult, f"add{name}")

    def wrapped(self, test, *rest):
        _who()
        tid = test.id()
        record["outcomes"][tid] = kind
        if why_of is not None and rest:
            record["why"][tid] = why_of(self, test, rest[0])[:WHY_MAX]
        return orig(self, test, *rest)

    setattr(unittest.TextTestResult, f"add{name}", wrapped)


def _last_line(self, test, err) -> str:
    text = self._exc_info_to_string(err, test).strip().splitlines()
    return text[-1] if text else ""


_note("ok")
_note("fail", _last_line)
_note("error", _last_line)
_note("skip", lambda self, test, reason: str(reason))
_note("xfail")
_note("xpass")

_sub_orig = unittest.TextTestResult.addSubTest


def _sub(self, test, subtest, err):
    """A failing or erring subtest (unittest reports only those): recorded under its own id,
    e.g. `test_mpiabi.TestMPIABI.testGetFortranInfo (typename='real2')`."""
    if err is not None:
        _who()
        kind = "fail" if issubclass(err[0], test.failureException) else "error"
        record["outcomes"][subtest.id()] = kind
        record["why"][subtest.id()] = _last_line(self, test, err)[:WHY_MAX]
    return _sub_orig(self, test, subtest, err)


unittest.TextTestResult.addSubTest = _sub  # type: ignore[method-assign]

_run_orig = unittest.TestResult.startTest


def _start(self, test):
    record["run"] += 1
    return _run_orig(self, test)


unittest.TestResult.startTest = _start  # type: ignore[method-assign]


@atexit.register
def _write() -> None:
    if record["rank"] is None:
        return
    path = os.path.join(out_dir, f"rank-{record['rank']}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


sys.argv = [main_py, *args]
runpy.run_path(main_py, run_name="__main__")
