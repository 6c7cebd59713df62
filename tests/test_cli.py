"""The `pilotfish` command, run for real as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pilotfish.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_help_teaches():
    r = _run("--help")
    assert r.returncode == 0
    for word in ("run", "report", "validate", "pilot"):
        assert word in r.stdout
    r = _run("run", "--help")
    assert "count:" in r.stdout and "cores_per_node" in r.stdout


def test_run_workload(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("""
pilot: {nodes: 2, cores_per_node: 8, gpus_per_node: 1, runtime: 10m}
tasks:
  - {name: echo, count: 50, executable: /bin/echo, arguments: ["task {i}"]}
  - {name: wide, count: 5, ranks: 2, cores_per_rank: 4, executable: /bin/true}
  - {name: gpu, count: 4, gpus_per_rank: 1, executable: /bin/true}
""")
    r = _run("run", "-q", "--sessions", str(tmp_path / "sessions"), str(wl))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "59 total, 59 done, 0 failed" in r.stdout
    assert "tasks/s" in r.stdout


def test_run_with_failure_exits_1(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("""
pilot: {nodes: 1, cores_per_node: 2, runtime: 10m}
tasks:
  - {name: ok, count: 3, executable: /bin/true}
  - {name: bad, count: 1, executable: /bin/false}
""")
    r = _run("run", "-q", "--sessions", str(tmp_path / "sessions"), str(wl))
    assert r.returncode == 1
    assert "1 failed" in r.stdout and "exit code 1" in r.stderr


@pytest.mark.parametrize("text, words", [
    ("pilot: {nodes: 0}\ntasks: [{executable: /bin/true}]", ["nodes", "0", ">= 1"]),
    ("pilot: {}\ntasks: [{executable: /bin/true, cores: 2}]", ["cores", "unknown field"]),
    ("pilot: {}\ntasks: [{executable: /bin/true, count: -1}]", ["count", "-1"]),
    ("pilot: {}\nbogus: 1\ntasks: []", ["bogus"]),
    ("pilot: {nodes: 1, cores_per_node: 2}\ntasks: [{executable: /bin/true, cores_per_rank: 4}]",
     ["cores_per_rank", "largest node"]),
])
def test_bad_workload_exits_2(tmp_path, text, words):
    wl = tmp_path / "w.yaml"
    wl.write_text(text)
    r = _run("run", "-q", "--sessions", str(tmp_path / "sessions"), str(wl))
    assert r.returncode == 2, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr


def test_validate(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("pilot: {nodes: 2, cores_per_node: 4}\ntasks: [{executable: /bin/true, count: 7}]")
    r = _run("validate", str(wl))
    assert r.returncode == 0 and "7 tasks: OK" in r.stdout


@pytest.mark.slow
def test_simulate_workload_fit_and_report(tmp_path):
    """`pilotfish simulate`: the workload format of `run` plus duration, a virtual clock --
    200 two-core tasks of 60 s and 8 full-node tasks of 5 min on 4 x 8 cores take 1,350 s of
    core-bound work; the simulation predicts about that in well under a second of real time.
    `--fit` turns a real session's events into a launch model the simulator takes."""
    import json
    import re

    wl = tmp_path / "w.yaml"
    wl.write_text("""
pilot: {nodes: 4, cores_per_node: 8, launcher: direct}
tasks:
  - {name: small, count: 200, executable: sim, cores_per_rank: 2, duration: 60}
  - {name: big, count: 8, executable: sim, cores_per_rank: 8, duration: 5m}
""")
    r = _run("simulate", "--partitions", "2", "--sessions", str(tmp_path / "s"), "--report",
             str(wl))
    assert r.returncode == 0, r.stdout + r.stderr
    ttx = float(re.search(r"predicted TTX ([0-9.]+)s", r.stdout).group(1))
    assert 1350 <= ttx <= 1400, r.stdout
    assert "208 DONE" in r.stdout and "(simulated)" in r.stdout
    (session,) = (tmp_path / "s").iterdir()
    assert (session / "report" / "report.html").exists()
    nodur = tmp_path / "n.yaml"
    nodur.write_text("pilot: {nodes: 1, cores_per_node: 2}\ntasks:\n  - {executable: sim}\n")
    r = _run("simulate", "--sessions", str(tmp_path / "s2"), str(nodur))
    assert r.returncode == 2 and "duration" in r.stderr
    # a model fitted from a real session (here: a small run of real tasks)
    real = tmp_path / "real.yaml"
    real.write_text("pilot: {nodes: 1, cores_per_node: 4, runtime: 5m}\n"
                    "tasks:\n  - {count: 20, executable: /bin/true}\n")
    r = _run("run", "-q", "--sessions", str(tmp_path / "r"), str(real))
    assert r.returncode == 0, r.stderr
    (rs,) = (tmp_path / "r").iterdir()
    model = tmp_path / "model.json"
    r = _run("simulate", "--fit", str(rs), "--out", str(model))
    assert r.returncode == 0, r.stderr
    fitted = json.loads(model.read_text())
    assert set(fitted) == {"direct"} and fitted["direct"]["fail_rate"] == fitted["direct"]["hang_rate"] == 0
    r = _run("simulate", "--launch-model", str(model), "--sessions", str(tmp_path / "s3"),
             str(wl))
    assert r.returncode == 0, r.stdout + r.stderr
