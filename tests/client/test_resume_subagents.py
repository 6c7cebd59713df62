"""A resumed session knows what a pilot's sub-agents finished (client/resume.py reads each
agent's journal: _agent_files.pilot_finals): the client SIGKILLed while its pilot's sub-agents
go on finishing its tasks, then the pilot's root SIGKILLed (its sub-agents end with it); the
resumed program starts a new pilot, and not one task that a sub-agent journaled DONE runs
again. Real clients (subprocesses), real root and sub-agents; each run leaves a line."""

from __future__ import annotations

import collections
import glob
import json
import os
import signal
import textwrap
import time

import pytest

from pilotfish._journal import finals
from substrate_helpers import python_script  # tests/substrates (on the path: conftest)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLIENT = textwrap.dedent("""
    import sys, pilotfish as pf
    path, n, resume, side = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
        resource="local", nodes=4, cores_per_node=2, partitions=2, subagents=True, runtime="10m"))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    tasks = tm.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"sleep 0.2; echo $PILOTFISH_TASK_UID >> {side}"])
        for _ in range(n)])
    print("submitted", pilot.uid, flush=True)
    tm.wait_tasks()
    print("done", " ".join(t.uid for t in tasks if t.state == "DONE"), flush=True)
    s.close()
""")
N = 40


def _runs(side) -> collections.Counter:
    if not os.path.exists(side):
        return collections.Counter()
    with open(side) as f:
        return collections.Counter(line.strip() for line in f if line.strip())


def _until(cond, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _sub_finals(sandbox) -> int:
    return sum(
        len(finals(p)) for p in glob.glob(os.path.join(sandbox, "sub", "p*", "agent.journal"))
    )


def test_tasks_a_sub_agent_finished_are_not_run_again_on_resume(tmp_path):
    path, side = tmp_path / "session", tmp_path / "side"
    first = python_script(CLIENT, path, N, "first", side)
    assert first.stdout.readline().startswith("submitted pilot.0000")
    _until(lambda: sum(_runs(side).values()) >= 4)
    first.kill()  # SIGKILL: the client journals none of what ends from now on
    first.wait()
    sandbox = path / "pilot.0000"
    _until(lambda: _sub_finals(sandbox) >= N)  # the sub-agents finished them all, journaled
    with open(sandbox / "pilot.json") as f:
        root = json.load(f)["agent_pid"]
    os.kill(root, signal.SIGKILL)  # the pilot is gone: a resume cannot ask it
    second = python_script(CLIENT, path, N, "resume", side)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "submitted pilot.0001", lines  # the dead pilot was replaced
    assert len(lines[1].split()[1:]) == N
    runs = _runs(side)
    assert len(runs) == N and all(c == 1 for c in runs.values()), [
        u for u, c in runs.items() if c != 1
    ]
