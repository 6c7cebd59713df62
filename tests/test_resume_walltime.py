"""Issue 41, papercut 4: the pilot's description is not the tasks' identity. `--resume` runs
again what the pilot's walltime killed, and takes a changed description (a longer runtime is
how a walltime too short gets fixed); a pilot whose agent still lives is re-attached as it was
submitted, and the resume says so. Real clients, real local agents."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from substrate_helpers import python_script  # tests/substrates (on the path: conftest)


def test_resume_reruns_walltime_killed_with_a_longer_runtime(tmp_path):
    flag = tmp_path / "flag"
    wl = tmp_path / "w.yaml"

    def workload(runtime):
        wl.write_text(f"""
pilot: {{nodes: 1, cores_per_node: 2, runtime: {runtime}}}
tasks:
  - {{name: slow, count: 2, executable: /bin/sh,
     arguments: ["-c", "test -f {flag} || sleep 100"]}}
""")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pilotfish.cli", "run", "-q", *args,
                               str(wl)], capture_output=True, text=True, timeout=120)

    workload("4s")
    r = run("--sessions", str(tmp_path / "s"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 failed" in r.stdout and "reached its walltime" in r.stdout + r.stderr, r.stdout
    [session] = (tmp_path / "s").iterdir()
    flag.write_text("")
    workload("10m")  # (the walltime was too short: resuming is how to fix that)
    r = run("--resume", str(session))
    assert r.returncode == 0 and "2 total, 2 done" in r.stdout, r.stdout + r.stderr
    assert "pilot.0001" in r.stdout, r.stdout  # (a new pilot, of the new description)


CLIENT = textwrap.dedent("""
    import logging, sys, pilotfish as pf
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    path, resume, runtime, side = sys.argv[1], sys.argv[2] == "resume", sys.argv[3], sys.argv[4]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime=runtime))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    tasks = tm.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"sleep 0.3; echo $PILOTFISH_TASK_UID >> {side}"])
        for _ in range(20)])
    print("submitted", pilot.uid, pilot.description.runtime, flush=True)
    tm.wait_tasks()
    print("done", sum(t.state == "DONE" for t in tasks), flush=True)
    s.close()
""")


@pytest.mark.slow
def test_resume_with_a_changed_runtime_reattaches_the_live_pilot_as_submitted(tmp_path):
    path, side = tmp_path / "session", tmp_path / "side"
    first = python_script(CLIENT, path, "first", "10m", side)
    assert first.stdout.readline().split() == ["submitted", "pilot.0000", "600.0"]
    deadline = time.time() + 60
    while not (side.exists() and side.read_text().count("\n") >= 2):
        assert time.time() < deadline, "no task ran"
        time.sleep(0.1)
    first.kill()  # SIGKILL: the agent lives on
    first.wait()
    second = python_script(CLIENT, path, "resume", "20m", side)
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    lines = out.splitlines()
    # re-attached (not replaced: that would stop what it runs), as it was submitted
    assert lines[0].split() == ["submitted", "pilot.0000", "600.0"], lines
    assert lines[1] == "done 20", lines
    assert "still runs as it was submitted" in err and "runtime: 600.0 -> 1200.0" in err, err
    runs = [x for x in side.read_text().split() if x]
    assert len(runs) == len(set(runs)) == 20, runs  # nothing ran twice
