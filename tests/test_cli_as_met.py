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


def _wait_for(paths, proc, bound=60.0):
    """Until every path exists (bounded; fails if the run ends first)."""
    deadline = time.monotonic() + bound
    while not all(os.path.exists(p) for p in paths):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"not there after {bound}s: {paths}"
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_summary_and_resume_runs_what_it_canceled(tmp_path):
    """Ctrl-C: the summary, the session's path and the exact --resume command (not click's
    `Aborted!`); that command then runs the tasks the interrupt canceled, and only those."""
    import shlex

    marks = tmp_path / "marks"
    marks.mkdir()
    # `slow` blocks until the run is interrupted -- and on the resume (once `go` exists)
    # says it ran; `quick` must not run again
    wl = _workload(tmp_path, f"""
pilot: {{nodes: 1, cores_per_node: 3, runtime: 10m}}
tasks:
  - {{name: quick, count: 2, priority: 1, executable: /bin/sh,
     arguments: ["-c", "echo x >> {marks}/quick.{{i}}"]}}
  - {{name: slow, count: 4, executable: /bin/sh, arguments: ["-c",
     "if [ -e {marks}/go ]; then touch {marks}/ran.{{i}}; else touch {marks}/started.{{i}}; sleep 60; fi"]}}
""")
    # (SIGINT at its default in the child, as a terminal's foreground job has it: a suite
    # started in the background by a non-interactive shell inherits it ignored)
    p = subprocess.Popen([sys.executable, "-m", "pilotfish.cli", "run", "-q", "--sessions",
                          str(tmp_path / "s"), wl], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # the quick ones done and the first slow one running (3 cores: the others queue)
        _wait_for([marks / "quick.0", marks / "quick.1", marks / "started.0"], p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out + err
    assert "Aborted!" not in err
    (session,) = (tmp_path / "s").iterdir()
    assert str(session) in out
    assert "6 total, 2 done, 0 failed, 4 canceled" in out, out
    line = next(x for x in (out + err).splitlines() if "--resume" in x)
    cmd = shlex.split(line[line.index("pilotfish run"):])
    assert cmd[:2] == ["pilotfish", "run"] and cmd[cmd.index("--resume") + 1] == str(session)
    (marks / "go").touch()
    r = _run(*cmd[1:])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 total, 6 done, 0 failed, 0 canceled" in r.stdout, r.stdout
    assert sorted(os.listdir(marks)) == sorted(
        ["go", "quick.0", "quick.1", "ran.0", "ran.1", "ran.2", "ran.3"]
        + [f"started.{i}" for i in range(4) if (marks / f"started.{i}").exists()])
    assert (marks / "quick.0").read_text() == "x\n"  # not run again
    # a resume of a finished run runs nothing and says all is done
    r = _run(*cmd[1:])
    assert r.returncode == 0 and "6 total, 6 done" in r.stdout, r.stdout + r.stderr


def _bar(out):
    """The progress bar's last line (rich writes it once when stdout is not a terminal)."""
    return [x for x in out.splitlines() if x.startswith("tasks ") and " done " in x][-1]


@pytest.mark.slow
def test_walltime_one_story(tmp_path):
    """A pilot that ends by its walltime: the bar and the summary count alike (a canceled
    task is not "failed"), the pilot says it reached its walltime (not ACTIVE, no "cannot
    reach pilot.0000"), and the way on is --resume."""
    import re

    wl = _workload(tmp_path, """
pilot: {nodes: 1, cores_per_node: 2, runtime: 5s}
tasks:
  - {name: ok, count: 1, priority: 1, executable: /bin/true}
  - {name: slow, count: 3, executable: /bin/sleep, arguments: ["60"]}
""")
    r = _run("run", "--sessions", str(tmp_path / "s"), wl)
    assert r.returncode == 1, r.stdout + r.stderr
    m = re.search(r"(\d+) done, (\d+) failed, (\d+) canceled", r.stdout)
    done, failed, canceled = map(int, m.groups())
    assert (done, failed + canceled) == (1, 3), r.stdout
    assert canceled >= 1, r.stdout  # the third slow task never started
    bar = _bar(r.stdout)
    assert f"{done} done {failed} failed {canceled} canceled" in bar, (bar, r.stdout)
    assert re.search(r"pilot pilot\.0000: DONE \(walltime reached\)", r.stdout), r.stdout
    assert "ACTIVE" not in r.stdout and "cannot reach" not in r.stderr, r.stdout + r.stderr
    assert "--resume" in r.stdout


def test_simulated_walltime_says_so(tmp_path):
    """A simulated pilot whose (virtual) walltime ends before its tasks: the summary says the
    pilot reached its walltime and how many tasks did not finish, and exits 1 as `run` does."""
    wl = _workload(tmp_path, """
pilot: {nodes: 1, cores_per_node: 2, launcher: direct}
tasks:
  - {name: long, count: 10, executable: sim, duration: 10m}
""")
    r = _run("simulate", "--runtime", "15m", "--sessions", str(tmp_path / "s"), wl)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "walltime reached" in r.stdout, r.stdout
    assert "did not finish" in r.stdout, r.stdout
    (session,) = (tmp_path / "s").iterdir()
    assert f"session {session.name}:" in r.stdout


def test_failure_reasons_and_logs(tmp_path):
    """The end of `run` gives each failed task's reason and how to see its output;
    `pilotfish logs SESSION_DIR [TASK...]` shows what the tasks printed (by uid or group)."""
    wl = _workload(tmp_path, """
pilot: {nodes: 1, cores_per_node: 2, runtime: 10m}
tasks:
  - {name: ok, count: 2, executable: /bin/sh, arguments: ["-c", "echo fine {i}"]}
  - {name: bad, count: 1, executable: /bin/sh, arguments: ["-c", "echo some output; echo broken thing >&2; exit 3"]}
""")
    r = _run("run", "-q", "--sessions", str(tmp_path / "s"), wl)
    assert r.returncode == 1, r.stdout + r.stderr
    (session,) = (tmp_path / "s").iterdir()
    assert "task.000002 (bad): FAILED: exit code 3" in r.stderr, r.stderr
    assert f"pilotfish logs {session}" in r.stderr, r.stderr
    lg = _run("logs", str(session), "task.000002")
    assert lg.returncode == 0, lg.stdout + lg.stderr
    assert "task.000002 (bad): FAILED" in lg.stdout
    assert "some output" in lg.stdout and "broken thing" in lg.stdout
    assert "fine" not in lg.stdout
    lg = _run("logs", str(session), "ok")  # a group: each of its tasks
    assert lg.returncode == 0 and "fine 0" in lg.stdout and "fine 1" in lg.stdout, lg.stdout
    assert "broken" not in lg.stdout
    lg = _run("logs", str(session))  # all of them
    assert all(w in lg.stdout for w in ("fine 0", "fine 1", "some output", "broken thing"))
    lg = _run("logs", str(session), "task.000009")
    assert lg.returncode == 2 and "task.000009" in lg.stderr and "task.000000" in lg.stderr, \
        lg.stderr


@pytest.mark.slow
def test_report_lists_failures_and_groups(tmp_path):
    """`pilotfish report`: the failed tasks with their reasons, and the run by task group."""
    wl = _workload(tmp_path, """
pilot: {nodes: 1, cores_per_node: 2, runtime: 10m}
tasks:
  - {name: fine, count: 3, executable: /bin/true}
  - {name: broken, count: 2, executable: /bin/sh, arguments: ["-c", "echo cause-{i} >&2; exit 3"]}
""")
    r = _run("run", "-q", "--sessions", str(tmp_path / "s"), wl)
    assert r.returncode == 1, r.stdout + r.stderr
    (session,) = (tmp_path / "s").iterdir()
    rep = _run("report", str(session), "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    assert 'id="failed-tasks"' in page and 'id="groups"' in page, page[-3000:]
    failed = page[page.index('id="failed-tasks"'):]
    failed = failed[:failed.index("</section>")]
    for uid, i in (("task.000003", 0), ("task.000004", 1)):
        assert uid in failed and f"cause-{i}" in failed and "exit code 3" in failed, failed
    assert "task.000000" not in failed
    groups = page[page.index('id="groups"'):]
    groups = groups[:groups.index("</section>")]
    assert "fine" in groups and "broken" in groups, groups


def test_validate_sees_the_shape_the_pilot_declares():
    """validate checks against the node shape a pilot of the description declares at submit
    (client/pilot.py): the two stay one rule."""
    from pilotfish.client.pilot import _declared_shape
    from pilotfish.descriptions import PilotDescription
    from pilotfish.workload import declared_shape

    for d in ({"nodes": 3}, {"nodes": 2, "cores_per_node": 8, "gpus_per_node": 1},
              {"resource": "simulated", "nodes": 4, "cores_per_node": 2, "mem_per_node": 100},
              {"resource": "slurm", "nodes": 2}, {"resource": "slurm", "nodes": 2,
                                                  "cores_per_node": 64}):
        pd = PilotDescription(d)
        assert declared_shape(pd) == _declared_shape(pd), d
