"""The agent's configuration is a typed contract (_wire.AgentConfig): what the client writes
the agent reads field by field, and an agent.json that is not one -- a field of the wrong type,
one unknown, one missing, or a link in the file's place -- stops the agent at once, naming the
file and the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pilotfish import _wire

GOOD = {
    "pilot_uid": "pilot.0000",
    "session_uid": "pf.x",
    "session_path": "/nonexistent",
    "sandbox": "SANDBOX",
    "address": "ipc:///nonexistent",
    "description": {"resource": "local", "nodes": 1, "runtime": 60.0},
}


def test_what_the_client_writes_the_agent_reads():
    cfg = _wire.AgentConfig(**GOOD, heartbeat_s=0.5, curve=_wire.Curve("s", "p", "x"))
    back = _wire.decode_agent_config(_wire.encode_agent_config(cfg), "agent.json")
    assert back == cfg and back.curve.public == "p" and back.journal is True
    assert json.loads(_wire.encode_agent_config(cfg))["heartbeat_s"] == 0.5  # (JSON, readable)


def _agent(path):
    return subprocess.run([sys.executable, "-m", "pilotfish.agent", str(path)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("change, field", [
    ({"heartbeat_s": "fast"}, "heartbeat_s"),
    ({"heartbeat": 1}, "heartbeat"),
    ({"sandbox": None}, "sandbox"),
    ({"curve": {"server": "s", "public": "p"}}, "curve"),
])
def test_an_agent_json_that_is_no_configuration_stops_the_agent_naming_the_field(
        tmp_path, change, field):
    cfg = {**GOOD, "sandbox": str(tmp_path), **change}
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(cfg))
    r = _agent(path)
    assert r.returncode == 2, r.stderr
    assert str(path) in r.stderr and field in r.stderr, r.stderr
    assert not (tmp_path / "agent.log").exists()  # (stopped before it started anything)


def test_an_agent_json_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps(dict(GOOD, sandbox=str(tmp_path))))
    os.symlink(real, tmp_path / "agent.json")
    r = _agent(tmp_path / "agent.json")
    assert r.returncode == 2 and "agent.json" in r.stderr, r.stderr
    assert not (tmp_path / "agent.log").exists()
