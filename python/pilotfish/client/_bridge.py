"""The session's one ZeroMQ endpoint and the IO thread that owns it.

Agents connect a DEALER (routing id = pilot uid) to the session's ROUTER. User threads never
touch the socket: they queue frames and wake the IO thread through an inproc pair. Frames for
an agent that has not said hello yet wait in an outbox (a ROUTER would drop them). Each
message an agent sends is decoded and handed, with its pilot's uid, to one callable: the
session's router (_router.Router.dispatch), which knows who takes it.

Locked (secure=True, the default): the ROUTER is a CURVE server; each pilot's agent holds its
own key pair (written 0600 into its agent.json, in a 0700 directory). The IO thread answers
ZAP requests itself: a connection is let in only with a pilot's public key, and is labelled
with that pilot's uid (ZMQ's User-Id); a frame whose routing id is not the uid its key proves
is dropped, so no one can speak for a pilot without its secret. Before any of that, the
socket is hardened and has a door (_door.py): frames of at most MAX_FRAME (agents split larger
messages), a handshake timeout, unproven connections capped per peer and in all. Refusals --
unknown keys, failed handshakes (a peer that speaks no CURVE, or not with the session's key),
connections over the caps -- are logged and recorded as session events, one summary per
interval at most. TCP binds one interface (the host's address by default), never every
interface.
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
from .._door import SUMMARY_S, Door, harden, joined

log = logging.getLogger("pilotfish.client")

# Unix socket paths are limited to 107 bytes (sun_path); longer session paths use /tmp.
_MAX_IPC_PATH = 100
_BIND_TCP = object()  # a queue item: bind TCP too (the IO thread owns the socket)


class Bridge:
    """Moves frames between user threads and agents; hands what agents send to `deliver`."""

    def __init__(
        self,
        session_path: str,
        session_uid: str,
        bind: str = "ipc",
        keys: tuple[bytes, bytes] | None = None,
        interface: str | None = None,
        address: str | None = None,
        on_refused: Callable[[str], None] | None = None,
        heartbeat_s: float = _wire.HEARTBEAT_S,
        pilot_keys: dict[str, bytes] | None = None,
        deliver: Callable[[str, object], None] | None = None,
        tcp_address: str | None = None,
    ):
        """keys: the session's CURVE (public, secret) key pair; None: no encryption (for
        measuring its cost). address: bind exactly this one (a resumed session's).
        pilot_keys: {pilot uid: public key} let in from the start -- a resumed session's
        live agents reconnect the moment it binds, before their pilots are re-attached.
        deliver(pilot uid, message) runs in the IO thread for every message from an agent
        (but heartbeats once it said hello: they only keep last_seen). tcp_address: a
        resumed session's TCP endpoint too (agents on other hosts reconnect there)."""
        self._ctx = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._router.setsockopt(zmq.SNDHWM, 0)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        harden(self._router)  # before it binds: what a stranger may send (_door.py)
        self.public_key = keys[0] if keys else None
        self._pilot_keys: dict[bytes, str] = {}  # agent public key -> pilot uid
        for uid, key in (pilot_keys or {}).items():
            self._allow(uid, key)
        self._on_refused = on_refused
        self._zap = None
        if keys is not None:
            # the ZAP handler must be bound before the server socket is
            self._zap = self._ctx.socket(zmq.REP)
            self._zap.bind("inproc://zeromq.zap.01")
            self._router.setsockopt(zmq.ZAP_DOMAIN, b"pilotfish")
            self._router.setsockopt(zmq.CURVE_SERVER, 1)
            self._router.setsockopt(zmq.CURVE_SECRETKEY, keys[1])
        # connections before their handshake: capped, their refusals counted (_door.py); told
        # to on_refused as one summary per interval with the keys ZAP refused (_refusals)
        self._door = Door(self._router, "client control plane")
        self._zap_refused = 0
        self._zap_last = ""
        self._next_summary = 0.0
        self._ipc_path: str | None = None
        if address is not None:
            self._router.bind(address)
            self.address = address
            if address.startswith("ipc://"):
                self._ipc_path = address[len("ipc://") :]
        elif bind == "ipc":
            path = os.path.join(session_path, "client.sock")
            if len(path) > _MAX_IPC_PATH:  # a private directory, not a socket in /tmp itself
                path = os.path.join(tempfile.mkdtemp(prefix="pilotfish-"), "client.sock")
            self._ipc_path = path
            self.address = f"ipc://{path}"
            self._router.bind(self.address)
            os.chmod(path, 0o600)
        elif bind == "tcp":
            host = bind_host(interface)
            port = self._router.bind_to_random_port(f"tcp://{host}")
            self.address = f"tcp://{host}:{port}"
        else:
            raise ValueError(f"bind must be 'ipc' or 'tcp', not {bind!r}")
        # agents on other hosts (a batch pilot) cannot reach an ipc socket: the same ROUTER
        # binds TCP as well, on one interface, when the first such pilot is launched
        self.tcp_address: str | None = None
        self._interface = interface
        if tcp_address is not None and not self.address.startswith("tcp://"):
            self._router.bind(tcp_address)
            self.tcp_address = tcp_address
        elif self.address.startswith("tcp://"):
            self.tcp_address = self.address
        self.heartbeat_s = heartbeat_s
        self.last_seen: dict[str, float] = {}  # pilot uid -> monotonic time of its last frame

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
        self._hello_seen: set[str] = set()
        self._deliver = deliver
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="pilotfish-bridge", daemon=True)
        self._thread.start()

    # -- user side --------------------------------------------------------------------------
    def allow(self, pilot_uid: str, public_key: bytes | None) -> None:
        """Let the pilot's agent in: public_key is its CURVE key, the only one let in as this
        pilot (None: an unencrypted session lets anyone in)."""
        if public_key is not None:
            self._allow(pilot_uid, public_key)

    def _allow(self, pilot_uid: str, public_key: bytes) -> None:
        from zmq.utils import z85  # ZAP hands over the raw 32 bytes, not the Z85 text

        self._pilot_keys[z85.decode(public_key) if len(public_key) == 40 else public_key] = (
            pilot_uid
        )

    def send(
        self, pilot_uid: str, payload: bytes, on_sent: Callable[[float], None] | None = None
    ) -> None:
        self._queue.append((pilot_uid, payload, on_sent))
        self._wake()

    def reachable_address(self, timeout: float = 10.0) -> str:
        """An address that agents on other hosts can reach: TCP on one interface (bound now,
        by the IO thread, if the session listened on ipc only)."""
        if self.tcp_address is None:
            done = threading.Event()
            box: list = []
            self._queue.append((_BIND_TCP, box, done))
            self._wake()
            if not done.wait(timeout):
                raise OSError("the session's IO thread did not bind TCP in time")
            if isinstance(box[0], BaseException):
                raise box[0]
            self.tcp_address = box[0]
        return self.tcp_address

    def mark_connected(self, pilot_uid: str) -> None:
        """IO thread only: the agent is known to be connected (it sent a frame) before its
        hello -- a re-attaching agent, to which the resync request must go at once."""
        self._connected.add(pilot_uid)

    def forget(self, pilot_uid: str) -> list:
        """Drop a pilot (it ended): returns the frames that never reached it."""
        self._connected.discard(pilot_uid)
        self._hello_seen.discard(pilot_uid)
        return self._outbox.pop(pilot_uid, [])

    def close(self) -> None:
        self._stop = True
        self._wake()
        self._thread.join(5)
        self._door.close()
        for s in (self._router, self._wake_in, self._wake_out, self._zap):
            if s is not None:
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
        zap = self._zap
        if zap is not None:
            poller.register(zap, zmq.POLLIN)
        router, wake_in = self._router, self._wake_in
        secure = zap is not None
        beat = _wire.encode(_wire.Heartbeat(0.0))
        next_beat = time.monotonic() + self.heartbeat_s
        while not self._stop:
            ready = dict(poller.poll(max(0, int((next_beat - time.monotonic()) * 1000)) + 1))
            if wake_in in ready:
                with self._wake_lock:
                    self._woken = False
                    wake_in.recv()
                self._drain_queue()
            if zap is not None and zap in ready:
                self._answer_zap()
            self._refusals()
            if router in ready:
                while True:
                    try:
                        frames = router.recv_multipart(zmq.NOBLOCK, copy=not secure)
                    except zmq.Again:
                        break
                    if len(frames) < 2:
                        continue
                    if secure:
                        ident = frames[0].bytes  # type: ignore[union-attr]  # copy=False: Frames
                        claimed = ident.decode(errors="replace")
                        proven = frames[1].get("User-Id")  # type: ignore[union-attr]  # (a Frame)
                        if proven != claimed:  # speaks as a pilot its key does not prove
                            self._refuse(
                                f"frame from {proven!r} claiming to be {claimed!r} dropped"
                            )
                            continue
                    else:
                        ident = frames[0]
                    payload = joined(frames, 1)  # (split by the agent: _door.py)
                    self._dispatch(ident.decode(errors="replace"), payload)
            now = time.monotonic()
            if now >= next_beat:  # the agents' proof that their client is alive
                next_beat = now + self.heartbeat_s
                for uid in list(self._connected):
                    try:
                        router.send_multipart([uid.encode(), beat])
                    except zmq.ZMQError as e:  # gone (a pilot that just said bye): nothing
                        log.debug("heartbeat to %s dropped: %s", uid, e)  # to keep or warn of
                        self._connected.discard(uid)
        self._drain_queue()
        self._refusals(final=True)  # what the last summary did not tell yet

    def _answer_zap(self) -> None:
        """ZAP (RFC 27): let in only the public keys of this session's pilots."""
        zap = self._zap
        assert zap is not None  # (called when it is readable)
        try:
            msg = zap.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        version, request_id, _domain, address, _identity, mechanism = msg[:6]
        user, status, text = b"", b"400", b"unknown key"
        if mechanism == b"CURVE" and len(msg) > 6:
            uid = self._pilot_keys.get(msg[6])
            if uid is not None:
                user, status, text = uid.encode(), b"200", b"OK"
        if status != b"200":  # counted; told in the next summary (_refusals)
            self._zap_refused += 1
            self._zap_last = (
                f"from {address.decode(errors='replace') or 'a local socket'} "
                f"({mechanism.decode(errors='replace')}: {text.decode()})"
            )
        zap.send_multipart([version, request_id, status, text, user, b""])

    def _refusals(self, final: bool = False) -> None:
        """What was refused -- keys ZAP did not know, handshakes that failed before it was
        asked (not CURVE, not the session's key), connections over the door's caps -- told
        to on_refused as one summary, at most once per SUMMARY_S (the first at once)."""
        now = time.monotonic()
        if now < self._next_summary and not final:
            return
        said = self._door.take_summary(now, force=True)
        if self._zap_refused:
            said = (
                f"client control plane: {self._zap_refused} connections refused with an "
                f"unknown key (the last {self._zap_last})" + (f"; {said}" if said else "")
            )
            self._zap_refused = 0
        if said:
            self._next_summary = now + SUMMARY_S
            self._refuse(said)

    def _refuse(self, what: str) -> None:
        log.warning("%s", what)
        if self._on_refused is not None:
            try:
                self._on_refused(what)
            except Exception:
                log.exception("on_refused callback failed")

    def _drain_queue(self) -> None:
        q = self._queue
        while q:
            pilot_uid, payload, on_sent = q.popleft()
            if pilot_uid is _BIND_TCP:
                try:
                    host = bind_host(self._interface)
                    port = self._router.bind_to_random_port(f"tcp://{host}")
                    payload.append(f"tcp://{host}:{port}")
                except Exception as e:  # noqa: BLE001 -- told to the caller
                    payload.append(e)
                on_sent.set()
                continue
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
        self.last_seen[pilot_uid] = time.monotonic()
        try:
            msg = _wire.decode_to_client(payload)
        except Exception:
            log.exception("undecodable frame from %s", pilot_uid)
            return
        if pilot_uid not in self._connected and pilot_uid in self._hello_seen:
            # its link came back (a send failed while it reconnected): frames flow again --
            # else its heartbeats stop for good and the agent ends its pilot, client silent
            self._connected.add(pilot_uid)
            for frame, on_sent in self._outbox.pop(pilot_uid, []):
                self._send_now(pilot_uid, frame, on_sent)
        if isinstance(msg, _wire.Heartbeat):
            if pilot_uid in self._hello_seen:
                return
            # an agent that has not said hello to this client (a resumed session re-attaching):
            # its pilot decides (asks it to resync, until it answers)
        if isinstance(msg, _wire.Hello):
            self._connected.add(pilot_uid)
            self._hello_seen.add(pilot_uid)
        if self._deliver is not None:
            try:
                self._deliver(pilot_uid, msg)
            except Exception:
                log.exception("handling a message from %s failed", pilot_uid)
        if isinstance(msg, _wire.Hello):
            for frame, on_sent in self._outbox.pop(pilot_uid, []):
                self._send_now(pilot_uid, frame, on_sent)


def bind_host(interface: str | None = None) -> str:
    """The address to bind TCP on: `interface` (an IP address or an interface name), else
    $PILOTFISH_INTERFACE, else the address this host's name resolves to -- the one a batch
    job on another node reaches. Never the wildcard."""
    import socket

    interface = interface or os.environ.get("PILOTFISH_INTERFACE")
    if interface:
        if interface in ("*", "0.0.0.0", "::"):
            raise ValueError("binding every interface is refused: name one")
        try:
            socket.inet_aton(interface)
            return interface
        except OSError:
            pass
        addr = _interface_address(interface)
        if addr is None:
            raise ValueError(f"no IPv4 address on interface {interface!r}")
        return addr
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        return "127.0.0.1"


def _interface_address(name: str) -> str | None:
    import fcntl
    import socket
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(
            s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15])
        )  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        s.close()
