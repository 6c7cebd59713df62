"""The session's one ZeroMQ endpoint and the IO thread that owns it.

Agents connect a DEALER (routing id = pilot uid) to the session's ROUTER. User threads never
touch the socket: they queue frames and wake the IO thread through an inproc pair. Frames for
an agent that has not said hello yet wait in an outbox (a ROUTER would drop them).
"""

from __future__ import annotations

import collections
import logging
import os
import tempfile
import threading
import time
from typing import Callable

import zmq

from .. import _wire

log = logging.getLogger("pilotfish.client")

# Unix socket paths are limited to 107 bytes (sun_path); longer session paths use /tmp.
_MAX_IPC_PATH = 100


class Bridge:
    """Moves frames between user threads and agents; dispatches what agents send."""

    def __init__(self, session_path: str, session_uid: str, bind: str = "ipc"):
        self._ctx = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._router.setsockopt(zmq.SNDHWM, 0)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        self._ipc_path: str | None = None
        if bind == "ipc":
            path = os.path.join(session_path, "client.sock")
            if len(path) > _MAX_IPC_PATH:
                path = os.path.join(tempfile.gettempdir(), f"pilotfish-{session_uid}.sock")
            self._ipc_path = path
            self.address = f"ipc://{path}"
            self._router.bind(self.address)
        elif bind == "tcp":
            port = self._router.bind_to_random_port("tcp://*")
            self.address = f"tcp://{_wire_host()}:{port}"
        else:
            raise ValueError(f"bind must be 'ipc' or 'tcp', not {bind!r}")

        self._wake_addr = f"inproc://wake-{id(self)}"
        self._wake_in = self._ctx.socket(zmq.PAIR)
        self._wake_in.bind(self._wake_addr)
        self._wake_out = self._ctx.socket(zmq.PAIR)
        self._wake_out.connect(self._wake_addr)
        self._wake_lock = threading.Lock()
        self._woken = False

        self._queue: collections.deque = collections.deque()  # (pilot_uid, payload, on_sent)
        self._outbox: dict[str, list] = collections.defaultdict(list)
        self._connected: set[str] = set()
        self._handlers: dict[str, Callable[[object], None]] = {}
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="pilotfish-bridge", daemon=True)
        self._thread.start()

    # -- user side --------------------------------------------------------------------------
    def register(self, pilot_uid: str, handler: Callable[[object], None]) -> None:
        """handler(msg) runs in the IO thread for every message from that pilot's agent."""
        self._handlers[pilot_uid] = handler

    def send(self, pilot_uid: str, payload: bytes, on_sent: Callable[[float], None] | None = None) -> None:
        self._queue.append((pilot_uid, payload, on_sent))
        self._wake()

    def forget(self, pilot_uid: str) -> list:
        """Drop a pilot (it ended): returns the frames that never reached it."""
        self._connected.discard(pilot_uid)
        return self._outbox.pop(pilot_uid, [])

    def close(self) -> None:
        self._stop = True
        self._wake()
        self._thread.join(5)
        for s in (self._router, self._wake_in, self._wake_out):
            s.close(0)
        self._ctx.term()
        if self._ipc_path:
            try:
                os.unlink(self._ipc_path)
            except OSError:
                pass

    def _wake(self) -> None:
        with self._wake_lock:
            if not self._woken:
                self._woken = True
                self._wake_out.send(b"")

    # -- IO thread --------------------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._wake_in, zmq.POLLIN)
        router, wake_in = self._router, self._wake_in
        while not self._stop:
            ready = dict(poller.poll())
            if wake_in in ready:
                with self._wake_lock:
                    self._woken = False
                    wake_in.recv()
                self._drain_queue()
            if router in ready:
                while True:
                    try:
                        ident, payload = router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._dispatch(ident.decode(), payload)
        self._drain_queue()

    def _drain_queue(self) -> None:
        q = self._queue
        while q:
            pilot_uid, payload, on_sent = q.popleft()
            if pilot_uid in self._connected:
                self._send_now(pilot_uid, payload, on_sent)
            else:
                self._outbox[pilot_uid].append((payload, on_sent))

    def _send_now(self, pilot_uid: str, payload: bytes, on_sent) -> None:
        t = time.time()  # before the send: the agent may act on the frame at once
        try:
            self._router.send_multipart([pilot_uid.encode(), payload])
        except zmq.ZMQError as e:  # the agent went away: keep the frame for the pilot manager
            log.warning("cannot reach %s: %s", pilot_uid, e)
            self._connected.discard(pilot_uid)
            self._outbox[pilot_uid].append((payload, on_sent))
            return
        if on_sent is not None:
            try:
                on_sent(t)
            except Exception:  # a callback must never kill the IO thread
                log.exception("on_sent callback failed")

    def _dispatch(self, pilot_uid: str, payload: bytes) -> None:
        try:
            msg = _wire.decode_to_client(payload)
        except Exception:
            log.exception("undecodable frame from %s", pilot_uid)
            return
        if isinstance(msg, _wire.Hello):
            self._connected.add(pilot_uid)
        handler = self._handlers.get(pilot_uid)
        if handler is not None:
            try:
                handler(msg)
            except Exception:
                log.exception("handler for %s failed", pilot_uid)
        if isinstance(msg, _wire.Hello):
            for frame, on_sent in self._outbox.pop(pilot_uid, []):
                self._send_now(pilot_uid, frame, on_sent)


def _wire_host() -> str:
    import socket

    return socket.getfqdn()
