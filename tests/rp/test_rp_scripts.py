"""RADICAL-Pilot style scripts (tests/rp/scripts/, our own, covering the API surface RP's
examples use) run through pilotfish.rp with only their import line changed: each script is
checked to import `pilotfish.rp as rp` and nothing else of pilotfish, then run as a user
would (its own process, its own working directory) on a local pilot; it asserts what it
expects and prints OK."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent / "scripts").glob("*.py"))
NEEDS_MPI = {"09_mpi_tasks.py"}


def _param(path: Path):
    marks = [pytest.mark.mpi] if path.name in NEEDS_MPI else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("script", [_param(p) for p in SCRIPTS])
def test_rp_script(script: Path, tmp_path):
    text = script.read_text()
    mentions = [line for line in text.splitlines() if "pilotfish" in line]
    assert mentions == ["import pilotfish.rp as rp"], mentions  # only the import changed
    assert not re.search(r"\bpf\.", text)
    env = {**os.environ, "PILOTFISH_SESSIONS": str(tmp_path / "sessions")}
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{script.name} rc={r.returncode}\n{r.stdout[-3000:]}\n" \
                              f"{r.stderr[-5000:]}"
    assert f"OK {script.name}" in r.stdout, r.stdout[-2000:]
    sessions = list((tmp_path / "sessions").iterdir())
    assert sessions and all((s / "client.events").exists() for s in sessions)


def test_every_rp_example_theme_has_a_script():
    """The issue's list: task details, failing tasks, multiple pilots, input/output/shared
    data, environment, MPI, pre/post exec, input folders, services, callbacks (sys.exit)."""
    names = " ".join(p.stem for p in SCRIPTS)
    for theme in ("task_details", "failing_tasks", "multiple_pilots", "input_data",
                  "output_data", "shared_task_data", "environment", "mpi", "pre_and_post_exec",
                  "input_folder", "services", "callbacks"):
        assert theme in names, theme
