"""The door of a listening ZeroMQ socket: what a peer may cost before it has proven who it is.

CURVE (and ZAP) decide who gets in; they say nothing about what a stranger costs while it is
being refused. libzmq allocates a frame of the size its header declares, before any handshake,
and accepts every connection it is offered. So every listening socket of pilotfish (the agent's
node port, function pool and service registry, the client's control plane, staging servers)
goes through here:

- harden(sock, max_frame), before bind: ZMQ_MAXMSGSIZE (a frame declared larger than the
  protocol's largest drops the connection at its header: nothing is allocated) and
  ZMQ_HANDSHAKE_IVL (a connection that has not finished its handshake in HANDSHAKE_S is
  dropped). Senders whose messages can be larger split them into frames of at most
  FRAME_CHUNK (send_split / joined): the limit is per frame, and only a proven peer's
  multipart message is ever assembled.
- Door(sock): a thread reads the socket's monitor. Every accepted connection is *pending*
  until it has authenticated -- the server has sent it the READY that ends a handshake,
  which it does only after ZAP let it in (the v1 monitor names no connection on success,
  but TCP_INFO's tcpi_bytes_acked does: a CURVE server's greeting and WELCOME come to 234
  bytes, its READY makes at least 285, an ERROR 246; a PLAIN server's handshake, READY
  included, stays under 150; no server sends a byte of data before READY: READY_BYTES) --
  or until HANDSHAKE_S has passed (libzmq has dropped it by then unless it proved itself;
  what TCP_INFO cannot tell: a local socket). An authenticated connection is never shut.
  Pending connections are capped per peer (a TCP peer is its address; a local socket's is
  its uid, SO_PEERCRED) and in total -- caps its owner scales with the peers it expects
  (the node port: with the pilot's nodes, agent/node_link.py: many executors may share one
  address, all of an emulated pilot's do); over a cap the *oldest* pending connection of
  the peer holding the most -- of those that have not yet received a whole handshake's
  bytes (TCP_INFO), when there is one: everyone on a host shares its address, and a peer
  that proved itself in milliseconds must not pay for a stranger's flood -- is shut
  down (shutdown(2) on libzmq's descriptor, after checking it is still that connection: libzmq
  then closes it as any peer's hang-up). A flood costs descriptors and memory bounded by
  the caps: total * max_frame bytes at most, `total` descriptors -- never the agent's
  descriptors for its tasks, and a proven peer is never shut. Refusals, evictions and
  failed accepts are counted; the owner takes one summary
  per interval (take_summary) and records it as one event, never one per refusal.

Memory bound under a pre-login flood, per socket: total * max_frame (defaults: 64 * 1 MiB).
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import socket
import struct
import threading
import time
from typing import Any, Callable

log = logging.getLogger("pilotfish.door")

MAX_FRAME = 1 << 20  # default largest frame a peer may send (ZMQ_MAXMSGSIZE)
FRAME_CHUNK = 1 << 19  # send_split's frame size: well under every socket's MAX_FRAME
HANDSHAKE_S = 5.0  # a connection must finish its handshake by then (ZMQ_HANDSHAKE_IVL)
PER_PEER = 32  # pending connections per peer
TOTAL = 64  # pending connections in all
SUMMARY_S = 10.0  # at most one summary of refusals per interval
PROVEN_BYTES = 512  # a CURVE client's greeting, HELLO and INITIATE come to more than this
# a server that has sent (and had acknowledged) this many bytes has sent READY: the connection
# authenticated (module docstring: a CURVE handshake's 285+ against 246 for an ERROR)
READY_BYTES = 275
SETTLE_S = 0.05  # pending connections looked at (have they authenticated?) this often ...
SETTLE_BUDGET = 512  # ... at most this many each time (a few microseconds each)


def harden(sock: Any, max_frame: int = MAX_FRAME, handshake_s: float = HANDSHAKE_S) -> None:
    """Bound what an unproven peer of this socket can send: call before bind (libzmq copies
    the options into each listener when it binds)."""
    import zmq

    sock.setsockopt(zmq.MAXMSGSIZE, int(max_frame))
    sock.setsockopt(zmq.HANDSHAKE_IVL, int(handshake_s * 1000))


def send_split(sock: Any, head: list, payload: bytes, flags: int = 0) -> None:
    """Send head frames then payload in frames of at most FRAME_CHUNK bytes (one frame when it
    fits: the usual case costs nothing). The receiver reassembles with joined()."""
    if len(payload) <= FRAME_CHUNK:
        sock.send_multipart([*head, payload], flags)
        return
    view = memoryview(payload)
    parts = [view[i : i + FRAME_CHUNK] for i in range(0, len(payload), FRAME_CHUNK)]
    sock.send_multipart([*head, *parts], flags, copy=False)


@functools.lru_cache(maxsize=None)
def split_socket_class() -> type:
    """A zmq.Socket whose send() splits a payload over FRAME_CHUNK into frames (send_split):
    what every peer of a hardened socket sends through, so no frame of theirs is refused."""
    import zmq

    class SplitSocket(zmq.Socket):
        # zmq.Socket.send, splitting a large message
        def send(self, data, flags=0, copy=True, track=False, **kw):
            if isinstance(data, bytes) and len(data) > FRAME_CHUNK and not flags & zmq.SNDMORE:
                return send_split(self, [], data, flags)
            return super().send(data, flags, copy=copy, track=track, **kw)

    return SplitSocket


def joined(frames: list, start: int) -> bytes:
    """The payload send_split sent, from frame `start` on (bytes or zmq.Frame)."""
    if len(frames) == start + 1:
        f = frames[start]
        return f if isinstance(f, bytes) else f.bytes
    return b"".join(f if isinstance(f, bytes) else f.buffer for f in frames[start:])


def _borrowed(fd: int, what: Callable[[socket.socket], Any], otherwise: Any) -> Any:
    """what(a socket object on libzmq's descriptor), which stays libzmq's (detached, never
    closed here); otherwise when fd is no socket, or what raised OSError."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return otherwise
    try:
        return what(s)
    except OSError:
        return otherwise
    finally:
        s.detach()


def _identify(s: socket.socket) -> tuple[Any, tuple]:
    if s.family == socket.AF_UNIX:
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", cred)
        return f"uid {uid}", (s.getsockname(), pid)
    peer = s.getpeername()
    return peer[0], (s.getsockname(), peer)


def _peer_of(fd: int) -> tuple[Any, tuple] | None:
    """(peer, proof) of a connected descriptor: the peer's address (TCP) or uid (local), and
    what identifies this connection (names at both ends, or the peer's pid) -- None when the
    descriptor is no connected socket any more."""
    return _borrowed(fd, _identify, None)


def _bytes_in(s: socket.socket) -> int:
    if s.family == socket.AF_UNIX:
        return 0
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 136)
    return int.from_bytes(info[128:136], "little") if len(info) >= 136 else 0


def _bytes_out(s: socket.socket) -> int:
    """Bytes this end has sent and the peer acknowledged (tcpi_bytes_acked); a local
    socket's: unknown, 0."""
    if s.family == socket.AF_UNIX:
        return 0
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 128)
    return int.from_bytes(info[120:128], "little") if len(info) >= 128 else 0


def _ready(fd: int, proof: tuple, ready_bytes: int) -> bool:
    """Has the connection on fd -- still the one proof names -- authenticated (its server
    side sent READY: ready_bytes)?"""

    def ready(s: socket.socket) -> bool:
        return _bytes_out(s) >= ready_bytes and _identify(s)[1] == proof

    return _borrowed(fd, ready, False)


def _received(fd: int) -> int:
    """Bytes a TCP connection has received (tcp_info.tcpi_bytes_received); a local
    socket's: unknown, 0."""
    return _borrowed(fd, _bytes_in, 0)


def _shut(fd: int, proof: tuple) -> bool:
    """shutdown(2) the connection on fd if it is still the one `proof` names."""

    def shut(s: socket.socket) -> bool:
        if _identify(s)[1] != proof:
            return False  # closed meanwhile (the number may be another's now): leave it
        s.shutdown(socket.SHUT_RDWR)
        return True

    return _borrowed(fd, shut, False)


class Reserve:
    """Descriptors held back (open /dev/null, close-on-exec) so that shutdown and cleanup never
    need a new one: the owner releases them before it cleans up. (Tasks never need one:
    the spawner's child closes every inherited descriptor before it opens its outputs.)"""

    def __init__(self, n: int = 32):
        self.fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(n)]

    def release(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


class Door:
    """Caps and counts what unproven peers of one listening socket hold (module docstring).
    Thread: one, reading the socket's monitor; its counters are read under a lock."""

    def __init__(
        self,
        sock: Any,
        name: str,
        per_peer: int = PER_PEER,
        total: int = TOTAL,
        handshake_s: float = HANDSHAKE_S,
        summary_s: float = SUMMARY_S,
        proven_bytes: int = PROVEN_BYTES,
        ready_bytes: int = READY_BYTES,
    ):
        import zmq

        self.zmq = zmq
        self.name = name
        self.per_peer = per_peer
        self.total = total
        self.handshake_s = handshake_s
        self.proven_bytes = proven_bytes
        self.ready_bytes = ready_bytes
        self.summary_s = summary_s
        self._sock = sock
        self._mon = sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED
            | zmq.EVENT_DISCONNECTED
            | zmq.EVENT_CLOSED
            | zmq.EVENT_ACCEPT_FAILED
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        )
        self._lock = threading.Lock()
        # handshakes (refused), evicted, accept_failed, accepted, authenticated (all time)
        self.counts: collections.Counter[str] = collections.Counter()
        self._reported: collections.Counter[str] = collections.Counter()
        self._next_summary = 0.0  # the first refusal is told at once, later ones summed up
        self.pending: collections.OrderedDict[int, tuple] = collections.OrderedDict()
        self._by_peer: collections.Counter = collections.Counter()
        self._settled = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"door-{name}", daemon=True)
        self._thread.start()

    # -- the monitor thread --------------------------------------------------------------------
    def _run(self) -> None:
        zmq = self.zmq
        mon = self._mon
        try:
            while not self._stop:
                if not mon.poll(200 if not self.pending else int(SETTLE_S * 1000)):
                    self._expire(time.monotonic())
                    continue
                while True:
                    try:
                        frames = mon.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    except zmq.ZMQError:
                        return
                    if len(frames) < 1 or len(frames[0]) != 6:
                        continue
                    event, value = struct.unpack("=hi", frames[0])
                    self._event(event, value)
                self._expire(time.monotonic())
        except Exception:  # the door must never take its owner down
            log.exception("the door of %s stopped", self.name)
        finally:
            mon.close(0)

    def _event(self, event: int, value: int) -> None:
        zmq = self.zmq
        if event == zmq.EVENT_ACCEPTED:
            now = time.monotonic()
            self._expire(now)
            got = _peer_of(value)
            with self._lock:
                self.counts["accepted"] += 1
            if got is None:
                return
            peer, proof = got
            self._forget(value)  # (a number reused before its close was told: not twice)
            self.pending[value] = (now, peer, proof)
            self._by_peer[peer] += 1
            self._enforce(peer)
        elif event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
            self._forget(value)
        elif event == zmq.EVENT_ACCEPT_FAILED:
            with self._lock:
                self.counts["accept_failed"] += 1
        else:  # a handshake failed: a stranger, or a peer without the key
            with self._lock:
                self.counts["handshakes"] += 1

    def _forget(self, fd: int) -> tuple | None:
        got = self.pending.pop(fd, None)
        if got is not None:
            self._by_peer[got[1]] -= 1
            if self._by_peer[got[1]] <= 0:
                del self._by_peer[got[1]]
        return got

    def _expire(self, now: float) -> None:
        """Connections older than the handshake's limit are proven (or gone), and those that
        authenticated are: not pending."""
        limit = now - self.handshake_s - 0.5
        pending = self.pending
        while pending:
            fd, (t, _peer, _proof) = next(iter(pending.items()))
            if t > limit:
                break
            self._forget(fd)
        if pending and now - self._settled >= SETTLE_S:
            self._settle(now)

    def _settle(self, now: float) -> None:
        """Pending connections that authenticated stop being pending (looked at: the oldest
        SETTLE_BUDGET of those a few milliseconds old)."""
        self._settled = now
        done = []
        for n, (fd, (t, p, proof)) in enumerate(self.pending.items()):
            if n >= SETTLE_BUDGET or now - t < 0.005:
                break
            if _ready(fd, proof, self.ready_bytes):
                done.append(fd)
        for fd in done:
            self._forget(fd)
        if done:
            with self._lock:
                self.counts["authenticated"] += len(done)

    def _enforce(self, peer: Any) -> None:
        if self._by_peer.get(peer, 0) > self.per_peer or len(self.pending) > self.total:
            self._settle(time.monotonic())  # (those that authenticated count no more)
        while self._by_peer.get(peer, 0) > self.per_peer:
            if not self._evict(peer):
                break
        while len(self.pending) > self.total:
            if not self._evict(self._by_peer.most_common(1)[0][0]):
                break

    def _evict(self, peer: Any) -> bool:
        """Close the oldest pending connection of that peer that has not sent a whole
        handshake's bytes (a TCP peer's address is shared by everyone on its host: a proven
        connection must not pay for a stranger's flood); else its oldest that has not
        authenticated (one that has is no longer pending: never shut). False when every one
        of its pending connections has."""
        victim = None
        ready = []
        for fd, (_t, p, proof) in self.pending.items():
            if p != peer:
                continue
            if _ready(fd, proof, self.ready_bytes):
                ready.append(fd)
                continue
            if victim is None:
                victim = (fd, proof)
            if _received(fd) < self.proven_bytes:
                victim = (fd, proof)
                break
        for fd in ready:
            self._forget(fd)
        if ready:
            with self._lock:
                self.counts["authenticated"] += len(ready)
        if victim is None:
            return bool(ready)
        fd, proof = victim
        self._forget(fd)
        if _shut(fd, proof):
            with self._lock:
                self.counts["evicted"] += 1
        return True

    # -- the owner's side ----------------------------------------------------------------------
    def scale(self, per_peer: int, total: int) -> None:
        """New caps (the peers the owner expects grew): taken from the next connection on."""
        self.per_peer, self.total = int(per_peer), int(total)

    def take_summary(self, now: float | None = None, force: bool = False) -> str | None:
        """What was refused since the last summary, at most once per summary_s (None: nothing
        new, or too soon). One line, for one event."""
        now = time.monotonic() if now is None else now
        if not force and now < self._next_summary:
            return None
        with self._lock:
            new = {
                k: self.counts[k] - self._reported[k]
                for k in ("handshakes", "evicted", "accept_failed")
            }
            self._reported.update(new)
        if not any(new.values()):
            return None  # (the next refusal is told at once)
        self._next_summary = now + self.summary_s
        return (
            f"{self.name}: {new['handshakes']} handshakes refused, {new['evicted']} unproven "
            f"connections closed over the caps ({self.per_peer} per peer, {self.total} "
            f"in all), {new['accept_failed']} accepts failed, since the last summary "
            f"(one per {self.summary_s:.0f} s at most)"
        )

    def close(self) -> None:
        self._stop = True
        try:
            self._sock.disable_monitor()
        except Exception:  # noqa: BLE001 -- a closed socket has no monitor to disable
            pass
        self._thread.join(timeout=2.0)
