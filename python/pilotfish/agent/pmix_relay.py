"""Fences of PMIx worlds across hosts (launch method `pmix`, issue 51 item 2): the agent's
PMIx server process holds the Relay, each node executor's PMIx server process an Uplink to
it. A node's server hands over its ranks' blob of a fence (agent/pmix_lib.py, on_fence);
once every node of the world has, each gets the union -- every node's blob in node order --
and completes the fence there (fence_done).

    node server --hello {"token", "node"}--> Relay (TCP, one connection per node server)
                --{"fence": NS, "seq": n, "blob"}-->      (the n-th fence of NS on that node)
                <--{"done": NS, "seq": n, "blob": union}--  once every node of NS sent its n-th

The agent's own node takes part without a connection (Relay.local). Authentication: the
first line of a connection must carry the pilot's token (128 random bits, handed to node
executors in the spawn specs of the world's ranks, never to a rank); anything else closes
it. Before that line a connection holds at most HELLO_MAX bytes, for HELLO_S, and at most
MAX_PENDING of them at once (the oldest closed first). The link is plain TCP: the token and
the fences' blobs (Open MPI's business cards) cross the pilot's network unencrypted, unlike
the node link (CURVE). Lines are bounded (MAX_LINE) and so is a world's union (MAX_UNION);
a fence that would pass it fails that world's fence on every node (status -1: the ranks'
PMIx_Fence fails).
Single-threaded: the owner's select loop calls `fileno`s and `on_readable`; fences from the
library's progress thread reach it through the owner's queue.
"""

from __future__ import annotations

import base64
import hmac
import json
import socket
import time
from collections.abc import Callable

MAX_LINE = 48 << 20  # a fence message: base64 of a blob of at most MAX_UNION
# before its hello (the token) a connection is a stranger's: it may hold at most a hello's
# worth of bytes, MAX_PENDING such connections at once (the oldest closed first), each for
# HELLO_S at most -- so strangers on the pilot's network cost kilobytes, not MAX_LINE each
HELLO_MAX = 1024
MAX_PENDING = 64
HELLO_S = 10.0
MAX_UNION = 32 << 20  # a world's fence blob, all nodes together (the PMI path's cap)
FAILED = -1


def _line(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Conn:
    """One line-based connection (non-blocking reads, blocking writes)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.node: str | None = None  # (Relay: once its hello was right)
        self.since = time.monotonic()

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[dict] | None:
        """The complete lines now readable, parsed; None: closed or broken."""
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        if not data:
            return None
        self.buf += data
        if self.node is None and len(self.buf) > HELLO_MAX and b"\n" not in self.buf[:HELLO_MAX]:
            return None  # a stranger's: no hello is this long
        out = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                return None
            if not isinstance(msg, dict):
                return None
            out.append(msg)
        if len(self.buf) > MAX_LINE:
            return None
        return out

    def send(self, obj: dict) -> bool:
        try:
            self.sock.setblocking(True)
            self.sock.sendall(_line(obj))
            self.sock.setblocking(False)
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()


class Relay:
    """The agent's side (see the module docstring)."""

    def __init__(self, host: str, token: bytes, local: Callable[[str, int, bytes, int], None]):
        """local(ns, seq, union, status): complete the agent's own node's fence `seq` of ns."""
        self.token = token
        self.local = local
        self.listener = socket.create_server((host, 0))
        self.listener.setblocking(False)
        self.address = f"{host}:{self.listener.getsockname()[1]}"
        self.conns: list[Conn] = []
        self.by_node: dict[str, Conn] = {}
        self.worlds: dict[str, tuple[list[str], str | None]] = {}  # ns -> (nodes, here|None)
        self.fences: dict[tuple[str, int], dict[str, bytes]] = {}
        self.local_seq: dict[str, int] = {}

    def fileno(self) -> int:
        return self.listener.fileno()

    def world(self, ns: str, nodes: list[str], here: str | None) -> None:
        """World ns spans `nodes` (distinct, in node order); `here`: the agent's own, if one."""
        self.worlds[ns] = (nodes, here)

    def drop(self, ns: str) -> None:
        self.worlds.pop(ns, None)
        self.local_seq.pop(ns, None)
        for k in [k for k in self.fences if k[0] == ns]:
            del self.fences[k]

    def accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        now = time.monotonic()
        pending = [c for c in self.conns if c.node is None]
        for c in pending:  # (strangers: bounded in time, and in number, oldest first)
            if now - c.since > HELLO_S:
                self._close(c)
        pending = [c for c in self.conns if c.node is None]
        for c in pending[: max(0, len(pending) + 1 - MAX_PENDING)]:
            self._close(c)
        self.conns.append(Conn(sock))

    def on_readable(self, conn: Conn) -> None:
        msgs = conn.read()
        if msgs is None:
            self._close(conn)
            return
        for m in msgs:
            if conn.node is None:
                token = m.get("token")
                node = m.get("node")
                if (
                    not isinstance(token, str)
                    or not hmac.compare_digest(token.encode(), self.token.hex().encode())
                    or not isinstance(node, str)
                ):
                    self._close(conn)
                    return
                conn.node = node[:200]
                self.by_node[conn.node] = conn
                continue
            ns, seq, blob = m.get("fence"), m.get("seq"), m.get("blob")
            if isinstance(ns, str) and isinstance(seq, int) and isinstance(blob, str):
                try:
                    data = base64.b64decode(blob, validate=True)
                except ValueError:
                    self._close(conn)
                    return
                self.arrived(ns, seq, conn.node, data)

    def local_fence(self, ns: str, blob: bytes) -> None:
        """The agent's own node's ranks of ns are all in their next fence."""
        seq = self.local_seq.get(ns, 0)
        self.local_seq[ns] = seq + 1
        here = self.worlds.get(ns, ([], None))[1]
        if here is not None:
            self.arrived(ns, seq, here, blob)

    def arrived(self, ns: str, seq: int, node: str, blob: bytes) -> None:
        w = self.worlds.get(ns)
        if w is None or node not in w[0]:
            return  # (a world let go, or a node not of it: nothing to wait for)
        nodes, here = w
        parts = self.fences.setdefault((ns, seq), {})
        parts[node] = blob
        if len(parts) < len(nodes):
            return
        del self.fences[(ns, seq)]
        union = b"".join(parts[n] for n in nodes)
        status = 0 if len(union) <= MAX_UNION else FAILED
        if status:
            union = b""
        for n in nodes:
            if n == here:
                self.local(ns, seq, union, status)
            else:
                c = self.by_node.get(n)
                if c is not None:
                    c.send({"done": ns, "seq": seq, "blob": b64(union), "status": status})

    def _close(self, conn: Conn) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
        if conn.node is not None and self.by_node.get(conn.node) is conn:
            del self.by_node[conn.node]
        conn.close()


class Uplink:
    """A node server's side: its connection to the agent's Relay."""

    def __init__(self, address: str, token: str, node: str):
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=30)
        self.conn = Conn(sock)
        self.conn.send({"token": token, "node": node})
        self.seq: dict[str, int] = {}

    def fileno(self) -> int:
        return self.conn.fileno()

    def fence(self, ns: str, blob: bytes) -> int:
        """Send this node's blob of ns's next fence; its sequence number."""
        seq = self.seq.get(ns, 0)
        self.seq[ns] = seq + 1
        self.conn.send({"fence": ns, "seq": seq, "blob": b64(blob)})
        return seq

    def read(self) -> list[dict] | None:
        return self.conn.read()
