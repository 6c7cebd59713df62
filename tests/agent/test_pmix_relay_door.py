"""The PMIx relay's door (agent/pmix_relay.py): what a stranger on the pilot's network costs
the agent's PMIx server before it has shown the pilot's token. Before: a connection that
sent no newline was buffered up to MAX_LINE (48 MiB) before anything was checked, and every
connection was kept however many came -- 20 strangers could hold ~1 GB of the agent's host.
No sockets beyond loopback; no PMIx library needed."""

from __future__ import annotations

import socket
import time

from pilotfish.agent.pmix_relay import HELLO_MAX, MAX_PENDING, Relay


def _relay() -> Relay:
    return Relay("127.0.0.1", b"\x01" * 16, lambda *a: None)


def _pump(relay: Relay, seconds: float = 0.5) -> None:
    """The owner's loop, briefly: accept what waits, read what is readable."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        relay.accept()
        for c in list(relay.conns):
            relay.on_readable(c)
        time.sleep(0.01)


def test_a_stranger_is_closed_once_past_a_hello_worth_of_bytes():
    relay = _relay()
    host, port = relay.address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setblocking(False)
    sent = 0
    try:
        for _ in range(200):  # up to 2 MiB with no newline
            try:
                sent += s.send(b"x" * (1 << 14))
            except BlockingIOError:
                pass
            _pump(relay, 0.01)
            if not relay.conns and sent > HELLO_MAX:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent > HELLO_MAX and not relay.conns, (sent, [len(c.buf) for c in relay.conns])
    s.close()


def test_strangers_that_say_nothing_are_capped():
    relay = _relay()
    host, port = relay.address.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port))) for _ in range(MAX_PENDING + 40)]
    _pump(relay)
    assert len(relay.conns) <= MAX_PENDING, len(relay.conns)
    # a node server with the token still gets in, and is never the one closed
    good = socket.create_connection((host, int(port)))
    good.sendall(b'{"token": "' + (b"01" * 16) + b'", "node": "n2"}\n')
    _pump(relay)
    more = [socket.create_connection((host, int(port))) for _ in range(MAX_PENDING)]
    _pump(relay)
    assert "n2" in relay.by_node and relay.by_node["n2"] in relay.conns
    assert sum(c.node is None for c in relay.conns) <= MAX_PENDING
    for s in socks + more + [good]:
        s.close()
