"""The agent's node link (agent/nodes.py) as one piece, over a real CURVE socket on this host:
what a node executor may send, and what it may not. (End to end, on the cluster of hosts:
tests/batch/test_node_executors.py.)"""

from __future__ import annotations

import time

import zmq

from pilotfish import _events as E
from pilotfish import _node_wire as W
from pilotfish._sockets import curve_dealer
from pilotfish.agent.clock import REAL
from pilotfish.agent.nodes import Node, NodeLink


class Events:
    def __init__(self):
        self.rows = []

    def record(self, uid, name, detail=None, t=None):
        self.rows.append((name, detail))

    def named(self, name):
        return [d for n, d in self.rows if n == name]


def _link(tmp_path, **kw):
    ctx = zmq.Context()
    ev = Events()
    link = NodeLink(ctx, str(tmp_path), REAL, ev, "pilot.0000", [], time.time() + 600, **kw)
    return ctx, ev, link


def _pump(link, until, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        link.on_readable()
        if until():
            return True
        time.sleep(0.01)
    return False


def test_bad_frames_are_dropped_and_the_node_goes_on(tmp_path):
    ctx, ev, link = _link(tmp_path)
    try:
        link.nodes["n2"] = Node("n2", time.monotonic() + 60, None)
        sock = curve_dealer(ctx, link.key_file, link.address, identity=b"n2")
        sock.send(W.encode(W.NodeHello("n2", 123, "n2")))
        assert _pump(link, lambda: link.nodes["n2"].up)
        assert ev.named(E.NODE_UP) == ["n2 n2 123"]
        # a spawn the agent sent, then garbage, then the exit of that spawn and of a key
        # the node never had
        assert link.spawn("n2", [(7, ["/bin/true"], None, None, None, None)]) is None
        sock.send(b"\x93garbage")
        sock.send(W.encode(W.Exits([(7, 4242, 0, 0, 1.0, 0.0, 0.0, 0, "out", None),
                                    (99, 4243, 0, 0, 1.0, 0.0, 0.0, 0, None, None)])))
        assert _pump(link, lambda: link.exits)
        assert len(ev.named(E.BAD_FRAME)) == 1 and "node n2" in ev.named(E.BAD_FRAME)[0]
        _, exits = link.take()
        assert [e[0] for e in exits] == [7]  # not 99: no task of this agent's
        assert link.outputs == {7: ("out", None)}
        assert link.nodes["n2"].lost is None and link.nodes["n2"].up
        # a frame from a node that is not one of this pilot's
        other = curve_dealer(ctx, link.key_file, link.address, identity=b"n9")
        other.send(W.encode(W.Beat(1.0)))
        assert _pump(link, lambda: len(ev.named(E.BAD_FRAME)) == 2)
        assert "unknown node" in ev.named(E.BAD_FRAME)[1]
        sock.close(0)
        other.close(0)
    finally:
        link.close()
        ctx.term()


def test_wrong_key_is_refused_and_counted(tmp_path):
    ctx, ev, link = _link(tmp_path)
    try:
        link.nodes["n2"] = Node("n2", time.monotonic() + 60, None)
        forged = tmp_path / "forged.key"
        forged.write_bytes(zmq.curve_keypair()[0])
        sock = curve_dealer(ctx, str(forged), link.address, identity=b"n2")
        sock.send(W.encode(W.NodeHello("n2", 1, "n2")))
        assert _pump(link, lambda: link.refused > 0)
        assert not link.nodes["n2"].up and ev.named(E.NODE_UP) == []
        sock.close(0)
    finally:
        link.close()
        ctx.term()


def test_silent_node_is_lost_and_its_processes_end_with_why(tmp_path):
    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.3)
    try:
        link.nodes["n2"] = Node("n2", time.monotonic() + 60, None)
        sock = curve_dealer(ctx, link.key_file, link.address, identity=b"n2")
        sock.send(W.encode(W.NodeHello("n2", 1, "n2")))
        assert _pump(link, lambda: link.nodes["n2"].up)
        link.spawn("n2", [(1, ["x"], None, None, None, None), (2, ["y"], None, None, None, None)])
        time.sleep(0.5)
        link.tick()
        assert link.nodes["n2"].lost and "no heartbeat" in link.nodes["n2"].lost
        _, exits = link.take()
        assert sorted(e[0] for e in exits) == [1, 2]
        assert all(e[8].startswith("node n2 lost: no heartbeat") for e in exits)
        assert [d.split()[0] for d in ev.named(E.NODE_LOST)] == ["n2"]
        assert link.spawn("n2", [(3, ["z"], None, None, None, None)]).startswith("node n2 lost")
        sock.close(0)
    finally:
        link.close()
        ctx.term()
