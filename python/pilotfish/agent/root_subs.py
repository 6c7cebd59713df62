"""The root's sub-agent processes (root.py): each one's folder, keys, link and life.

A sub-agent (subagent.py) is started by its root on the root's node (the pilot's first node)
as `python -m pilotfish.agent --subagent <pilot>/sub/p<i>/agent.json`: the agent over one
partition, its folder 0700, its configuration 0600 (it holds its secret key). It dies with its
root (PR_SET_PDEATHSIG: SIGTERM, so it drains as for a batch system's end).

The link: one CURVE ROUTER per sub-agent, bound to an abstract ipc socket of this host,
hardened before it binds (_door.harden). The root's ZAP handler (Zap) lets a connection in
only with the key pair the root made for that sub-agent, and only on that sub-agent's ROUTER
(its ZAP domain "p<i>"): nobody else speaks as a sub-agent, a sub-agent as another, nor
anyone as a sub-agent to the client (the client's own link takes only the pilot's key, which
stays with the root). Each frame is checked against the User-Id its handshake proved.

Its end: its process (a pidfd, polled) ended or it fell silent for its client timeout (it is
killed). Either way what it left -- its tasks' processes on this host and its launcher
steps (the node executors' srun, whose end takes the executors and their tasks with it) --
is killed by the sandbox mark they carry (containment.kill_marked), and its journal says which
of its tasks ended (their finals reach the client) and which started (root.py decides them).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Any

import zmq
from zmq.utils import z85

from .. import _wire
from .._door import MAX_FRAME, harden, joined
from .._journal import agent_finals, spawn_records
from .._util import open_private, private_dir, write_private
from .containment import kill_marked
from .routing import Share
from .subagent import SubAgentConfig, encode_subagent_config

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # (in the child, before exec)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def describe_status(status: int) -> str:
    """An exit status (os.waitpid's) in words."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exit code {os.WEXITSTATUS(status)}"


class Zap:
    """ZAP (RFC 27) for the root's ROUTERs: a key is let in on its own sub-agent's ROUTER
    only (domain "p<i>"); the User-Id it gets is that domain."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("inproc://zeromq.zap.01")
        self.keys: dict[bytes, bytes] = {}  # public key (32 bytes) -> its domain
        self.refused = 0

    def answer(self) -> None:
        while True:
            try:
                msg = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            version, request_id, domain, _address, _identity, mechanism = msg[:6]
            ok = mechanism == b"CURVE" and len(msg) > 6 and self.keys.get(msg[6]) == domain
            if not ok:
                self.refused += 1
            self.sock.send_multipart(
                [
                    version,
                    request_id,
                    b"200" if ok else b"400",
                    b"OK" if ok else b"no",
                    domain if ok else b"",
                    b"",
                ]
            )

    def close(self) -> None:
        self.sock.close(0)


class SubAgent:
    """One sub-agent: its share of the pilot (routing.Share), folder, link and process."""

    def __init__(self, share: Share, folder: str) -> None:
        self.share = share
        self.dir = folder
        self.sock: Any = None
        self.proc: subprocess.Popen | None = None
        self.pidfd = -1
        self.key = b""  # its public key (32 bytes)
        self.address = ""
        self._server_secret = b""
        self.status: int | None = None  # its exit status, once reaped
        self.ident = b""
        self.domain = f"p{share.index}".encode()
        self.up = False  # it said hello
        self.ended: str | None = None  # why it is gone (its bye, its exit, its silence)
        self.silent: str | None = None  # why the root killed it (silence, no hello, no end)
        self.bye: _wire.Bye | None = None
        self.last_heard = self.last_sent = time.monotonic()
        self.dropped = 0  # frames whose proven sender was not this sub-agent
        self.outbox: list = []  # frames for it (bytes), and runs of tasks ([specs, frame])

    @property
    def index(self) -> int:
        return self.share.index

    def start(self, config: _wire.AgentConfig, tasks_dir: str) -> None:
        """Its folder, keys, address and configuration; then its process -- before the
        root has a ZeroMQ context: nothing but this thread runs when it forks (bind() then
        makes its ROUTER, which its link reaches once bound)."""
        private_dir(os.path.dirname(self.dir))
        private_dir(self.dir)
        server_pub, self._server_secret = zmq.curve_keypair()
        pub, sec = zmq.curve_keypair()
        self.key = z85.decode(pub)
        self.address = f"ipc://@pilotfish-root-{os.getpid()}-{self.index}-{os.urandom(8).hex()}"
        self.ident = config.pilot_uid.encode()  # (a sub-agent's link: client_link's routing id)
        sub = SubAgentConfig(
            pilot_uid=config.pilot_uid,
            session_uid=config.session_uid,
            session_path=config.session_path,
            sandbox=self.dir,
            address=self.address,
            description=config.description,
            profile=config.profile,
            heartbeat_s=config.heartbeat_s,
            client_timeout=config.client_timeout,
            journal=config.journal,
            curve=_wire.Curve(server_pub.decode(), pub.decode(), sec.decode()),
            partition=self.index,
            tasks_dir=tasks_dir,
        )
        cfg = os.path.join(self.dir, "agent.json")
        write_private(cfg, encode_subagent_config(sub))
        out = open_private(
            os.path.join(self.dir, "agent.out"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pilotfish.agent", "--subagent", cfg],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                close_fds=True,
                preexec_fn=_die_with_parent,  # (no thread yet: see above)
            )
        finally:
            os.close(out)
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.last_heard = time.monotonic()

    def bind(self, ctx: zmq.Context, zap: Zap) -> None:
        """Its ROUTER: CURVE, its key alone let in (zap), hardened, bound to its address."""
        zap.keys[self.key] = self.domain
        sock = ctx.socket(zmq.ROUTER)
        harden(sock, MAX_FRAME)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._server_secret)
        sock.setsockopt(zmq.ZAP_DOMAIN, self.domain)
        sock.bind(self.address)
        self.sock = sock

    def recv(self) -> list[bytes]:
        """The payloads waiting from it (frames another key proved are dropped, counted)."""
        out = []
        sock = self.sock
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if len(frames) < 2:
                continue
            if frames[1].get("User-Id") != self.domain.decode():
                self.dropped += 1
                continue
            out.append(joined(frames, 1))
        if out:
            self.last_heard = time.monotonic()
        return out

    def post(self, payload: bytes) -> None:
        """A frame for it, sent in order with the rest at the round's end (flush)."""
        self.outbox.append(payload)

    def submit(self, specs: list, frame: bytes | None) -> None:
        """Tasks for it: one Submit of them all per run of them in its outbox (the frame
        they came in, when they are one whole frame); ordered with its other frames."""
        box = self.outbox
        if box and isinstance(box[-1], list):
            box[-1][0].extend(specs)
            box[-1][1] = None
        else:
            box.append([list(specs), frame])

    def flush(self) -> int:
        """Send what its outbox holds; how many tasks could not be sent (it is gone)."""
        box, self.outbox = self.outbox, []
        lost = 0
        for item in box:
            if isinstance(item, list):
                payload = item[1] or _wire.encode(_wire.Submit(item[0]))
            else:
                payload = item
            try:
                self.sock.send_multipart([self.ident, payload])
            except zmq.ZMQError:
                lost += len(item[0]) if isinstance(item, list) else 0
        if box:
            self.last_sent = time.monotonic()
        return lost

    def reaped(self, status: int) -> None:
        """Its process ended with this status (reap_children found it)."""
        self.status = status
        if self.proc is not None:  # (so that Popen does not wait for it again)
            self.proc.returncode = (
                -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            )

    def exited(self) -> str | None:
        """Why its process ended (it did), else None."""
        if self.proc is None:
            return "never started"
        return None if self.status is None else describe_status(self.status)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.status is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def leftovers(self) -> int:
        """Kill what it left on this host (its tasks, its launcher steps); how many."""
        return kill_marked(self.dir)

    def journal(self) -> tuple[dict[str, list], set[str]]:
        """(finals it journaled or its exits prove, the uids it spawned)."""
        try:
            finals = agent_finals(self.dir)
            _, spawned = spawn_records(self.dir)
        except (OSError, ValueError):
            return {}, set()
        return finals, set(spawned)

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self.sock is not None:
            self.sock.close(0)


def reap_children(subs: dict[int, SubAgent]) -> None:
    """Reap every child that ended (the root is a subreaper: a dead sub-agent's orphans
    become its children); a sub-agent's status goes to it (subs: pid -> sub-agent)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sub = subs.get(pid)
        if sub is not None:
            sub.reaped(status)
