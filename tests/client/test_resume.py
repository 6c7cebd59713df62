"""Crash-safe sessions: a killed client or agent resumes without losing or re-running finished
tasks. Real clients (subprocesses, SIGKILLed), real agents; executions are counted through a
side effect each task leaves."""

from __future__ import annotations

import collections
import json
import os
import signal
import textwrap
import time

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events
from substrate_helpers import python_script  # tests/substrates (on the path: conftest)

CLIENT = textwrap.dedent("""
    import sys, pilotfish as pf
    path, n, resume, side = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m"))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    tasks = tm.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"sleep 0.05; echo $PILOTFISH_TASK_UID >> {side}"])
        for _ in range(n)])
    print("submitted", pilot.uid, flush=True)
    tm.wait_tasks()
    print("done", " ".join(t.uid for t in tasks if t.state == "DONE"), flush=True)
    s.close()
""")


def _client(path, n, mode, side):
    return python_script(CLIENT, path, n, mode, side)


def _runs(side) -> collections.Counter:
    with open(side) as f:
        return collections.Counter(line.strip() for line in f if line.strip())


def _wait_lines(side, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(side) and sum(_runs(side).values()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} tasks ran")


N = 200


@pytest.mark.slow
def test_killed_client_resumes_on_the_live_agent(tmp_path):
    path, side = tmp_path / "session", tmp_path / "side"
    first = _client(path, N, "first", side)
    assert first.stdout.readline().startswith("submitted pilot.0000")
    _wait_lines(side, 30)
    first.kill()  # SIGKILL: no close, no flush
    first.wait()
    second = _client(path, N, "resume", side)
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "submitted pilot.0000", lines  # re-attached, not replaced
    done = lines[1].split()[1:]
    assert len(done) == N
    runs = _runs(side)
    assert set(runs) == set(done) and all(c == 1 for c in runs.values()), \
        [u for u, c in runs.items() if c != 1]
    names = [e[2] for e in read_all_events(path / "client.events")]
    assert "reattached" in names and "session_resume" in names


@pytest.mark.slow
def test_killed_agent_resumes_on_a_new_pilot_without_rerunning_done_tasks(tmp_path):
    path, side = tmp_path / "session", tmp_path / "side"
    first = _client(path, N, "first", side)
    assert first.stdout.readline().startswith("submitted pilot.0000")
    _wait_lines(side, 40)
    agent_pid = json.load(open(path / "pilot.0000" / "pilot.json"))["agent_pid"]
    os.kill(agent_pid, signal.SIGKILL)
    out, _ = first.communicate(timeout=120)
    done_first = out.splitlines()[-1].split()[1:]
    assert 0 < len(done_first) < N
    second = _client(path, N, "resume", side)
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "submitted pilot.0001", lines  # the dead pilot was replaced
    assert len(lines[1].split()[1:]) == N
    runs = _runs(side)
    assert len(runs) == N
    assert all(runs[u] == 1 for u in done_first)  # acknowledged DONE: never run again
    # uids never restart: the new pilot ran the old uids, and a new task gets the next one
    with pf.Session(path=path, resume=True, heartbeat_s=0.5) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m"))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        old = tm.submit_tasks([pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", f"sleep 0.05; echo $PILOTFISH_TASK_UID >> {side}"])
            for _ in range(N)])
        assert all(t.state == pf.DONE for t in old)  # all known: nothing sent anywhere
        new = tm.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        assert new.uid == f"task.{N:06d}"
        assert new.wait(timeout=60) == pf.DONE
    assert sum(_runs(side).values()) == sum(runs.values())


KEPT_CLIENT = textwrap.dedent("""
    import sys, pilotfish as pf
    path, n, resume, side = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m", cores_per_node=4))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    tasks = tm.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"sleep 1.5; echo $PILOTFISH_TASK_UID >> {side}"],
        stdout=False, stderr=False) for _ in range(n)])
    print("submitted", pilot.uid, flush=True)
    tm.wait_tasks()
    for t in tasks:
        print(t.uid, t.state, t.reason, flush=True)
    s.close()
""")


def _spawns(sandbox) -> int:
    from pilotfish._exit_log import read_exit_log

    return len(read_exit_log(str(sandbox))[1])


def _kept_client(path, n, mode, side):
    return python_script(KEPT_CLIENT, path, n, mode, side)


def _four_running(path, side, n):
    """A KEPT_CLIENT whose pilot has spawned its first 4 tasks: (client, pilot sandbox)."""
    first = _kept_client(path, n, "first", side)
    assert first.stdout.readline().startswith("submitted pilot.0000")
    sandbox = path / "pilot.0000"
    deadline = time.time() + 60
    while _spawns(sandbox) < 4 and time.time() < deadline:
        time.sleep(0.05)
    return first, sandbox


@pytest.mark.slow
def test_tasks_in_flight_when_the_agent_is_killed_run_exactly_once(tmp_path):
    """The agent is SIGKILLed while 4 tasks run (each sleeps, then leaves its side effect):
    its keeper sees them to their end, the client reports them DONE (they are not failed with
    the pilot), and the resume runs only the tasks that had not started."""
    path, side, n = tmp_path / "session", tmp_path / "side", 8
    first, sandbox = _four_running(path, side, n)
    assert not os.path.exists(side)  # all 4 are still sleeping
    agent_pid = json.load(open(sandbox / "pilot.json"))["agent_pid"]
    os.kill(agent_pid, signal.SIGKILL)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    states = dict(line.split(" ", 2)[:2] for line in out.splitlines())
    done = {u for u, st in states.items() if st == "DONE"}
    assert len(done) == 4, out  # the 4 in flight, through the keeper
    assert set(_runs(side)) == done
    keeper = json.load(open(sandbox / "keeper.json"))
    assert keeper["agent_status"] == "killed by signal 9" and keeper["done"]
    assert sorted(keeper["adopted"]) == sorted(done)
    second = _kept_client(path, n, "resume", side)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.splitlines()[0] == "submitted pilot.0001"
    assert all(line.split()[1] == "DONE" for line in out.splitlines()[1:]), out
    runs = _runs(side)
    assert len(runs) == n and set(runs.values()) == {1}, runs  # each exactly once


@pytest.mark.slow
def test_agent_killed_while_the_client_is_away_its_running_tasks_are_adopted(tmp_path):
    """Client SIGKILLed, then the agent, while tasks run: the resumed client neither fails
    nor re-sends what the keeper runs; it learns their end from the keeper."""
    path, side, n = tmp_path / "session", tmp_path / "side", 8
    first, sandbox = _four_running(path, side, n)
    first.kill()
    first.wait()
    os.kill(json.load(open(sandbox / "pilot.json"))["agent_pid"], signal.SIGKILL)
    second = _kept_client(path, n, "resume", side)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.splitlines()[0] == "submitted pilot.0001"
    assert all(line.split()[1] == "DONE" for line in out.splitlines()[1:]), out
    runs = _runs(side)
    assert len(runs) == n and set(runs.values()) == {1}, runs
    assert len(json.load(open(sandbox / "keeper.json"))["adopted"]) == 4


def test_resume_refuses_a_different_workload(tmp_path):
    path = tmp_path / "session"
    with pf.Session(path=path) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="1m"))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        tm.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        tm.wait_tasks(timeout=60)
    with pf.Session(path=path, resume=True, heartbeat_s=0.5) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="1m"))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        with pytest.raises(pf.PilotfishError, match="differs"):
            tm.submit_tasks(pf.TaskDescription(executable="/bin/false"))


GROUP_CLIENT = textwrap.dedent("""
    import sys, time, pilotfish as pf
    path, resume, replicas, args = sys.argv[1], sys.argv[2] == "resume", int(sys.argv[3]), sys.argv[4:]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=8,
                                                                 runtime="10m"))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    try:
        g = tm.submit_service_group(pf.ServiceDescription(
            name="echo", executable=sys.executable, arguments=args), replicas=replicas)
    except pf.ServiceError as e:
        print("refused", e, flush=True)
        sys.exit(3)
    g.wait_ready(timeout=60)
    print("view", g.target, " ".join(m.uid for m in g.members), flush=True)
    if not resume:
        g.hold()  # then killed with the hold in place
        print("held", flush=True)
        time.sleep(600)
    g.resize(g.target + 1)  # a hold left by the killed client would keep the new one out
    g.wait_ready(timeout=60)
    print("view", g.target, " ".join(m.uid for m in g.members), flush=True)
    g.stop()
    s.close()
""")


def _group_client(path, mode, replicas, *args):
    echo = os.path.join(os.path.dirname(__file__), "..", "services", "echo_service.py")
    return python_script(GROUP_CLIENT, path, mode, replicas, os.path.abspath(echo), *args)


@pytest.mark.slow
def test_resumed_program_reattaches_its_running_service_group(tmp_path):
    """Running the same program again re-attaches a service group its live agent still runs:
    the same members, not restarted (the size they have, not the one asked for), the killed
    client's hold released; a group started with another description is refused."""
    path = tmp_path / "session"
    first = _group_client(path, "first", 2)
    view = first.stdout.readline().split()
    assert view[:2] == ["view", "2"] and len(view) == 4, (view, first.stderr.read())
    assert first.stdout.readline().strip() == "held"
    first.kill()  # SIGKILL, holding the group's view
    first.wait()
    changed = _group_client(path, "resume", 2, "--other")
    out, err = changed.communicate(timeout=120)
    assert changed.returncode == 3 and "another description" in out, (out, err)
    assert "arguments = " in out and "--other" in out, out  # which field, both values
    second = _group_client(path, "resume", 5)  # asks for 5: the group runs with 2
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == view, lines  # the same two members
    assert lines[1][:2] == ["view", "3"] and lines[1][2:4] == view[2:], lines


STOPPED_CLIENT = textwrap.dedent("""
    import sys, time, pilotfish as pf
    path, resume, echo = sys.argv[1], sys.argv[2] == "resume", sys.argv[3]
    s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=8,
                                                                 runtime="10m"))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    g = tm.submit_service_group(pf.ServiceDescription(
        name="echo", executable=sys.executable, arguments=[echo]), replicas=2)
    print("ready", len(g.wait_ready(timeout=60)), g.reattached, flush=True)
    g.stop()
    g.wait(lambda v: not v.members, timeout=60)
    print("stopped", flush=True)
    if not resume:
        time.sleep(600)  # killed here, its group stopped
    s.close()
""")


def test_resumed_program_restarts_a_group_it_had_stopped(tmp_path):
    """A group the killed run had stopped (size 0) is started again at the size the program
    asks for when it is re-attached, as the program's replay expects."""
    path = tmp_path / "session"
    echo = os.path.join(os.path.dirname(__file__), "..", "services", "echo_service.py")
    first = python_script(STOPPED_CLIENT, path, "first", os.path.abspath(echo))
    assert first.stdout.readline().split() == ["ready", "2", "False"], first.stderr.read()
    assert first.stdout.readline().strip() == "stopped"
    first.kill()
    first.wait()
    second = python_script(STOPPED_CLIENT, path, "resume", os.path.abspath(echo))
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.splitlines()[:2] == ["ready 2 True", "stopped"], (out, err)
