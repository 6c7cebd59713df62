"""`pilotfish` as a user meets it (issue 30, item 4): validate applies run's checks, `{i}` in
output paths, Ctrl-C and --resume, failure reasons and `pilotfish logs`, one story at the end
of a run. Real local pilots, the command run as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


def _run(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "pilotfish.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def _workload(tmp_path, text, name="w.yaml"):
    wl = tmp_path / name
    wl.write_text(text)
    return str(wl)


TOO_BIG = """
pilot: {nodes: 2, cores_per_node: 4, runtime: 10m}
tasks:
  - {name: fine, count: 2, executable: /bin/true}
  - {name: huge, count: 1, ranks: 3, cores_per_rank: 4, executable: /bin/true}
"""


@pytest.mark.parametrize("text, words", [
    (TOO_BIG, ["tasks[1] (huge)", "ranks = 3", "more ranks of this size than the pilot holds",
               "2 nodes x 4 cores"]),
    ("pilot: {nodes: 1, cores_per_node: 2}\ntasks:\n  - {name: fat, executable: /bin/true, "
     "cores_per_rank: 4}\n", ["tasks[0] (fat)", "cores_per_rank = 4", "largest node (2 cores)"]),
    ("pilot: {nodes: 1, cores_per_node: 2, gpus_per_node: 0}\ntasks:\n  - {name: g, "
     "executable: /bin/true, gpus_per_rank: 1}\n", ["tasks[0] (g)", "gpus_per_rank = 1"]),
    ("pilot: {nodes: 1, cores_per_node: 2}\ntasks:\n  - {name: env, executable: /bin/true, "
     "named_env: ve}\n", ["tasks[0] (env)", "named_env", "ve"]),
])
def test_validate_applies_the_checks_of_run(tmp_path, text, words):
    """What `run` refuses, `validate` refuses too, with the same words, naming the YAML group
    (not the index of a task among all the workload's)."""
    wl = _workload(tmp_path, text)
    v = _run("validate", wl)
    r = _run("run", "-q", "--sessions", str(tmp_path / "s"), wl)
    for res in (v, r):
        assert res.returncode == 2, res.stdout + res.stderr
        for w in words:
            assert w in res.stderr, (w, res.stderr)
        assert "TaskDescription[" not in res.stderr, res.stderr
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())  # no pilot


def test_index_in_output_paths(tmp_path):
    """`{i}` in `stdout:`/`stderr:` paths is each task's index in its group, as in arguments."""
    out = tmp_path / "out"
    out.mkdir()
    wl = _workload(tmp_path, f"""
pilot: {{nodes: 1, cores_per_node: 2, runtime: 10m}}
tasks:
  - {{name: say, count: 3, executable: /bin/sh, arguments: ["-c", "echo hi {{i}}; echo oops {{i}} >&2"],
     stdout: "{out}/say.{{i}}.out", stderr: "{out}/say.{{i}}.err"}}
""")
    r = _run("run", "-q", "--sessions", str(tmp_path / "s"), wl)
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(3):
        assert (out / f"say.{i}.out").read_text() == f"hi {i}\n"
        assert (out / f"say.{i}.err").read_text() == f"oops {i}\n"
