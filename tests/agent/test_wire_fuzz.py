"""Frames straight to a live agent -- plausible task specs with garbage fields, truncated and
overlong specs, random cancels, resyncs and junk: the agent never dies, and afterwards it
still runs a normal task. (bench/bench_wire_fuzz.py runs the same for 100,000 messages.)"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings

import pilotfish as pf
import wire_fuzz  # tests/agent (pytest puts a test's directory on sys.path)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with pf.Session(path=tmp_path_factory.mktemp("wire") / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=4, runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        yield s, pilot, tmgr


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=wire_fuzz.frame)
def test_frames_never_kill_the_agent(live, frame):
    s, pilot, _ = live
    data = wire_fuzz.encode(frame)
    if data is not None:
        s.plane.bridge.send(pilot.uid, data)


def test_agent_still_serves_after_the_fuzz(live):
    s, pilot, tmgr = live
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo", arguments=["alive"]))
    assert t.wait(timeout=60) == pf.DONE and t.stdout == "alive\n"
    assert pilot.state == pf.ACTIVE
    pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
    assert os.path.exists(f"/proc/{pid}")
