"""An OpenPMIx server for the MPI worlds of one host (launch method `pmix`, launch/pmix.py):
Open MPI tasks that name no launcher form one world at the agent's speed, with no `prterun`
or DVM per task.

It runs as a process of its own, `python -m pilotfish.agent.pmix_server FD DIR`, started by
the launch method (launch/pmix.py, PmixHelper), which talks to it over FD (one end of a
socketpair, one JSON object a line, bounded):

    -> {"op": "register", "ns": NS, "size": N, "host": H}   a task's world: N ranks, all here
    <- {"env": [{...rank 0's PMIX_* variables}, ...]}  or  {"error": "..."}
    -> {"op": "drop", "ns": NS}                               its task ended (no answer)

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

import json
import os
import re
import shutil
import socket
import sys
import tempfile
from typing import Any

from .._inert import inert
from ..launch.pmix import PACKAGE
from .pmix_lib import PmixLib, load

MAX_LINE = 64 * 1024
MAX_SIZE = 65536  # ranks of one world
NS_RE = re.compile(r"[A-Za-z0-9_.:+-]{1,200}")
HOST_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
# the wheel's Open MPI variables must not reach the system's OpenPMIx (notes/substrates.md)
STRIP = ("PMIX_", "OMPI_", "PRTE_", "OPAL_")


def _bounded(text: Any, n: int = 300) -> str:
    return inert(str(text), n)  # (escaped, bounded: _inert.py)


class Server:
    """This process's OpenPMIx server (agent/pmix_lib.py) and the worlds registered with it."""

    def __init__(self, tmp: str):
        self.lib = PmixLib(tmp, self._fence, self._abort)

    @property
    def worlds(self) -> dict[str, int]:
        return self.lib.worlds

    def _fence(self, ns: str, key: int, blob: bytes) -> None:
        # every rank of a world is here: this node's blob is the world's (a fence of local
        # ranks only is normally completed inside the library and never comes here)
        self.lib.fence_done(key, blob)

    def _abort(self, ns: str, rank: int, status: int, msg: str) -> None:
        sys.stderr.write(
            f"MPI_Abort: namespace {_bounded(ns, 120)} rank {rank} status {status}: "
            f"{_bounded(msg)}\n"
        )
        sys.stderr.flush()

    def register(self, ns: str, size: int, host: str) -> list[dict[str, str]]:
        """Register the world's namespace and its ranks; each rank's environment."""
        if ns in self.lib.worlds:
            raise ValueError(f"namespace {ns} is already registered")
        try:
            return self.lib.register(ns, [host] * size, host)
        except RuntimeError:
            self.lib.drop(ns)
            raise

    def drop(self, ns: str) -> None:
        self.lib.drop(ns)


def _check(msg: Any) -> tuple[str, str, int, str]:
    """(op, ns, size, host) of a request, or ValueError naming the field."""
    if not isinstance(msg, dict):
        raise ValueError("a request is a JSON object")
    op, ns = msg.get("op"), msg.get("ns")
    if op not in ("register", "drop"):
        raise ValueError(f"op={_bounded(op, 40)}: 'register' or 'drop'")
    if not isinstance(ns, str) or not NS_RE.fullmatch(ns):
        raise ValueError(f"ns={_bounded(ns, 80)}: 1-200 of [A-Za-z0-9_.:+-]")
    if op == "drop":
        return op, ns, 0, ""
    size, host = msg.get("size"), msg.get("host")
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size={_bounded(size, 40)}: a whole number 1..{MAX_SIZE}")
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):
        raise ValueError(f"host={_bounded(host, 80)}: a host name")
    return op, ns, size, host


def serve(sock: socket.socket, server: Server) -> None:
    """Answer requests until the agent's end closes."""
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            reply: dict[str, Any] | None
            try:
                op, ns, size, host = _check(json.loads(line))
                if op == "drop":
                    server.drop(ns)
                    reply = None
                else:
                    reply = {"env": server.register(ns, size, host)}
            except (ValueError, RuntimeError) as e:
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
