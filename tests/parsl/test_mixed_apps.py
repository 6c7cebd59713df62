"""Parsl bash_apps after python_apps on one pilot: the python_apps' idle function workers
give their cores back to the bash_apps at once (issue 41, papercut 9)."""

from __future__ import annotations

import time

import pytest

parsl = pytest.importorskip("parsl")

from parsl import bash_app, python_app  # noqa: E402
from parsl.config import Config  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish.parsl import PilotfishExecutor  # noqa: E402


@python_app
def one():
    return 1


@bash_app
def fail():
    return "exit 3"


def test_bash_app_after_python_apps_is_not_late(tmp_path):
    """(Was an xfail in what is now tests/test_issue41_papercuts.py.) The workers' idle_s is
    a minute: before the fix the bash_app started only once its cores came back, a minute
    later (the wait timed out); at the default idle_s, 5 s late. Now at once."""
    with pf.Session(path=str(tmp_path / "session")) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=2, runtime="10m", workers={"idle_s": 60}))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        d = parsl.load(Config(executors=[PilotfishExecutor(label="pf", tmgr=tm)],
                              run_dir=str(tmp_path / "runinfo")))
        try:
            assert sum(f.result() for f in [one() for _ in range(40)]) == 40
            t0 = time.monotonic()
            with pytest.raises(parsl.app.errors.BashExitFailure):
                fail().result(timeout=20)
            late = time.monotonic() - t0
            assert sum(f.result() for f in [one() for _ in range(10)]) == 10  # workers again
        finally:
            d.cleanup()
            parsl.clear()
    print(f"the bash_app's failure came {late:.2f} s after its submit")
