"""An OpenPMIx server for the MPI worlds of one host (launch method `pmix`, launch/pmix.py):
Open MPI tasks that name no launcher form one world at the agent's speed, with no `prterun`
or DVM per task.

It runs as a process of its own, `python -m pilotfish.agent.pmix_server FD DIR`, started by
the launch method (launch/pmix.py, PmixHelper) -- or by a node executor for its ranks
(agent/pmix_node.py) -- which talks to it over FD (one end of a socketpair, one JSON object
a line, bounded):

    -> {"op": "register", "ns": NS, "size": N, "host": H}   a task's world: N ranks, all here
    <- {"env": [{...rank 0's PMIX_* variables}, ...]}  or  {"error": "..."}
    -> {"op": "drop", "ns": NS}                               its task ended (no answer)
    -> {"op": "listen", "host": A}   (the agent's) be the relay of fences across hosts
    <- {"relay": "A:PORT", "token": HEX}
    -> {"op": "register", "ns": NS, "nodes": [node of each rank], "here": NODE,
        ("relay": "A:PORT", "token": HEX on a node executor's)}     a world across hosts
    <- {"env": [{...}, ...]}   for its ranks on NODE, in rank order

Fences of a world across hosts (agent/pmix_relay.py): the library hands over this node's
blob; a node's server sends it to the relay, the agent's gathers every node's and sends each
the union; the library then completes the fence.

What the server library does itself: the ranks' PMIx_Init (over 127.0.0.1; the namespace NS
-- 128 random bits in it -- is what a client must name, and only the ranks' environment holds
it: a connection naming another is closed), their puts, every fence (all ranks are local:
OpenPMIx completes a local-only fence in the server; were one to reach the upcall, it is
completed at once with this node's blob) and every get. What it is told here
(agent/pmix_lib.py): per namespace the job-level info Open MPI 5 reads at MPI_Init --
job/universe size, the node map and proc map, local peers and size, app number/size/leader,
session directories -- and per rank its rank, local/node rank, app and global rank, node id
and host name (PMIX_PROC_DATA); per rank the environment PMIx_server_setup_fork gives
(server URIs, namespace, rank, security mode).

Why a process of its own: OpenPMIx's server has its own progress thread that calls into
Python (fences, aborts) -- kept out of the agent's loop and its GIL. Why ctypes and not the
official Python binding (Debian's python3-pmix): that binding polls its callback queue from a
Python thread every millisecond (~3 % of a core for an idle pilot, measured) and cannot carry
a fence's binary data (agent/pmix_lib.py) -- which worlds across hosts need.

Where libpmix.so.2 is missing it answers one line naming the package (libpmix2) and exits 2.
An MPI_Abort is logged (bounded, escaped) on stderr; the rank then exits with its code, which
fails the task naming the rank (the agent's executor).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import secrets
import select
import shutil
import socket
import sys
import tempfile
from typing import Any

from .._inert import inert
from ..launch.pmix import PACKAGE
from .pmix_lib import PmixLib, load
from .pmix_relay import FAILED, Relay, Uplink

MAX_LINE = 4 << 20  # a request (a world's node list: 65,536 names at most)
MAX_SIZE = 65536  # ranks of one world
NS_RE = re.compile(r"[A-Za-z0-9_.:+-]{1,200}")
HOST_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
ADDR_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}:[0-9]{1,5}")
# the wheel's Open MPI variables must not reach the system's OpenPMIx (notes/substrates.md)
STRIP = ("PMIX_", "OMPI_", "PRTE_", "OPAL_")


def _bounded(text: Any, n: int = 300) -> str:
    return inert(str(text), n)  # (escaped, bounded: _inert.py)


class Server:
    """This process's OpenPMIx server (agent/pmix_lib.py), the worlds registered with it, and
    their fences across hosts (agent/pmix_relay.py: the Relay on the agent's, an Uplink on a
    node executor's)."""

    def __init__(self, tmp: str):
        self.lib = PmixLib(tmp, self._fence, self._abort)
        self.spans: dict[str, Any] = {}  # ns of a world across hosts -> its Relay or Uplink
        self.relay: Relay | None = None
        self.uplinks: dict[str, Uplink] = {}  # relay address -> this node's link to it
        self.keys: dict[tuple[str, int], int] = {}  # (ns, fence seq) -> the library's key
        self.events: queue.SimpleQueue = queue.SimpleQueue()  # fences from the library
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)

    @property
    def worlds(self) -> dict[str, int]:
        return self.lib.worlds

    def _fence(self, ns: str, key: int, blob: bytes) -> None:
        """(the library's progress thread) this node's ranks of ns are all in a fence."""
        if ns not in self.spans:  # every rank here: this node's blob is the world's
            self.lib.fence_done(key, blob)
            return
        self.events.put((ns, key, blob))
        os.write(self.wake_w, b"!")

    def on_wake(self) -> None:
        try:
            os.read(self.wake_r, 4096)
        except BlockingIOError:
            pass
        while True:
            try:
                ns, key, blob = self.events.get_nowait()
            except queue.Empty:
                return
            span = self.spans.get(ns)
            if isinstance(span, Uplink):
                self.keys[(ns, span.fence(ns, blob))] = key
            elif isinstance(span, Relay):
                self.keys[(ns, span.local_seq.get(ns, 0))] = key
                span.local_fence(ns, blob)
            else:
                self.lib.fence_done(key, b"", FAILED)

    def done(self, ns: str, seq: int, union: bytes, status: int) -> None:
        key = self.keys.pop((ns, seq), None)
        if key is not None:
            self.lib.fence_done(key, union, status)

    def _abort(self, ns: str, rank: int, status: int, msg: str) -> None:
        sys.stderr.write(
            f"MPI_Abort: namespace {_bounded(ns, 120)} rank {rank} status {status}: "
            f"{_bounded(msg)}\n"
        )
        sys.stderr.flush()

    def listen(self, host: str) -> dict[str, str]:
        """Be the relay of this pilot's worlds across hosts: its address and token."""
        if self.relay is None:
            self.relay = Relay(host, secrets.token_bytes(16), self.done)
        return {"relay": self.relay.address, "token": self.relay.token.hex()}

    def register(self, req: dict) -> list[dict[str, str]]:
        """Register the world's namespace and its ranks here; each local rank's environment."""
        ns, nodes, here = req["ns"], req["nodes"], req["here"]
        if ns in self.lib.worlds:
            raise ValueError(f"namespace {ns} is already registered")
        order = list(dict.fromkeys(nodes))
        if len(order) > 1:
            if req.get("relay") is None:
                if self.relay is None:
                    raise ValueError("a world across hosts needs the relay ('listen' first)")
                self.relay.world(ns, order, here if here in order else None)
                self.spans[ns] = self.relay
            else:
                addr = str(req["relay"])
                if addr not in self.uplinks:
                    self.uplinks[addr] = Uplink(addr, str(req.get("token", "")), here)
                self.spans[ns] = self.uplinks[addr]
        try:
            return self.lib.register(ns, nodes, here)
        except RuntimeError:
            self.drop(ns)
            raise

    def drop(self, ns: str) -> None:
        span = self.spans.pop(ns, None)
        if isinstance(span, Relay):
            span.drop(ns)
        elif isinstance(span, Uplink):
            span.seq.pop(ns, None)
        for k in [k for k in self.keys if k[0] == ns]:
            self.lib.fence_done(self.keys.pop(k), b"", FAILED)
        self.lib.drop(ns)


def _check(msg: Any) -> dict:
    """A request, checked (ValueError naming the field): register with `size` and `host` (a
    world on this host) becomes one with `nodes` (the node of each rank) and `here`."""
    if not isinstance(msg, dict):
        raise ValueError("a request is a JSON object")
    op = msg.get("op")
    if op not in ("register", "drop", "listen"):
        raise ValueError(f"op={_bounded(op, 40)}: 'register', 'drop' or 'listen'")
    if op == "listen":
        if not isinstance(msg.get("host"), str) or not HOST_RE.fullmatch(msg["host"]):
            raise ValueError(f"host={_bounded(msg.get('host'), 80)}: a host name or address")
        return msg
    ns = msg.get("ns")
    if not isinstance(ns, str) or not NS_RE.fullmatch(ns):
        raise ValueError(f"ns={_bounded(ns, 80)}: 1-200 of [A-Za-z0-9_.:+-]")
    if op == "drop":
        return msg
    if "nodes" not in msg:
        size, host = msg.get("size"), msg.get("host")
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
            raise ValueError(f"size={_bounded(size, 40)}: a whole number 1..{MAX_SIZE}")
        if not isinstance(host, str) or not HOST_RE.fullmatch(host):
            raise ValueError(f"host={_bounded(host, 80)}: a host name")
        return dict(msg, nodes=[host] * size, here=host)
    nodes, here = msg.get("nodes"), msg.get("here")
    if (
        not isinstance(nodes, list)
        or not 1 <= len(nodes) <= MAX_SIZE
        or not all(isinstance(n, str) and HOST_RE.fullmatch(n) for n in nodes)
    ):
        raise ValueError(f"nodes={_bounded(nodes, 80)}: 1..{MAX_SIZE} node names")
    if not isinstance(here, str) or not HOST_RE.fullmatch(here):
        raise ValueError(f"here={_bounded(here, 80)}: a node name")
    relay = msg.get("relay")
    if relay is not None and (not isinstance(relay, str) or not ADDR_RE.fullmatch(relay)):
        raise ValueError(f"relay={_bounded(relay, 80)}: host:port")
    return msg


def serve(sock: socket.socket, server: Server) -> None:
    """Answer requests until the agent's end closes; relay fences meanwhile."""
    buf = b""
    while True:
        relay = server.relay
        conns: list[Any] = [sock, server.wake_r, *server.uplinks.values()]
        if relay is not None:
            conns += [relay, *relay.conns]
        ready, _, _ = select.select(conns, [], [])
        for r in ready:
            if r is server.wake_r:
                server.on_wake()
            elif isinstance(r, Uplink):
                for m in r.read() or ():
                    ns, seq, blob = m.get("done"), m.get("seq"), m.get("blob")
                    if isinstance(ns, str) and isinstance(seq, int) and isinstance(blob, str):
                        status = m.get("status")
                        status = status if isinstance(status, int) else FAILED
                        server.done(ns, seq, base64.b64decode(blob), status)
            elif relay is not None and r is relay:
                relay.accept()
            elif r is not sock:
                relay.on_readable(r)  # type: ignore[union-attr]  # (one of its conns)
        if sock not in ready:
            continue
        data = sock.recv(65536)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            reply: dict[str, Any] | None
            try:
                req = _check(json.loads(line))
                if req["op"] == "drop":
                    server.drop(req["ns"])
                    reply = None
                elif req["op"] == "listen":
                    reply = server.listen(req["host"])
                else:
                    reply = {"env": server.register(req)}
            except (ValueError, RuntimeError, OSError) as e:
                reply = {"error": _bounded(e)}
            if reply is not None:
                sock.sendall(json.dumps(reply).encode() + b"\n")
        if len(buf) > MAX_LINE:
            sock.sendall(json.dumps({"error": f"a request over {MAX_LINE} bytes"}).encode() + b"\n")
            return


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    for k in [k for k in os.environ if k.startswith(STRIP)]:
        del os.environ[k]
    if load() is None:
        why = f"libpmix.so.2 is not installed (package {PACKAGE}: apt-get install {PACKAGE})"
        sock.sendall(json.dumps({"error": why}).encode() + b"\n")
        return 2
    tmp = tempfile.mkdtemp(prefix="pmix.", dir=argv[2])  # (0700)
    try:
        server = Server(tmp)
    except RuntimeError as e:
        sock.sendall(json.dumps({"error": _bounded(e)}).encode() + b"\n")
        return 2
    sock.sendall(json.dumps({"ready": "OpenPMIx server"}).encode() + b"\n")
    try:
        serve(sock, server)
    finally:
        for ns in list(server.worlds):
            server.drop(ns)
        server.lib.finalize()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
