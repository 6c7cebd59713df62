"""A ROUTER socket's waiting messages, drained: the one loop the agent's ROUTER sockets (the
function pool, agent/functions.py; the service registry, agent/services.py; the node executors'
port, agent/node_link.py) read with."""

from __future__ import annotations

from typing import Iterator

import zmq

from .._door import joined


def router_messages(sock: zmq.Socket) -> Iterator[tuple[bytes, bytes]]:
    """(identity, payload) of each message waiting on a ROUTER socket, without blocking, until
    none is left. A message of fewer than two frames (not an identity and a payload: not
    ours) is dropped; a payload its sender split (_door.SplitSocket) comes joined."""
    while True:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        if len(frames) >= 2:
            yield frames[0], joined(frames, 1)
