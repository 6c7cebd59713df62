"""The node executors' configuration (nodes.json) is typed: _node_wire.NodeConfig, each default
written once; an executor refuses a config that is not one, naming the field, and never reads
one through a link."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pilotfish import _node_wire as W

GOOD = {"pilot": "p", "sandbox": "/tmp/x", "address": "tcp://127.0.0.1:1", "key_file": "/k"}


def _write(path, obj):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def test_defaults_are_written_once(tmp_path):
    c = W.read_node_config(_write(tmp_path / "nodes.json", GOOD))
    assert (c.beat_s, c.agent_timeout_s, c.fence_after_s, c.deadline) == (
        W.BEAT_S,
        W.AGENT_TIMEOUT_S,
        None,
        None,
    )


@pytest.mark.parametrize(
    "field,value,why",
    [
        ("beat_s", "fast", "Expected `float`"),
        ("beat_s", -1.0, ">= 0.0"),
        ("fence_after_s", "x", "Expected `float | null`"),
        ("surprise", 1, "unknown field `surprise`"),
    ],
)
def test_a_bad_field_is_named(tmp_path, field, value, why):
    with pytest.raises(ValueError) as e:
        W.read_node_config(_write(tmp_path / "nodes.json", {**GOOD, field: value}))
    assert why in str(e.value) and (field in str(e.value)), e.value


def test_missing_field_and_not_json_are_named(tmp_path):
    with pytest.raises(ValueError, match="address"):
        W.read_node_config(
            _write(tmp_path / "a.json", {k: v for k, v in GOOD.items() if k != "address"})
        )
    with pytest.raises(ValueError, match="not JSON"):
        W.read_node_config(_write(tmp_path / "b.json", "{not json"))


def test_a_link_is_never_followed(tmp_path):
    real = _write(tmp_path / "real.json", GOOD)
    os.symlink(real, tmp_path / "nodes.json")
    with pytest.raises(ValueError, match="symbolic link"):
        W.read_node_config(str(tmp_path / "nodes.json"))


@pytest.mark.parametrize("module", ["pilotfish.agent.node_executor", "pilotfish.agent.node_emulated"])
def test_an_executor_refuses_a_bad_config_by_name(tmp_path, module):
    cfg = _write(tmp_path / "nodes.json", {**GOOD, "beat_s": "often"})
    argv = [sys.executable, "-m", module, cfg] + (
        ["--procs", "1", "n1"] if "emulated" in module else []
    )
    r = subprocess.run(
        argv, input=os.urandom(32).hex() + "\n", capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "beat_s" in r.stderr and "nodes.json" in r.stderr, r
