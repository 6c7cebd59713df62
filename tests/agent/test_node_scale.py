"""The node link at scale (agent/node_link.py, issue 48 item 3): heartbeats whose per-second total
is bounded whatever the node count, and a tick that looks at the nodes due, never at every
node (before: tick() scanned every node every 0.1 s, and beat each every second)."""

from __future__ import annotations

import json
import time

import zmq

from pilotfish import _node_wire as W
from pilotfish._sockets import curve_dealer
from pilotfish.agent.clock import REAL
from pilotfish.agent.node_keys import TOKEN_BYTES, derive
from pilotfish.agent.node_link import BEATS_PER_S, NodeLink, beat_period


class Events:
    def __init__(self):
        self.rows = []

    def record(self, uid, name, detail=None, t=None):
        self.rows.append((name, detail))


class Part:  # (what NodeLink reads of a partition here: its node names)
    def __init__(self, names):
        self.names = names


def test_beats_adapt_to_the_node_count(tmp_path):
    assert beat_period(100, 1.0, 10.0) == (1.0, 10.0)
    assert beat_period(2048, 1.0, 10.0) == (2048 / BEATS_PER_S, 10.0)
    beat, lost = beat_period(10000, 1.0, 10.0)
    assert 10000 / beat <= BEATS_PER_S and lost >= 3 * beat
    for n in (10, 10000):
        d = tmp_path / str(n)
        d.mkdir()
        ctx = zmq.Context()
        names = [f"node{i:05d}" for i in range(n)]
        link = NodeLink(ctx, str(d), REAL, Events(), "p", [Part(names)], time.time() + 600)
        try:
            cfg = json.loads((d / "nodes.json").read_text())
            beat, lost = beat_period(n, 1.0, 10.0)
            assert cfg["beat_s"] == beat == link.beat_s  # (the executors beat as often)
            assert link.lost_after_s == lost and cfg["fence_after_s"] == 3 * lost
            assert link.door.total >= n and link.door.per_peer >= n  # (_door.py)
        finally:
            link.close()
            ctx.destroy(0)


def test_a_tick_looks_at_the_nodes_due_only(tmp_path):
    ctx = zmq.Context()
    link = NodeLink(ctx, str(tmp_path), REAL, Events(), "p", [], time.time() + 600, beat_s=0.3)
    looked = []
    real_look = link._look
    link._look = lambda node, now, tail: (looked.append(node.name), real_look(node, now, tail))
    try:
        names = [f"node{i:05d}" for i in range(3000)]
        secret = link.expect(names, None, 600)
        socks = []
        for name in names[:2]:
            s = curve_dealer(ctx, link.key_file, link.address, keys=derive(secret, name))
            s.send(W.encode(W.NodeHello(name, 1, name, [], [], b"t" * TOKEN_BYTES)))
            socks.append(s)
        end = time.monotonic() + 10
        while not all(link.nodes[n].up for n in names[:2]) and time.monotonic() < end:
            link.on_readable()
            time.sleep(0.01)
        for _ in range(20):
            link.tick()
        assert looked == []  # nothing is due: no node looked at (3,000 waiting, 2 up)
        time.sleep(0.35)
        link.tick()
        assert sorted(looked) == names[:2]  # their beat came: those two, and no other
        for s in socks:
            assert s.poll(2000) and isinstance(W.decode(s.recv()), W.Beat)
        assert len(link.waiting(None)) == 2998
        for s in socks:
            s.close(0)
    finally:
        link.close()
        ctx.destroy(0)
