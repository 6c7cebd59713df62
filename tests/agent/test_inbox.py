"""agent/inbox.py: the one drain loop of the agent's ROUTER sockets (function pool, service
registry) -- every waiting message, without blocking, identity and joined payload; a message
that is not an identity and a payload is dropped."""

from __future__ import annotations

import time

import zmq

from pilotfish._door import send_split
from pilotfish.agent.inbox import router_messages


def test_router_messages_drains_what_waits_and_joins_split_payloads():
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    dealer = ctx.socket(zmq.DEALER)
    try:
        router.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.IDENTITY, b"peer")
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        assert list(router_messages(router)) == []  # nothing waits: returns at once
        big = bytes(range(256)) * 5000  # 1.28 MB: split by send_split
        dealer.send(b"one")
        send_split(dealer, [], big)
        dealer.send(b"three")
        got: list = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            router.poll(100)
            got += list(router_messages(router))
        assert got == [(b"peer", b"one"), (b"peer", big), (b"peer", b"three")]
        assert list(router_messages(router)) == []
    finally:
        dealer.close()
        router.close()


def test_a_message_without_a_payload_is_dropped():
    class Sock:
        def __init__(self, msgs):
            self.msgs = list(msgs)

        def recv_multipart(self, flags):
            assert flags == zmq.NOBLOCK
            if not self.msgs:
                raise zmq.Again()
            return self.msgs.pop(0)

    sock = Sock([[b"id"], [b"id", b"a"], [b"id", b"b", b"c"]])
    assert list(router_messages(sock)) == [(b"id", b"a"), (b"id", b"bc")]  # type: ignore[arg-type]  # a stand-in socket
