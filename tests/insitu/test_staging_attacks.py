"""Staging servers against a hostile co-located user (uid nobody, as any other user of a
shared node) and against bad frames from the area's own clients: real pilots, real servers.

The attacks, each reproduced on the code before the fix (issue 32, item 1): a forged
collective message whose pickle runs a command as the area's owner; a ping that tells the
pipelines; a destroy that breaks the owner's next activate; garbage that kills a server; a
module that exits on import; an activate of an epoch that never comes, stalling the server.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time

import msgspec
import numpy as np
import pytest
import zmq

import pilotfish as pf
from pilotfish import insitu
from pilotfish.insitu._client import _Channel

from substrate_helpers import start_pilot  # tests/substrates (on the path: conftest)

pytestmark = pytest.mark.timeout(300)

# What the attacker runs, as nobody, with the system's Python (no pyzmq: nobody cannot read
# the project's venv) speaking ZMTP 3 by hand to every server's TCP port (a listening port is
# visible to every user in /proc/net/tcp), with the best guess of the tag there is.
ATTACK = r"""
import json, os, pickle, socket, struct, sys, time
endpoints, tags, pwned = json.loads(sys.argv[1])

class Payload:
    def __reduce__(self):
        return (os.system, (f"id > {pwned}",))

def frame(body, more=False, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body

def message(*parts):
    return b"".join(frame(p, more=i < len(parts) - 1) for i, p in enumerate(parts))

def mp_str(s):
    return bytes([0xa0 + len(s)]) + s.encode()

answers = 0
for ep in endpoints:
    host, port = ep[len("tcp://"):].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    greeting = b"\xff" + b"\0" * 7 + b"\x01\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0")
    s.sendall(greeting + b"\0" * 32)
    data = b""
    while len(data) < 64:  # the server's greeting first (libzmq wants it so)
        got = s.recv(64 - len(data))
        if not got:
            break
        data += got
    ready = b"\x05READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", 6) + b"DEALER"
    out = frame(ready, command=True)
    out += message(b"req", b"\x82" + mp_str("op") + mp_str("ping") + mp_str("id") + b"\x01")
    for tag in tags:
        for seq in (1, 2, 3):
            for frm in (0, 1):
                hdr = b"\x94" + mp_str(tag) + bytes([seq, frm, 0])
                out += message(b"coll", hdr, pickle.dumps(Payload()))
    out += message(b"req", b"\x83" + mp_str("op") + mp_str("destroy") + mp_str("pipeline")
                   + mp_str("statistics") + mp_str("id") + b"\x02")
    out += message(b"coll", b"\xc1garbage")
    try:
        s.sendall(out)
    except OSError:
        pass  # refused: the server hung up
    # whatever comes back: the server's greeting, its READY, then message frames (replies)
    deadline = time.monotonic() + 1.5
    s.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            got = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not got:
            break
        data += got
    pos = 64 if len(data) >= 64 else len(data)
    while pos + 2 <= len(data):
        flags = data[pos]
        if flags & 2:
            size = struct.unpack(">Q", data[pos + 1:pos + 9])[0]; pos += 9
        else:
            size = data[pos + 1]; pos += 2
        if not flags & 4 and not flags & 1:
            answers += 1  # the last frame of a message
        pos += size
    s.close()
print(json.dumps({"answers": answers}))
"""


SYSTEM_PYTHON = "/usr/bin/python3"  # one that any user may run (the venv's is under /root)


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


MODES = [pytest.param(False, id="plain-auth"), pytest.param(True, id="curve")]


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    path = tmp_path_factory.mktemp("insitu_attacks") / "session"
    with pf.Session(path=path) as s:
        p, tmgr = start_pilot(s, nodes=1, cores_per_node=8, runtime="20m")
        yield s, p, tmgr


def _iteration(h, it: int, rng) -> None:
    blocks = [rng.random(100) for _ in range(6)]
    h.activate(it)
    for b, a in enumerate(blocks):
        h.stage(b, a)
    stats = h.execute(it)
    h.deactivate(it)
    full = np.concatenate(blocks)
    assert stats["count"] == 600 and stats["min"] == full.min() and stats["max"] == full.max()
    assert stats["histogram"] == np.histogram(full, 4, (0, 1))[0].tolist()


def _area_that_ran(pilot, encrypt: bool, seed: int):
    """A 2-server area (ZeroMQ collectives) whose statistics pipeline ran iteration 0 exactly:
    (area, handle, rng, the servers' uids)."""
    _, _, tmgr = pilot
    area = insitu.StagingArea(tmgr, servers=2, mpi=False, encrypt=encrypt)
    area.create_pipeline("statistics", {"bins": 4, "range": [0, 1]})
    h = area.pipeline("statistics")
    rng = np.random.default_rng(seed)
    _iteration(h, 0, rng)
    return area, h, rng, [m.uid for m in area.members]


def _ping(area, member) -> dict:
    ch = _Channel(area._keys)
    try:
        ch.send(member.endpoint, {"op": "ping"})
        ((ok, why, result),) = ch.collect().values()
    finally:
        ch.close()
    assert ok, why
    return result


@pytest.mark.parametrize("encrypt", MODES)
def test_another_user_cannot_drive_or_poison_the_servers(pilot, tmp_path, encrypt):
    """nobody's forged collective (a pickle that runs `id`), ping, destroy and garbage reach
    nothing: no command ran, no answer came, the servers are the same processes, the owner's
    next iterations are exact and the refused connections were counted."""
    area, h, rng, before = _area_that_ran(pilot, encrypt, seed=7)
    pwned = tmp_path / "pwned"
    tags = [f"statistics/{it}/{area.epoch}" for it in (1, 2)]
    out = subprocess.run([SYSTEM_PYTHON, "-c", ATTACK,
                          json.dumps([[m.endpoint for m in area.members], tags, str(pwned)])],
                         user=_nobody(), group=_nobody(), capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["answers"] == 0  # not even a refusal: nothing got in
    for it in (1, 2):  # the iterations the forged messages were aimed at
        _iteration(h, it, rng)
    assert not pwned.exists(), pwned.read_text()
    assert [m.uid for m in area.members] == before  # no server died or was replaced
    assert all(_ping(area, m)["refused"] >= 1 for m in area.members)
    area.close()


@pytest.mark.slow
@pytest.mark.parametrize("encrypt", MODES)
def test_bad_frames_from_a_client_are_dropped_and_counted(pilot, encrypt):
    """Even a client that holds the area's key cannot kill or stall a server: garbage,
    collective messages (only servers may send them), a module that exits on import and an
    activate of an epoch that never comes -- the server answers what it can, drops the rest,
    counts it, and serves on."""
    area, h, rng, before = _area_that_ran(pilot, encrypt, seed=3)
    m = area.members[0]
    ch = _Channel(area._keys)
    s = ch.sock(m.endpoint)
    hdr = msgspec.msgpack.encode([f"statistics/1/{area.epoch}", 1, 1, 0])
    s.send_multipart([b"coll", b"\xc1garbage"])
    s.send_multipart([b"coll", hdr, b"\x80\x04K\x01."])  # a well-formed pickle, not a peer's
    s.send_multipart([b"zzz", b"", b""])
    s.send_multipart([b"req"])
    s.send_multipart([b"req", b"\xc1"])  # answered: bad request
    assert s.poll(10_000)
    rid, ok, why = msgspec.msgpack.decode(s.recv_multipart()[2])
    assert not ok and why.startswith("bad request")
    # a module that exits on import: an error, not a server that exits 0 and is never replaced
    ch.send(m.endpoint, {"op": "create", "pipeline": "x", "module": "unittest.__main__",
                         "config": {}})
    ((ok, why, _),) = ch.collect().values()
    assert not ok and "SystemExit" in why, why
    # an epoch that never comes is parked, not waited for: the server answers a ping at once
    t0 = time.monotonic()
    ch.send(m.endpoint, {"op": "activate", "pipeline": "statistics", "iteration": 5,
                         "epoch": 10 ** 6, "members": [[x.uid, x.endpoint] for x in area.members]})
    ch2 = _Channel(area._keys)
    ch2.send(m.endpoint, {"op": "ping"})
    ((ok, _, stats),) = ch2.collect().values()
    pinged = time.monotonic() - t0
    ch2.close()
    ((ok2, why2, _),) = ch.collect().values()
    ch.close()
    assert ok and pinged < 4.0, pinged  # (the activate waits 5 s for its view)
    assert not ok2 and "never saw epoch 1000000" in why2, why2
    assert stats["dropped"] >= 4, stats
    _iteration(h, 1, rng)
    assert [x.uid for x in area.members] == before
    area.close()


def test_inbox_is_bounded_and_dropped_with_its_iteration(monkeypatch):
    """Unit test of the server's inbox (no sockets): collective messages nobody consumes are
    bounded in bytes, and go with the iteration they were for."""
    from pilotfish.insitu import _server

    srv = _server.Server.__new__(_server.Server)
    srv.secure = True
    srv.uid = "area.m0000"
    srv.stats = __import__("collections").Counter()
    srv.inbox, srv.inbox_bytes, srv.backlog = {}, 0, []
    monkeypatch.setattr(_server, "INBOX_MAX", 3 << 20)
    srv._sender = lambda frames: "peer area.m0001"

    def coll(tag, seq, nbytes):
        return [zmq.Frame(b"id"), zmq.Frame(b"coll"),
                zmq.Frame(msgspec.msgpack.encode([tag, seq, 1, 0])), zmq.Frame(b"x" * nbytes)]

    for seq in range(5):
        srv._take(coll("p/1/3", seq, 1 << 20))
    assert len(srv.inbox) == 3 and srv.inbox_bytes == 3 << 20 and srv.stats["dropped"] == 2
    srv._take(coll("p/1/3", 0, 10))  # a duplicate
    assert srv.stats["dropped"] == 3
    srv._take(coll("q/1/3", 0, 10))  # no room
    assert srv.stats["dropped"] == 4
    srv._drop_inbox("p", 1)  # its iteration ended: room again
    srv._take(coll("q/1/3", 0, 10))
    assert list(srv.inbox) == [("q/1/3", 0, 1)] and srv.inbox_bytes == 10
    srv._sender = lambda frames: "client"  # only servers send collective messages
    srv._take(coll("q/2/3", 0, 10))
    assert srv.stats["dropped"] == 5 and len(srv.inbox) == 1


@pytest.mark.slow
def test_a_reply_without_the_servers_proof_is_never_read(monkeypatch):
    """Someone who took over a dead server's port (plain-auth: nothing is encrypted) can
    accept a client's connection, but cannot answer as that server: a reply without the
    server's proof is dropped unread (its pickle would run a command), and what the client
    proved itself with works at that server only."""
    from pilotfish.insitu import _auth, _client

    monkeypatch.setattr(_client, "REPLY_TIMEOUT_S", 2.0)
    from zmq.auth.thread import ThreadAuthenticator

    class TakesAnyone(ThreadAuthenticator):
        def _authenticate_plain(self, domain, username, password):
            return True, b"OK"

    ctx = zmq.Context()
    gate = TakesAnyone(ctx)
    gate.start()
    squatter = ctx.socket(zmq.ROUTER)
    squatter.setsockopt(zmq.ZAP_DOMAIN, b"squat")
    squatter.setsockopt(zmq.PLAIN_SERVER, 1)
    port = squatter.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{port}"
    public, secret = zmq.curve_keypair()
    ch = _Channel(lambda ep: (_auth.PLAIN_AUTH, "area.m0003", None, (public, secret)))
    ch.send(endpoint, {"op": "ping"})
    assert squatter.poll(5000)
    ident, kind, hdr = squatter.recv_multipart()
    forged = b"cos\nsystem\n(S'echo pwned'\ntR."
    for proof in (b"", b"0" * 32, _auth.reply_proof(secret, "area.m0004")):
        squatter.send_multipart([ident, b"rep", proof, msgspec.msgpack.encode([0, True, None]),
                                 forged])
    with pytest.raises(insitu.InsituError, match="did not answer"):
        ch.collect()
    ch.close()
    # the password it saw is bound to the server it was for
    assert _auth.request_password(secret, "area.m0003") != \
        _auth.request_password(secret, "area.m0004")
    squatter.close(0)
    gate.stop()
    ctx.term()
