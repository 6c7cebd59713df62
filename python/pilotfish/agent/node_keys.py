"""Who a node executor is: its own CURVE key, which no task of the owner can read.

A task runs as the same user as the agent and its node executors: any file they can read, a
task can read, and their environment too (/proc/PID/environ). The node port's server key
(`nodes.key`, agent/node_link.py) is such a file; a node executor's credential must not be one, nor
sit in the environment after start-up. So:

- For each launcher step that starts executors, the agent draws a fresh *step secret* (32
  random bytes, held only while it writes it). Node NAME's CURVE secret key is
  HMAC-SHA256(step secret, "pilotfish node\\0" NAME) -- any 32 bytes are an X25519 secret --
  and the agent keeps only the public keys (node_of: public key -> node).
- The step secret reaches the executors through the step's stdin: a pipe the agent writes and
  closes before the launcher starts (launch/nodes.py: `srun --input=all`, which forwards it to
  every task). Each executor first makes itself non-dumpable (conceal: prctl(PR_SET_DUMPABLE,
  0) -- a process of the same user can then no longer read its memory, environment or
  descriptors through /proc, nor ptrace it), then reads the secret (read_step), puts /dev/null
  in its stdin's place and derives its own key (derive). The agent is non-dumpable too.
- The agent's node port authenticates every connection by its client key, through ZAP: this
  handler (NodeKeys) answers in the port's own ZeroMQ context, from the agent's loop. A key
  that is no node's is refused at the handshake (the door counts it: _door.py); so is the key
  of a node whose executor is connected and not lost -- a second connection under a live
  node's name is refused and counted, and never gets its route. ZAP names the connection's node
  (its User-Id): the agent takes a frame's node from that, never from a routing id the peer
  chose, and answers a node only on the connection its hello came over (the node's route).
- Each executor draws a *token* (TOKEN_BYTES, in its memory only) and sends it in every hello:
  the agent pins the first it hears for the node, and adopts a later connection of that node
  (its executor reconnecting after its link broke, or after the node was lost) only with a
  hello that carries the same token. So a step secret read from srun (the owner's, dumpable:
  its stdin pipe, its memory) after the executors said hello speaks for no node.

What is left: a process of the owner's that reads the step secret from srun's stdin pipe or
memory in the moment between the step's start and its executors' hellos (about a second) can
say hello first as one of them. That node's real executor is then refused and the node is lost
-- seen, not silent. (And root reads any process's memory: nothing here holds against it.)
"""

from __future__ import annotations

import collections
import functools
import hashlib
import hmac
import os
import select
import time
from typing import Any, Callable

STEP_BYTES = 32  # a step secret
TOKEN_BYTES = 16  # an executor's token (in its hello)
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # (RFC 27: where a context's sockets ask)
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4  # prctl(2)


def derive(step: bytes, name: str) -> tuple[bytes, bytes]:
    """Node `name`'s CURVE key pair (public, secret; z85) from a step secret."""
    import zmq
    from zmq.utils import z85

    raw = hmac.new(step, b"pilotfish node\0" + name.encode(), hashlib.sha256).digest()
    secret = z85.encode(raw)
    return zmq.curve_public(secret), secret


def step_pipe(secret: bytes) -> int:
    """The read end of a pipe holding the step secret, as one line of hex (what read_step
    reads): written and its other end closed at once (65 bytes: under any pipe's buffer)."""
    r, w = os.pipe()
    try:
        os.write(w, secret.hex().encode() + b"\n")
    except OSError:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int) -> int:
    import ctypes

    r = _libc().prctl(option, arg, 0, 0, 0)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}, {arg}): {os.strerror(e)}")
    return int(r)


def conceal() -> None:
    """Make this process non-dumpable: another process of the same user can no longer read
    its memory, environment or descriptors (/proc/PID/mem, environ, fd) nor ptrace it. Its
    children get the usual attribute back when they exec (execve(2) resets it)."""
    _prctl(PR_SET_DUMPABLE, 0)


def concealed() -> bool:
    return _prctl(PR_GET_DUMPABLE, 0) == 0


def read_step(fd: int = 0, timeout_s: float = 60.0) -> bytes:
    """The step secret from descriptor fd (one line of hex: what NodeLink.start writes into
    the step's stdin); fd is /dev/null afterwards. ValueError saying what came instead
    (never the text itself), TimeoutError when nothing came in timeout_s."""
    data = b""
    end = time.monotonic() + timeout_s
    try:
        while b"\n" not in data and len(data) <= 4 * STEP_BYTES:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(
                    f"stdin: no step secret in {timeout_s:g} s (a node executor is started by "
                    "the agent's launcher step, which writes it there)"
                )
            chunk = os.read(fd, 4 * STEP_BYTES + 2 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(null, fd)  # (inheritable again: dup2's copy)
        os.close(null)
    line = data.split(b"\n", 1)[0].strip()
    try:
        step = bytes.fromhex(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        step = b""
    if len(step) != STEP_BYTES:
        got = f"this one has {len(line)} bytes" if data else "none: stdin ended first"
        raise ValueError(
            f"stdin: the step secret is one line of {2 * STEP_BYTES} hex digits (what the "
            f"agent's launcher step writes there); {got}"
        )
    return step


class NodeKeys:
    """The node port's ZAP handler: which client key is which node's, and whether that node
    may connect now (module docstring). Served from the agent's loop (serve); the port's
    context must be its own: a context's ZAP handler answers every CURVE server in it."""

    def __init__(self, ctx: Any):
        import zmq

        self.zmq = zmq
        self.zap = ctx.socket(zmq.REP)
        self.zap.setsockopt(zmq.LINGER, 0)
        self.zap.bind(ZAP_ENDPOINT)  # before the port binds: no handshake without its answer
        self.node_of: dict[bytes, tuple[str, int]] = {}  # raw public key -> (node, step)
        self.key_of: dict[str, bytes] = {}
        self.steps = 0  # steps started: each node's executor is of one (its User-Id says)
        self.strangers = 0  # handshakes with a key that is no node's (all time)
        self.second: collections.Counter[str] = collections.Counter()  # refused: connected

    def new_step(self, names: list[str]) -> tuple[bytes, int]:
        """A fresh step secret for these nodes' executors, and the step's number; their keys
        from an earlier step (an executor that was lost and is started again) are no longer
        taken, and what its connections still send is told apart (User-Id: "STEP NODE")."""
        from zmq.utils import z85

        secret = os.urandom(STEP_BYTES)
        self.steps += 1
        for name in names:
            self.forget(name)
            raw = z85.decode(derive(secret, name)[0])
            self.node_of[raw] = (name, self.steps)
            self.key_of[name] = raw
        return secret, self.steps

    def forget(self, name: str) -> None:
        """This node's key is taken no more (its executor stopped, or another replaces it)."""
        raw = self.key_of.pop(name, None)
        if raw is not None:
            self.node_of.pop(raw, None)

    def serve(self, connected: Callable[[str], bool]) -> list[str]:
        """Answer every waiting ZAP request: 200 with User-Id "STEP NODE" for a node's key
        whose node is not connected(name); 300 for one whose node is; 400 for any other key.
        The nodes refused because they were connected, one entry per refusal."""
        zmq = self.zmq
        refused: list[str] = []
        while True:
            try:
                req = self.zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return refused
            # version, request id, domain, address, routing id, mechanism, client key
            rid = req[1] if len(req) > 1 else b""
            name, step = None, 0
            if len(req) == 7 and req[0] == b"1.0" and req[5] == b"CURVE":
                name, step = self.node_of.get(req[6], (None, 0))
            if name is None:
                self.strangers += 1
                status, text, user = b"400", b"not a node executor's key", b""
            elif connected(name):
                self.second[name] += 1
                refused.append(name)
                # (300, temporary: the client retries -- its node's executor reconnecting
                # before the agent saw its old connection go; it gets in once its node is lost)
                status, text, user = b"300", b"that node is connected", b""
            else:
                status, text, user = b"200", b"OK", f"{step} {name}".encode()
            self.zap.send_multipart([b"1.0", rid, status, text, user, b""])

    def close(self) -> None:
        self.zap.close(0)


def same_token(pinned: bytes | None, got: bytes) -> bool:
    """Is a hello's token the one pinned for its node (None: none yet, any full one is)?"""
    if len(got) < TOKEN_BYTES:
        return False
    return pinned is None or hmac.compare_digest(pinned, got)
