"""Issue 41's papercuts that live in the `pilotfish` command (cli.py, analytics): each test
here failed before its fix. In process (click's CliRunner) where that is enough: cheap."""

from __future__ import annotations

import os
import re
import textwrap

import pytest
from click.testing import CliRunner

from pilotfish.cli import main
from pilotfish.workload import load_workload


def _cli(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# -- papercut 7: the YAML example of `pilotfish run --help` pastes and parses


def test_run_help_yaml_example_pastes_and_parses(tmp_path):
    r = _cli("run", "--help")
    assert r.exit_code == 0
    m = re.search(r"Workload file format:\n\n(.*?)\n\n\s*Limits:", r.output, re.S)
    assert m, r.output
    text = textwrap.dedent(m.group(1))
    assert "\n\n" not in text, text  # (no blank line between the example's lines)
    f = tmp_path / "workload.yaml"
    f.write_text(text)
    w = load_workload(str(f))  # as pasted
    assert [(g.name, g.count) for g in w.groups] == [("hello", 1000), ("mpi", 10)]
    assert w.pilot.nodes == 4 and w.pilot.cores_per_node == 16 and w.pilot.runtime == 1800
    # the commented-out line stays one line: uncommenting it gives a valid workload
    assert "# stdout: hello.{i}.out" in text
    line = next(x for x in text.splitlines() if "# stdout:" in x)
    assert "pilotfish logs" in line
    f.write_text(text.replace("# stdout:", "stdout:", 1))
    assert load_workload(str(f)).descriptions()[7].stdout == "hello.7.out"


# -- papercut 3: report, logs, explain and dashboard refuse what is not a session, and say
#    what is (the sessions under it)


def _fake_session(path):
    path.mkdir(parents=True)
    (path / "session.json").write_text('{"uid": "%s"}' % path.name)
    (path / "client.events").write_bytes(b"")
    return path


@pytest.mark.parametrize(
    "command", [["report"], ["logs"], ["explain", "-", "task.000000"], ["dashboard"]]
)
def test_not_a_session_is_refused_naming_the_sessions_under_it(tmp_path, command):
    parent = tmp_path / "pilotfish-sessions"
    for name in ("pf.20260101.000000.000.aaaa", "pf.20260102.000000.000.bbbb"):
        _fake_session(parent / name)
    (parent / "notes").mkdir()
    args = [command[0], str(parent)] + command[2:]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "not a pilotfish session" in r.output, r.output
    assert "pf.20260101.000000.000.aaaa" in r.output and "pf.20260102.000000.000.bbbb" in r.output
    assert "notes" not in r.output
    assert not (parent / "report").exists()  # (no empty report written)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, [command[0], str(empty)] + command[2:])
    assert r.exit_code == 2 and "no pilotfish session under it" in r.output, r.output


# -- papercut 8: `pilotfish logs` shows what exists: a session run from Python (no
#    outputs.msgpack), and a live one


def _python_session(path, commands, wait=True):
    import pilotfish as pf

    s = pf.Session(path=str(path))
    p = pf.PilotManager(s).submit_pilots(
        pf.PilotDescription({"resource": "local", "nodes": 1, "cores_per_node": 2, "runtime": "5m"})
    )
    tm = pf.TaskManager(s)
    tm.add_pilots(p)
    tasks = tm.submit_tasks(
        [
            pf.TaskDescription({"executable": "/bin/sh", "name": name, "arguments": ["-c", c]})
            for name, c in commands
        ]
    )
    if wait:
        tm.wait_tasks()
    return s, tasks


def test_logs_of_a_session_run_from_python(tmp_path):
    s, tasks = _python_session(
        tmp_path / "s", [("ok", "echo hi"), ("bad", "echo oops >&2; exit 3")]
    )
    s.close()
    r = _cli("logs", str(tmp_path / "s"))
    assert r.exit_code == 0, r.output
    assert "task.000000 (ok): DONE" in r.output, r.output
    assert "task.000001 (bad): FAILED" in r.output and "exit code 3" in r.output, r.output
    assert "hi" in r.output and "oops" in r.output  # (what they printed: the agent's journal)
    r = _cli("logs", str(tmp_path / "s"), "bad")
    assert r.exit_code == 0 and "task.000000" not in r.output, r.output


@pytest.mark.slow
def test_logs_of_a_live_session(tmp_path):
    import time

    s, tasks = _python_session(
        tmp_path / "s", [("quick", "true"), ("long", "sleep 60")], wait=False
    )
    try:
        deadline = time.monotonic() + 20
        while True:  # (the agent writes its events every 0.5 s)
            r = _cli("logs", str(tmp_path / "s"))
            if ("EXECUTING" in r.output and "DONE" in r.output) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.exit_code == 0, r.output
        assert "task.000000 (quick): DONE" in r.output, r.output
        assert "task.000001 (long): EXECUTING" in r.output, r.output
    finally:
        s.close()


# -- papercut 6: explain on a task that just ended says how it ended, not unknown (EXECUTING)


def test_explain_a_task_that_just_ended(tmp_path, monkeypatch):
    import threading
    import time

    from pilotfish import _events as E
    from pilotfish import _explain as X
    from pilotfish.client import reading
    from pilotfish import states as S

    sess = _fake_session(tmp_path / "s")
    (sess / "pilot.0000").mkdir()
    t0 = time.time()
    w = E.EventWriter(sess / "client.events")
    w.record("task.000000", S.NEW, None, t0)
    w.record("task.000000", S.SCHEDULING, "pilot.0000", t0)
    w.close()
    agent = E.EventWriter(sess / "pilot.0000" / "agent.events")
    agent.record("task.000000", S.EXECUTING, None, t0 + 0.1)
    agent.flush()
    # the agent ended the task: it holds no such live task, and writes its final state
    # with its next flush (every 0.5 s)
    monkeypatch.setattr(
        reading,
        "ask_agents",
        lambda d, asks, timeout: {
            p: (
                [
                    {
                        X.UID: u,
                        X.WHERE: X.UNKNOWN,
                        X.WAITS_FOR: ["the agent holds no such live task"],
                    }
                    for u in uids
                ],
                "",
            )
            for p, uids in asks.items()
        },
    )

    def later():
        time.sleep(0.5)
        agent.record("task.000000", S.DONE, None, t0 + 0.2)
        agent.close()

    th = threading.Thread(target=later)
    th.start()
    r = _cli("explain", str(sess), "task.000000")
    th.join()
    assert r.exit_code == 0, r.output
    assert "task.000000: final (DONE)" in r.output, r.output


# -- papercut 5: after a resume, the report's partitions count what ran on the first pilot,
#    and the progress bar counts the tasks of the workload (not the canceled attempts too)


@pytest.mark.slow
def test_resume_report_and_progress(tmp_path):
    import json
    import subprocess
    import sys

    flag = tmp_path / "flag"
    wl = tmp_path / "w.yaml"
    wl.write_text(f"""
pilot: {{nodes: 1, cores_per_node: 4, runtime: 10m}}
tasks:
  - {{name: quick, count: 12, executable: /bin/true}}
  - {{name: slow, count: 6, executable: /bin/sh, arguments: ["-c", "test -f {flag} || sleep 100"]}}
""")

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "pilotfish.cli", "run", *args, str(wl)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = run("--timeout", "2", "--sessions", str(tmp_path / "s"))
    assert r.returncode == 1 and "6 canceled" in r.stdout, r.stdout + r.stderr
    [session] = (tmp_path / "s").iterdir()
    flag.write_text("")
    r = run("--resume", str(session))
    assert r.returncode == 0 and "18 total, 18 done" in r.stdout, r.stdout + r.stderr
    assert "18/18" in r.stdout and "24/24" not in r.stdout, r.stdout
    r = _cli("report", "--json", "--out", str(tmp_path / "report"), str(session))
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    parts = {p["pilot"]: p for p in metrics["partitions"]}
    assert parts["pilot.0000"]["tasks"] >= 12, parts  # the quick ones (and any slow placed)
    assert parts["pilot.0000"]["busy_core_s"] > 0, parts
    assert parts["pilot.0001"]["tasks"] == 6, parts
