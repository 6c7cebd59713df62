"""Service groups end to end on a local pilot: real member processes serving ZeroMQ, the
agent's registry, views, holds, resizes, restarts, health checks and bad input."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

import pilotfish as pf
from pilotfish import service

from substrate_helpers import start_pilot  # tests/substrates (on the path: conftest)

pytestmark = pytest.mark.timeout(180)

ECHO = str(Path(__file__).with_name("echo_service.py"))


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    path = tmp_path_factory.mktemp("groups") / "session"
    with pf.Session(path=path) as s:
        pilot, tmgr = start_pilot(s, nodes=1, cores_per_node=8, runtime="20m")
        yield s, pilot, tmgr


def echo(name, *extra, **fields):
    return pf.ServiceDescription(name=name, executable=sys.executable,
                                 arguments=[ECHO, *extra], **fields)


class Client:
    """Sends requests without pause, each inside a hold, to the members of the held view in
    turn; records every answer and every view it saw."""

    def __init__(self, group):
        self.group = group
        self.ctx = zmq.Context()
        self.socks: dict[str, zmq.Socket] = {}
        self.sent: list[int] = []
        self.answers: dict[int, list[str]] = {}
        self.held_views: list[tuple[int, int, str]] = []  # (epoch at hold, epoch at release)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sock(self, endpoint):
        s = self.socks.get(endpoint)
        if s is None:
            s = self.socks[endpoint] = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoint)
        return s

    def run(self):
        i = 0
        try:
            while not self.stop.is_set():
                with self.group.hold() as view:
                    if view.members:
                        m = view.members[i % len(view.members)]
                        s = self.sock(m.endpoint)
                        s.send(str(i).encode())
                        self.sent.append(i)
                        if not s.poll(10_000):
                            self.errors.append(f"no answer to {i} from {m.uid}")
                            break
                        who, _, n = s.recv().decode().partition(":")
                        self.answers.setdefault(int(n), []).append(who)
                        if who != m.uid:
                            self.errors.append(f"{i} answered by {who}, sent to {m.uid}")
                    self.held_views.append((view.epoch, self.group.epoch, view.hash))
                i += 1
        except Exception as e:  # noqa: BLE001
            self.errors.append(repr(e))


@pytest.mark.slow
def test_echo_group_resized_while_a_client_sends(local):
    _, pilot, tmgr = local
    group = tmgr.submit_service_group(echo("echo"), replicas=2)
    epochs = []
    group.on_change(lambda g, v: epochs.append(v.epoch))
    endpoints = group.wait_ready(timeout=60)
    assert len(endpoints) == 2 and len(set(endpoints)) == 2
    assert [m.node for m in group.members] == [pilot.nodes[0].name] * 2
    client = Client(group)
    client.thread.start()
    time.sleep(0.5)
    group.resize(4)
    group.wait(lambda v: len(v.members) == 4, timeout=60)
    time.sleep(0.5)
    group.resize(1)
    group.wait(lambda v: len(v.members) == 1, timeout=60)
    time.sleep(0.5)
    client.stop.set()
    client.thread.join(30)
    assert not client.errors, client.errors
    assert len(client.sent) > 20
    # every request answered exactly once
    assert sorted(client.answers) == client.sent
    assert all(len(v) == 1 for v in client.answers.values())
    # no change while held; views strictly increasing
    assert all(a == b for a, b, _ in client.held_views), client.held_views
    seen = [e for e, _, _ in client.held_views]
    assert seen == sorted(seen)
    assert epochs == sorted(set(epochs)), epochs
    assert len({e for e in seen}) >= 3  # it saw the group at 2, 4 and 1 members (at least)
    # the members asked to leave left (exit 0), oldest ones stayed
    deadline = time.monotonic() + 30
    while len([n for n in group.news if n.state == "left"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len([n for n in group.news if n.state == "left"]) == 3
    assert group.members[0].uid == "echo.m0000"
    group.stop()
    group.wait(lambda v: not v.members, timeout=30)


def test_killed_member_is_restarted_and_the_view_moves_on(local):
    _, _, tmgr = local
    group = tmgr.submit_service_group(echo("restarts", max_restarts=1), replicas=2)
    group.wait_ready(timeout=60)
    victim = group.members[0]
    epoch = group.epoch
    os.kill(victim.info["pid"], signal.SIGKILL)
    view = group.wait(lambda v: len(v.members) == 2 and victim.uid not in
                      {m.uid for m in v.members}, timeout=60)
    assert view.epoch >= epoch + 2  # it left, its replacement joined
    failed = [n for n in group.news if n.state == "failed"]
    assert failed and failed[0].uid == victim.uid and "SIGKILL" in failed[0].reason
    assert any(n.state == "restarting" and n.reason == victim.uid for n in group.news)
    # max_restarts=1 per slot: the replacement's death is final, the group is short
    replacement = next(n.uid for n in group.news if n.state == "restarting")
    member = next(m for m in view.members if m.uid == replacement)
    os.kill(member.info["pid"], signal.SIGKILL)
    with pytest.raises(pf.ServiceError, match="max_restarts"):
        group.wait(lambda v: False, timeout=30)
    group.stop()


def test_member_that_never_announces_fails_with_its_stderr(local):
    _, _, tmgr = local
    d = pf.ServiceDescription(
        name="mute", executable=sys.executable, ready_timeout=1.0, restart="never",
        arguments=["-c", "import sys, time; sys.stderr.write('mute-marker\\n'); "
                         "sys.stderr.flush(); time.sleep(60)"])
    group = tmgr.submit_service_group(d, replicas=1)
    with pytest.raises(pf.ServiceError) as e:
        group.wait_ready(timeout=30)
    assert "ready_timeout" in str(e.value) and "mute-marker" in str(e.value)
    assert group.members == [] and group.epoch == 0


def test_endpoint_announced_twice_is_refused(local):
    _, _, tmgr = local
    group = tmgr.submit_service_group(echo("twice", "--twice", restart="never"), replicas=1)
    with pytest.raises(pf.ServiceError, match="announced its endpoint already"):
        group.wait(lambda v: False, timeout=30)
    # two members announcing one endpoint (stdout lines): one serves, the other fails
    group = tmgr.submit_service_group(
        echo("same", "--stdout", "--fixed", "tcp://127.0.0.1:1", restart="never"), replicas=2)
    with pytest.raises(pf.ServiceError, match=r"is announced by same\.m00[01]"):  # (either first)
        group.wait_ready(timeout=30)
    assert len(group.members) == 1 and group.members[0].endpoint == "tcp://127.0.0.1:1"
    group.stop()


def serve(tag):
    """A function service: announces, answers until asked to leave."""
    import zmq

    from pilotfish import service

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    me = service.announce(f"tcp://127.0.0.1:{port}", tag=tag)
    while not me.leaving.is_set():
        if sock.poll(50):
            sock.send(b"fn:" + sock.recv())


def test_function_service_and_unhealthy_member(local):
    _, _, tmgr = local
    group = tmgr.submit_service_group(pf.ServiceDescription(
        name="fn", function=serve, args=("blue",)), replicas=1)
    (endpoint,) = group.wait_ready(timeout=60)
    assert group.members[0].info == {"tag": "blue"}
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(endpoint)
    s.send(b"x")
    assert s.poll(10_000) and s.recv() == b"fn:x"
    s.close(0)
    group.stop()
    group.wait(lambda v: not v.members, timeout=30)
    # a probe that fails: the member fails its health check and is replaced
    sick = tmgr.submit_service_group(echo("sick", "--unhealthy-after", "2", "--sick", "sick.m0000",
                                          health_interval=0.2, max_restarts=1), replicas=1)
    sick.wait_ready(timeout=60)
    first = sick.members[0].uid
    sick.wait(lambda v: v.members and v.members[0].uid != first, timeout=60)
    failed = [n for n in sick.news if n.state == "failed"]
    assert "health check failed: probe returned False" in failed[0].reason
    sick.stop()


def test_a_task_in_the_pilot_holds_the_view_and_talks_to_members(local):
    _, _, tmgr = local
    group = tmgr.submit_service_group(echo("inner"), replicas=2)
    group.wait_ready(timeout=60)
    code = ("import zmq; from pilotfish import service\n"
            "g = service.Group('inner')\n"
            "v = g.wait(lambda v: len(v.members) == 2, timeout=30)\n"
            "ctx = zmq.Context(); out = []\n"
            "with g.hold() as view:\n"
            "    for m in view.members:\n"
            "        s = ctx.socket(zmq.DEALER); s.connect(m.endpoint); s.send(b'hi')\n"
            "        assert s.poll(10000); out.append(s.recv().decode())\n"
            "    print(view.epoch, view.hash, sorted(out))\n")
    t = tmgr.submit_tasks(pf.TaskDescription(executable=sys.executable, arguments=["-c", code]))
    assert t.wait(timeout=60) == pf.DONE, (t.reason, t.stderr)
    epoch, digest, answers = t.stdout.split(" ", 2)
    assert int(epoch) == group.epoch and digest == group.view_hash
    assert answers.strip() == str(sorted(f"{m.uid}:hi" for m in group.members))
    group.stop()


def test_bad_input_is_refused_naming_the_field(local):
    _, _, tmgr = local
    for replicas in (0, -1, "2", 1.5):
        with pytest.raises(pf.DescriptionError) as e:
            tmgr.submit_service_group(echo("bad"), replicas=replicas)
        assert e.value.field == "replicas"
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_service_group(echo("big"), replicas=9)  # 8 cores
    assert e.value.field == "replicas" and "grow=True" in str(e.value)
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_service_group(pf.ServiceDescription(name="x", executable="/bin/true",
                                                        function=serve))
    assert e.value.field in ("function", "executable")
    with pytest.raises(pf.DescriptionError) as e:
        pf.ServiceDescription(name="a/b", executable="/bin/true")
    assert e.value.field == "name"
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_service_group({"executable": "/bin/true"})
    assert e.value.field == "name"
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_service_group(echo("wide", cores_per_rank=9))
    assert e.value.field == "cores_per_rank"
    group = tmgr.submit_service_group(echo("dup"), replicas=1)
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_service_group(echo("dup"), replicas=1)
    assert e.value.field == "name"
    for n in (-1, "3"):
        with pytest.raises(pf.DescriptionError) as e:
            group.resize(n)
        assert e.value.field == "replicas"
    with pytest.raises(pf.DescriptionError):
        group.resize(100)
    group.wait_ready(timeout=60)
    assert len(group.members) == 1  # nothing was lost by the refusals
    # a numpy string names a group (it was msgpack's TypeError, and then the name was taken:
    # "runs on pilot.0000 already")
    import numpy as np

    named = tmgr.submit_service_group(echo(np.str_("npname")), replicas=1)
    assert type(named.name) is str and named.name == "npname"
    named.stop()
    with pytest.raises(service.ServiceError, match="not a member"):
        service.announce("tcp://127.0.0.1:1")
    group.stop()


def test_holds_defer_changes_and_go_with_their_task(local):
    _, _, tmgr = local
    group = tmgr.submit_service_group(echo("held"), replicas=2)
    group.wait_ready(timeout=60)
    with group.hold() as view:
        group.resize(3)  # the new member gets ready, its join waits for the release
        deadline = time.monotonic() + 30
        while not any(n.state == "ready" and n.uid == "held.m0002" for n in group.news) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        group.resize(2)  # ... and it is the one that leaves: no view ever names it
        deadline = time.monotonic() + 30
        while not any(n.state == "left" and n.uid == "held.m0002" for n in group.news) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(n.state == "left" and n.uid == "held.m0002" for n in group.news)
        assert group.epoch == view.epoch
    assert all(h[2] <= 2 for h in group.history)
    assert "held.m0002" not in {m.uid for m in group.members}
    # a task that holds the view and exits without releasing: its hold goes with it
    code = ("from pilotfish import service\n"
            "g = service.Group('held'); h = g.hold(); print(h.view.epoch)\n")
    t = tmgr.submit_tasks(pf.TaskDescription(executable=sys.executable, arguments=["-c", code]))
    assert t.wait(timeout=60) == pf.DONE, (t.reason, t.stderr)
    group.resize(1)
    group.wait(lambda v: len(v.members) == 1, timeout=30)
    group.stop()
