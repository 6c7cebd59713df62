"""The door (_door.py) of the node port, over real CURVE connections on this host: a
connection stops being pending once it authenticated, and is never shut (issue 48 item 1).

Before: every connection counted pending for 5.5 s whatever it proved, and over the caps the
oldest pending connection was shut -- an executor that had authenticated and said hello too,
whose reconnection the node port then refused as a second connection of a connected node.
With caps of 4, 12 executors connecting one after another: 8 of them were shut. Now none,
and strangers holding half-open connections from the same address are what is shut.
"""

from __future__ import annotations

import socket
import time

import zmq

from pilotfish import _node_wire as W
from pilotfish._sockets import curve_dealer
from pilotfish.agent.clock import REAL
from pilotfish.agent.node_keys import TOKEN_BYTES, derive
from pilotfish.agent.node_link import NodeLink

NAMES = [f"n{i}" for i in range(12)]
GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\0" * 32


class Events:
    def __init__(self):
        self.rows = []

    def record(self, uid, name, detail=None, t=None):
        self.rows.append((name, detail))


def _pump(link, until, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        link.on_readable()
        if until():
            return True
        time.sleep(0.01)
    return False


def _executors(ctx, link, secret, names):
    """An executor per name, each connected and heard (its hello) before the next."""
    socks = {}
    for name in names:
        s = curve_dealer(ctx, link.key_file, link.address, keys=derive(secret, name))
        s.send(W.encode(W.NodeHello(name, 1, name, [], [], bytes([len(socks)]) * TOKEN_BYTES)))
        assert _pump(link, lambda n=name: link.nodes[n].up), name
        socks[name] = s
    return socks


def _all_answer(link, socks) -> bool:
    """Every executor still gets what the agent sends on its node's route."""
    for name in socks:
        link.send_to(name, W.Beat(1.0))
    for name, s in socks.items():
        if not s.poll(2000):
            return False
        assert isinstance(W.decode(s.recv()), W.Beat), name
    return True


def test_authenticated_executors_are_never_pending_nor_shut(tmp_path):
    ctx = zmq.Context()
    link = NodeLink(ctx, str(tmp_path), REAL, Events(), "pilot.0000", [], time.time() + 600)
    try:
        link.door.scale(4, 4)  # caps far under the executors connecting
        secret = link.expect(NAMES)
        socks = _executors(ctx, link, secret, NAMES)
        time.sleep(0.3)  # (the door's thread looks again)
        _pump(link, lambda: False, 0.3)
        assert link.door.counts["evicted"] == 0, link.door.counts
        assert link.second == 0, link.keys.second  # (none shut and back as a second)
        assert _all_answer(link, socks)
        assert link.door.counts["authenticated"] == len(NAMES), link.door.counts
        assert not link.door.pending
    finally:
        link.close()
        ctx.destroy(0)


def test_strangers_are_shut_not_executors(tmp_path):
    """Half-open connections from the executors' own address, over the caps, before and while
    they connect: the strangers are shut, every executor gets in and stays."""
    ctx = zmq.Context()
    link = NodeLink(ctx, str(tmp_path), REAL, Events(), "pilot.0000", [], time.time() + 600)
    held = []
    try:
        link.door.scale(4, 4)
        secret = link.expect(NAMES)
        host, port = link.address[6:].rsplit(":", 1)
        for _ in range(16):
            s = socket.create_connection((host, int(port)))
            s.sendall(GREETING)
            held.append(s)
        half = len(NAMES) // 2
        socks = _executors(ctx, link, secret, NAMES[:half])
        for _ in range(16):
            s = socket.create_connection((host, int(port)))
            s.sendall(GREETING)
            held.append(s)
        socks.update(_executors(ctx, link, secret, NAMES[half:]))
        _pump(link, lambda: False, 0.3)
        assert link.door.counts["evicted"] >= 16, link.door.counts
        assert link.second == 0, link.keys.second
        assert _all_answer(link, socks)
    finally:
        for s in held:
            s.close()
        link.close()
        ctx.destroy(0)
