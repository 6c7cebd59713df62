"""An intruder among a pilot's tasks (tests/batch/test_node_identity.py): what a task of the
pilot's owner can do with its view of the pilot's files against the agent's node port.

It reads the node port's address and server key from the pilot sandbox (nodes.json, nodes.key:
0600, but the task is the owner), connects to the port as node NAME (its routing id), stays
silent for HOLD seconds, sends one heartbeat, and listens LISTEN seconds more. It writes what it
got to OUT (json, rewritten after every change): its handshakes (succeeded / failed), and the
kind of every frame the agent sent it.

    python node_intruder.py OUT NAME HOLD LISTEN
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time

import zmq

from pilotfish import _node_wire as W


def main(out: str, name: str, hold: float, listen: float) -> int:
    sandbox = os.environ["PILOTFISH_SANDBOX"]
    with open(os.path.join(sandbox, "nodes.json")) as f:
        cfg = json.load(f)
    with open(cfg["key_file"], "rb") as f:
        server = f.read().strip()
    seen = {
        "node": name,
        "host": os.uname().nodename,
        "succeeded": 0,
        "failed": 0,
        "frames": [],
        "beat_sent": False,
    }

    def said() -> None:
        tmp = f"{out}.tmp"
        with open(tmp, "w") as f:
            json.dump(seen, f)
        os.replace(tmp, out)

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    public, secret = zmq.curve_keypair()
    sock.setsockopt(zmq.CURVE_SERVERKEY, server)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.ROUTING_ID, name.encode())
    mon = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    )
    sock.connect(cfg["address"])
    said()
    t0 = time.monotonic()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(mon, zmq.POLLIN)
    while time.monotonic() - t0 < hold + listen:
        if seen["beat_sent"] is False and time.monotonic() - t0 >= hold:
            try:  # (queued while a handshake is on; no connection at all: not sent)
                sock.send(W.encode(W.Beat(time.time())), zmq.NOBLOCK)
                seen["beat_sent"] = True
            except zmq.Again:
                seen["beat_sent"] = "no connection to send it on"
            said()
        ready = dict(poller.poll(100))
        if mon in ready:
            while mon.poll(0):
                event = struct.unpack("=hi", mon.recv_multipart()[0][:6])[0]
                seen["succeeded" if event == zmq.EVENT_HANDSHAKE_SUCCEEDED else "failed"] += 1
            said()
        if sock in ready:
            while sock.poll(0):
                frame = sock.recv()
                try:
                    kind = type(W.decode(frame)).__name__
                except Exception:  # noqa: BLE001 -- whatever it is, it reached us
                    kind = f"undecodable ({len(frame)} bytes)"
                seen["frames"].append(kind)
            said()
    said()
    sock.disable_monitor()
    mon.close(0)
    sock.close(0)
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))
