"""CURVE sockets between the agent and the processes it starts (function workers, service
members and their clients): the agent's ROUTER holds a fresh key pair whose public key goes
into a 0600 file whose path its tasks get -- never a command line, which other users can
read; an abstract ipc socket has no file permissions and a TCP port is open to the cluster,
so only a process that could read that file can speak. (The node port asks more: each node
executor's own key, which no file holds -- agent/node_keys.py.)"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from ._door import MAX_FRAME, harden, split_socket_class
from ._util import hostname, write_private

if TYPE_CHECKING:
    from ._wire import Curve


def host_address() -> str:
    """The address this host's name resolves to (what processes on other nodes reach)."""
    try:
        return socket.gethostbyname(hostname())
    except OSError:
        return "127.0.0.1"


def curve_router(ctx, key_file: str, name: str, max_frame: int = MAX_FRAME, handover: bool = True):
    """A CURVE-server ROUTER bound to an abstract ipc socket (this host), its public key
    written to key_file: (socket, address). bind_tcp() adds a TCP endpoint. Hardened before
    it binds (_door.harden: frames of at most max_frame, a handshake timeout); its owner puts
    a _door.Door on it. handover: a peer that connects with a routing id in use takes it over
    (a reconnecting peer keeps its identity); off where the routing id is not who a peer is
    (the node port: agent/node_keys.py), so no connection is ever handed another's route."""
    import zmq

    sock = ctx.socket(zmq.ROUTER)
    harden(sock, max_frame)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_HANDOVER, int(handover))
    public, secret = zmq.curve_keypair()
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    write_private(key_file, public)
    sock.bind(f"ipc://@pilotfish-{name}-{os.getpid()}-{id(sock):x}")
    return sock, sock.getsockopt(zmq.LAST_ENDPOINT).decode()


def bind_tcp(sock) -> str:
    """Bind sock to TCP on this host's address too; the new address (ZMQError, OSError)."""
    import zmq

    sock.bind(f"tcp://{host_address()}:*")
    return sock.getsockopt(zmq.LAST_ENDPOINT).decode()


def curve_dealer(
    ctx,
    key_file: str,
    address: str,
    identity: bytes | None = None,
    linger: int = 1000,
    keys: tuple[bytes, bytes] | None = None,
):
    """A DEALER that proves itself with the server key in key_file, connected to address;
    its own key pair: keys (public, secret; z85) -- a node executor's (agent/node_keys.py) --
    or a fresh one."""
    import zmq

    sock = ctx.socket(zmq.DEALER, socket_class=split_socket_class())  # frames the door takes
    sock.setsockopt(zmq.LINGER, linger)
    with open(key_file, "rb") as f:
        sock.setsockopt(zmq.CURVE_SERVERKEY, f.read().strip())
    public, secret = keys if keys is not None else zmq.curve_keypair()
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    if identity is not None:
        sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.connect(address)
    return sock


def client_link(ctx, pilot_uid: str, address: str, curve: Curve | None):
    """The agent's DEALER to its session's client (routing id = the pilot's uid); with curve
    (agent.json's server, public and secret keys): the client proves itself with the session's
    key, the agent with the pilot's. Unbounded queues; lingers 5 s for the last bye."""
    import zmq

    sock = ctx.socket(zmq.DEALER, socket_class=split_socket_class())  # frames the door takes
    sock.setsockopt(zmq.ROUTING_ID, pilot_uid.encode())
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 5000)
    if curve:
        sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server.encode())
        sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public.encode())
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret.encode())
    sock.connect(address)
    return sock
