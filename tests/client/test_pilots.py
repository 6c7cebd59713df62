"""Pilot life cycle on real local pilots: ready, walltime drain, cancel, agent failure."""

from __future__ import annotations

import json
import os
import time

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events


def test_pilot_states_and_sandbox(session):
    pmgr = pf.PilotManager(session)
    seen = []
    pmgr.register_callback(lambda p, s: seen.append(s))
    t0 = time.time()
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=8, runtime="5m"))
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
    ready = time.time() - t0
    assert [n.cores for n in pilot.nodes] == [8, 8]
    info = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))
    assert info["nodes"][0][1] == 8
    pmgr.cancel_pilots(pilot.uid)
    assert pilot.wait(timeout=30) == pf.CANCELED
    assert seen == [pf.NEW, pf.LAUNCHING, pf.ACTIVE, pf.CANCELED]
    assert [s for s, _ in pilot.history] == seen
    assert ready < 10


@pytest.mark.slow
def test_walltime_drains_cleanly(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="4s"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    quick = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    long = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["60"])
                              for _ in range(3)])  # 2 run, 1 waits
    assert pilot.wait(timeout=60) == pf.DONE
    assert "walltime" in pilot.reason
    assert quick.state == pf.DONE
    states = sorted(t.state for t in long)
    assert states == [pf.CANCELED, pf.FAILED, pf.FAILED]
    for t in long:
        assert "walltime" in t.reason
    # the agent drained before the walltime and said so in its events
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    names = [e[2] for e in ev if e[1] == pilot.uid]
    for name in ("bootstrap_start", "resources_ok", "ACTIVE", "drain_start", "drain_stop", "agent_stop"):
        assert name in names
    stop = [e[0] for e in ev if e[2] == "agent_stop"][0]
    start = [e[0] for e in ev if e[2] == "bootstrap_start"][0]
    assert stop - start < 4.0  # stopped before the walltime ran out


def _sleeping_task(session):
    """A small local pilot running one `sleep 60`: (pilot, task)."""
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"]))
    t.wait(state=pf.EXECUTING, timeout=60)
    return pilot, t


def test_agent_death_fails_pilot_its_running_task_stays_with_the_keeper(tmp_path):
    """SIGKILL to the agent: the pilot fails at once with the reason; the task it was
    running is its keeper's now (agent/keeper.py), neither failed nor run again; closing the
    session stops the keeper and the task, so nothing outlives the session."""
    s = pf.Session(path=tmp_path / "s")
    pilot, t = _sleeping_task(s)
    agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
    os.kill(agent_pid, 9)
    assert pilot.wait(timeout=30) == pf.FAILED
    assert "signal 9" in pilot.reason
    time.sleep(1)
    assert t.state == pf.EXECUTING  # kept: its end will come from the keeper
    keeper = json.load(open(os.path.join(pilot.sandbox, "keeper.json")))
    assert keeper["adopted"] == [t.uid] and not keeper["done"]
    s.close()
    deadline = time.time() + 15
    while time.time() < deadline and (os.path.exists(f"/proc/{keeper['pid']}")
                                      and "Z" not in open(f"/proc/{keeper['pid']}/stat").read().split()[2]):
        time.sleep(0.1)
    assert json.load(open(os.path.join(pilot.sandbox, "keeper.json")))["done"]
    assert [p for p in os.listdir("/proc") if p.isdigit() and _marked(p, pilot.sandbox)] == []


def _marked(pid: str, sandbox: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"PILOTFISH_SANDBOX={sandbox}".encode() in f.read()
    except OSError:
        return False


def test_bad_agent_environment_fails_with_reason(session):
    """A pilot whose agent cannot start fails with the agent's own error."""
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, runtime="5m", sandbox="/proc/no-such-dir"))
    assert pilot.wait(timeout=30) == pf.FAILED
    assert pilot.reason


def test_session_close_cancels_running_tasks(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, t = _sleeping_task(s)
    assert t.state == pf.CANCELED
    assert pilot.state == pf.DONE
    assert os.path.exists(tmp_path / "s" / "tasks.msgpack")


def test_submit_without_pilot_is_an_error(session):
    tmgr = pf.TaskManager(session)
    with pytest.raises(pf.PilotfishError, match="add_pilots"):
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))


@pytest.mark.slow
def test_bulk_submit_spreads_over_pilots_by_capacity(session):
    """Pilots of 4, 32 and 128 cores, 256 one-core tasks in one call: each pilot gets work in
    proportion to its cores (all went to the 4-core pilot: 64 waves of `sleep 1`), so no
    pilot needs more than two waves."""
    pmgr = pf.PilotManager(session)
    pilots = pmgr.submit_pilots([pf.PilotDescription(nodes=1, cores_per_node=c, runtime="5m")
                                 for c in (4, 32, 128)])
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilots)
    for p in pilots:
        assert p.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["1"],
                                                  stdout=False, stderr=False)
                               for _ in range(256)])
    per = {p.uid: sum(t.pilot == p.uid for t in tasks) for p in pilots}
    for p, cores in zip(pilots, (4, 32, 128)):
        assert per[p.uid] <= 2 * cores, per
    assert per[pilots[2].uid] > per[pilots[1].uid] > per[pilots[0].uid] > 0, per
    tmgr.wait_tasks(timeout=120)
    assert {t.state for t in tasks} == {pf.DONE}
    start = min(dict(zip(t._hist[::2], t._hist[1::2]))[pf.EXECUTING] for t in tasks)
    end = max(dict(zip(t._hist[::2], t._hist[1::2]))[pf.DONE] for t in tasks)
    assert end - start < 20  # about 2 s of sleeping; 64 s before (a generous bound)


def test_canceled_then_closed_pilot_stays_canceled(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        pmgr.cancel_pilots()
    assert (pilot.state, pilot.reason) == (pf.CANCELED, "canceled by the user")


def test_nodes_right_after_submit_wait_until_known(session):
    """pilot.nodes straight after submit_pilots gives the nodes (it waits for the agent),
    not [] (issue 30, item 5), also from a callback of the LAUNCHING state; a pilot that
    fails before its agent runs says so and why."""
    pmgr = pf.PilotManager(session)
    in_cb = []

    def cb(pilot, state):
        if state == pf.LAUNCHING:
            in_cb.append(len(pilot.nodes))

    pmgr.register_callback(cb)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=3, cores_per_node=4, runtime="5m"))
    nodes = pilot.nodes
    assert [n.cores for n in nodes] == [4, 4, 4]
    assert pilot.state == pf.ACTIVE
    assert in_cb == [3]
    bad = pmgr.submit_pilots(pf.PilotDescription(nodes=1, runtime="5m",
                                                 sandbox="/proc/no-such-dir"))
    with pytest.raises(pf.PilotfishError, match="FAILED before its agent ran"):
        bad.nodes
    pmgr.cancel_pilots(pilot.uid)
    assert pilot.wait(timeout=30) == pf.CANCELED
    assert [n.cores for n in pilot.nodes] == [4, 4, 4]  # still known after the end
