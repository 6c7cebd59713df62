"""The locked control plane: only a pilot's own agent can speak for it; sessions are private;
heartbeats both ways. Real sessions, real agents, a real second uid as the attacker."""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import pilotfish as pf
from pilotfish import _wire
from pilotfish._events import read_all_events

ATTACKER = textwrap.dedent("""
    import os, sys, time, zmq
    uid = int(sys.argv[3])
    os.setgid(uid); os.setuid(uid)        # another user on the login node
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.ROUTING_ID, b"pilot.0000")
    s.setsockopt(zmq.LINGER, 0)
    if sys.argv[2] == "curve":             # knows the server's public key, not a pilot's secret
        pub, sec = zmq.curve_keypair()
        s.setsockopt(zmq.CURVE_SERVERKEY, sys.argv[4].encode())
        s.setsockopt(zmq.CURVE_PUBLICKEY, pub)
        s.setsockopt(zmq.CURVE_SECRETKEY, sec)
    s.connect(sys.argv[1])
    s.send(bytes.fromhex(sys.argv[5]))  # a forged hello
    got = 0
    deadline = time.time() + 4
    while time.time() < deadline:
        if s.poll(200):
            s.recv(); got += 1
    print(got)
""")


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
@pytest.mark.parametrize("mode", ["curve", "plain"])
def test_second_user_cannot_take_over_a_tcp_pilot(tmp_path, mode):
    path = tmp_path / "session"
    with pf.Session(path=path, bind="tcp", interface="127.0.0.1") as s:
        assert s.address.startswith("tcp://127.0.0.1:")  # one interface, never 0.0.0.0
        pmgr = pf.PilotManager(s)
        server_key = json.load(open(path / "session.key"))["public"]
        hello = _wire.encode(_wire.Hello("pilot.0000", [], "direct", time.time())).hex()
        # the attacker connects first, as pilot.0000, before the real agent says hello
        os.chmod(tmp_path, 0o755)
        attacker = subprocess.Popen(
            [sys.executable, "-c", ATTACKER, s.address, mode, str(_nobody()), server_key, hello],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        time.sleep(1.0)
        pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        task = tmgr.submit_tasks(pf.TaskDescription(
            executable="/bin/echo", arguments=["secret"], environment={"TOKEN": "s3cr3t"}))
        assert task.wait(timeout=60) == pf.DONE, task.reason
        assert task.stdout == "secret\n"
        out, _ = attacker.communicate(timeout=30)
        assert out.strip() == "0", "the attacker received frames"
    refused = [e for e in read_all_events(path / "client.events") if e[2] == "refused"]
    if mode == "curve":  # it got as far as proving a key: that refusal is logged
        assert refused and "unknown key" in refused[0][3]
    else:  # it never reached ZAP: the failed handshake is logged all the same
        assert refused and "handshake" in refused[0][3], refused


def test_session_files_are_private(tmp_path):
    path = tmp_path / "session"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="5m"))
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
        assert mode(path) == 0o700
        assert mode(path / "session.key") == 0o600
        assert mode(pilot.sandbox) == 0o700
        assert mode(os.path.join(pilot.sandbox, "agent.json")) == 0o600
        assert mode(path / "journal") == 0o600
        cfg = json.load(open(os.path.join(pilot.sandbox, "agent.json")))
        assert cfg["curve"]["secret"] and cfg["curve"]["server"] == s.plane.bridge.public_key.decode()


def test_reused_session_directory_is_refused_without_resume(tmp_path):
    path = tmp_path / "session"
    with pf.Session(path=path):
        pass
    with pytest.raises(pf.PilotfishError, match="resume=True"):
        pf.Session(path=path)


@pytest.mark.slow
def test_silent_agent_fails_its_pilot(tmp_path):
    """A frozen agent (SIGSTOP: alive, but silent) is noticed by its missing heartbeats."""
    with pf.Session(path=tmp_path / "s", heartbeat_s=0.5, agent_timeout=3) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        task = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"]))
        task.wait(pf.EXECUTING, timeout=30)
        agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
        os.kill(agent_pid, signal.SIGSTOP)
        try:
            assert pilot.wait(timeout=30) == pf.FAILED
            assert "agent silent" in pilot.reason
            assert task.wait(timeout=10) == pf.FAILED
        finally:
            try:
                os.kill(agent_pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


CLIENT = textwrap.dedent("""
    import sys, time, pilotfish as pf
    s = pf.Session(path=sys.argv[1], heartbeat_s=0.5, client_timeout=3)
    p = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m"))
    t = pf.TaskManager(s); t.add_pilots(p)
    t.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["300"]))
    p.wait(pf.ACTIVE, timeout=60)
    print("up", flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_agent_of_a_dead_client_drains_and_ends(tmp_path):
    path = tmp_path / "s"
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(path)], stdout=subprocess.PIPE,
                              text=True)
    assert client.stdout.readline().strip() == "up"
    time.sleep(1)
    cfg = json.load(open(path / "pilot.0000" / "pilot.json"))
    agent_pid = cfg["agent_pid"]
    client.kill()  # SIGKILL: no goodbye
    client.wait()
    deadline = time.time() + 30
    while time.time() < deadline and os.path.exists(f"/proc/{agent_pid}"):
        with open(f"/proc/{agent_pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{agent_pid}") or "Z" in open(f"/proc/{agent_pid}/stat").read().rsplit(")", 1)[1].split()[0]
    names = [(e[2], e[3]) for e in read_all_events(path / "pilot.0000" / "agent.events")
             if e[1] == "pilot.0000"]
    assert any(n == "drain_start" and "client silent" in (d or "") for n, d in names), names
    # its task did not outlive it
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _marked(p, str(path))]


def _marked(pid: str, sandbox_prefix: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"PILOTFISH_SANDBOX={sandbox_prefix}".encode() in f.read()
    except OSError:
        return False
