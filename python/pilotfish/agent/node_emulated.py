"""Emulated node executors: many nodes' executors in one process, so that the control plane of
a pilot of thousands of nodes runs on one machine (bench/bench_scale.py, tests/agent/
test_node_emulated.py).

Each emulated node is what the agent's node port sees of a real executor (agent/node_executor.py): a
DEALER of its own with its own CURVE key, derived from the step secret for its node's name
(agent/node_keys.py: the secret comes through stdin, as from srun), a token of its own in its
hellos, the same messages (_node_wire.py). What it does not do is run anything: a Spawn is
answered at once with Spawned (a made-up pid per process), and each process "exits" after its
duration -- PILOTFISH_EMULATED_DURATION in its environment (launch/nodes.py puts the task's
`duration` there), else the argument of `sleep SECONDS`, else at once -- with code 0 (1 for
`false`); the exits due together on a node go back in one Exits frame. A Kill ends the
processes it names with that signal. It heartbeats as the agent's nodes.json says (beat_s,
adaptive to the pilot's size: agent/node_link.py), its first beat at a random point of its period
(so beats of nodes started together spread); it fences itself, as a real executor does, when
it has not heard the agent for fence_after_s (it "kills" what runs and refuses spawns until a
Resync), keeps its exits until they are acknowledged, says hello again on a Resync. No
journal, no PMI (a world's ranks are refused), no outputs (none captured).

A local pilot asks for them with launcher_options={"nodes": {"emulate": True}} (agent/node_link.py
wanted(): every declared node is then an emulated node, the agent's own included). The agent
starts them as it starts real ones (NodeLink.start): one step per partition, whose stdin is
the step secret's pipe --

    python -m pilotfish.agent.node_emulated CONFIG.json --procs K NODE... < STEP-SECRET

-- which reads the secret once, then starts K processes of itself (--procs 1 and a share of
the nodes, the secret through their stdin as through its own; each dies with it:
PR_SET_PDEATHSIG), each serving about len(NODE...)/K nodes: ZeroMQ sockets of its own
(MAX_SOCKETS raised to fit), its open-file limit raised to its hard limit (two descriptors
per node: the connection and the socket's mailbox), one epoll over the sockets'
descriptors, timers in heaps (exits due, beats due) -- no per-round scan of every node.
"""

from __future__ import annotations

import errno
import heapq
import logging
import os
import random
import select
import signal
import socket
import sys
import time
from typing import Any

from .. import _node_wire as W

log = logging.getLogger("pilotfish.node")

DURATION_ENV = "PILOTFISH_EMULATED_DURATION"
CHILD_ENV = "PILOTFISH_EMULATED_CHILD"  # one of the K processes of a step
SWEEP_S = 2.0  # every socket's state looked at this often (ZMQ_FD is edge-like: a safety net)
CONNECT_PACE = 500  # sockets connected per round while starting (a listen backlog's worth)


class EmNode:
    """One emulated node's executor."""

    __slots__ = (
        "name",
        "sock",
        "fd",
        "token",
        "running",
        "unacked",
        "last_sent",
        "last_heard",
        "fenced",
        "gone",
        "i",
    )

    def __init__(self, i: int, name: str, sock: Any, fd: int, token: bytes, now: float):
        self.i = i  # its index in Emulator.nodes
        self.name = name
        self.sock = sock
        self.fd = fd
        self.token = token
        self.running: dict[int, int] = {}  # key -> pid
        self.unacked: dict[int, W.ExitRow] = {}
        self.last_sent = now
        self.last_heard = now
        self.fenced = False
        self.gone = False  # stopped by the agent


def duration_of(spec: Any) -> tuple[float, int]:
    """(seconds, exit code) of an emulated process from its spawn spec (module docstring);
    ValueError for a spec that is not one."""
    key, argv, env, _cwd, _out, _err = spec
    if not isinstance(key, int) or key < 0 or not isinstance(argv, (list, tuple)) or not argv:
        raise ValueError("not a spawn spec (key, argv, env, cwd, stdout, stderr)")
    exe = os.path.basename(str(argv[0]))
    code = 1 if exe == "false" else 0
    prefix = DURATION_ENV + "="
    for kv in env or ():
        if isinstance(kv, str) and kv.startswith(prefix):
            return max(0.0, float(kv[len(prefix) :])), code
    if exe == "sleep" and len(argv) > 1:
        return max(0.0, float(argv[1])), code
    return 0.0, code


class Emulator:
    """The emulated executors of one process (module docstring)."""

    def __init__(self, config: W.NodeConfig, secret: bytes, names: list[str]):
        import resource

        import zmq

        from .node_keys import TOKEN_BYTES, derive

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.zmq = zmq
        self.beat_s = config.beat_s
        self.fence_after = config.fence_after_s or None
        self.agent_timeout = config.agent_timeout_s
        self.deadline = config.deadline or None
        self.address = config.address
        with open(config.key_file, "rb") as f:
            self.server_key = f.read().strip()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.ctx = zmq.Context(1)
        self.ctx.set(zmq.MAX_SOCKETS, len(names) + 64)
        self.ep = select.epoll()
        self.nodes: list[EmNode] = []
        self.by_fd: dict[int, EmNode] = {}
        self.pending = [(n, derive(secret, n)) for n in names]  # connected CONNECT_PACE a round
        self.pending.reverse()
        self.token_bytes = TOKEN_BYTES
        self.exits_due: list[tuple[float, int, int, int, int]] = []  # (t, node, key, pid, code)
        self.beats_due: list[tuple[float, int]] = []  # (t, node index)
        self.next_pid = 1000
        self.dirty: set[int] = set()  # nodes whose socket may hold frames after a send
        self.stopping: str | None = None
        self.spawned = self.exited = 0

    # -- connecting ----------------------------------------------------------------------------
    def connect_some(self, now: float) -> None:
        zmq = self.zmq
        for _ in range(min(CONNECT_PACE, len(self.pending))):
            name, (public, secret) = self.pending.pop()
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
            sock.connect(self.address)
            fd = int(sock.getsockopt(zmq.FD))
            i = len(self.nodes)
            node = EmNode(i, name, sock, fd, os.urandom(self.token_bytes), now)
            self.nodes.append(node)
            self.by_fd[fd] = node
            self.ep.register(fd, select.EPOLLIN)
            self.hello(node)
            # the first beat at a random point of the period: beats of nodes started together
            # spread over it
            heapq.heappush(self.beats_due, (now + random.uniform(0.2, 1.0) * self.beat_s, i))

    # -- to the agent --------------------------------------------------------------------------
    def send(self, node: EmNode, msg: Any) -> None:
        try:
            node.sock.send(W.encode(msg), self.zmq.NOBLOCK)
        except self.zmq.ZMQError as e:
            log.warning("node %s: cannot send: %s", node.name, e)
        node.last_sent = time.monotonic()
        self.dirty.add(node.fd)

    def hello(self, node: EmNode) -> None:
        self.send(
            node,
            W.NodeHello(
                node.name,
                self.pid,
                self.host,
                list(node.running),
                list(node.unacked.values()),
                node.token,
            ),
        )

    # -- from the agent ------------------------------------------------------------------------
    def drain(self, node: EmNode) -> None:
        zmq = self.zmq
        sock = node.sock
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            node.last_heard = time.monotonic()
            try:
                msg = W.decode(frame)
            except Exception as e:  # noqa: BLE001 -- a bad frame is dropped, nothing else
                log.warning("node %s: dropped an undecodable frame: %s", node.name, e)
                continue
            self.on_message(node, msg)

    def on_message(self, node: EmNode, msg: Any) -> None:
        if isinstance(msg, W.Spawn):
            self.spawn(node, msg.specs, bool(msg.worlds))
        elif isinstance(msg, W.Kill):
            self.kill(node, msg.keys, msg.signal)
        elif isinstance(msg, W.Ack):
            for k in msg.keys:
                node.unacked.pop(k, None)
        elif isinstance(msg, W.Stop):
            self.kill(node, list(node.running), int(signal.SIGTERM))
            node.gone = True
        elif isinstance(msg, W.Resync):
            node.fenced = False
            self.hello(node)

    def spawn(self, node: EmNode, specs: list, worlds: bool) -> None:
        now = time.monotonic()
        t = time.time()
        results: list[tuple] = []
        for spec in specs:
            key = spec[0] if isinstance(spec, (list, tuple)) and spec else -1
            key = key if isinstance(key, int) and key >= 0 else 0
            if node.fenced:
                why = "its node executor fenced itself (no word from the agent): never started"
                results.append((key, -errno.EHOSTUNREACH, why))
                continue
            if worlds:
                results.append((key, -errno.EINVAL, "an emulated node executor serves no PMI"))
                continue
            try:
                seconds, code = duration_of(spec)
            except (ValueError, TypeError) as e:
                results.append((key, -errno.EINVAL, f"bad spawn spec: {e}"[:300]))
                continue
            self.next_pid = self.next_pid + 1 if self.next_pid < (1 << 30) else 1000
            pid = self.next_pid
            node.running[key] = pid
            heapq.heappush(self.exits_due, (now + seconds, node.i, key, pid, code))
            results.append((key, pid, t))
        self.spawned += len(results)
        self.send(node, W.Spawned(results))

    def kill(self, node: EmNode, keys: list[int], sig: int) -> None:
        rows = []
        t = time.time()
        for k in keys:
            pid = node.running.pop(k, None)
            if pid is None:
                continue
            row = W.ExitRow(k, pid, 0, sig, t, fenced=node.fenced)
            node.unacked[k] = row
            rows.append(row)
        if rows:
            self.exited += len(rows)
            self.send(node, W.Exits(rows))

    # -- time ----------------------------------------------------------------------------------
    def due_exits(self, now: float) -> None:
        """Every exit due by now, one Exits frame per node."""
        heap = self.exits_due
        by: dict[int, list[W.ExitRow]] = {}
        t = time.time()
        while heap and heap[0][0] <= now:
            _, i, key, pid, code = heapq.heappop(heap)
            node = self.nodes[i]
            if node.running.get(key) != pid:
                continue  # killed meanwhile
            del node.running[key]
            row = W.ExitRow(key, pid, code, 0, t)
            node.unacked[key] = row
            by.setdefault(i, []).append(row)
        for i, rows in by.items():
            self.exited += len(rows)
            self.send(self.nodes[i], W.Exits(rows))

    def due_beats(self, now: float) -> None:
        heap = self.beats_due
        while heap and heap[0][0] <= now:
            _, i = heapq.heappop(heap)
            node = self.nodes[i]
            if node.gone:
                continue
            silent = now - node.last_heard
            if self.fence_after is not None and not node.fenced and silent > self.fence_after:
                node.fenced = True
                log.warning("node %s: agent silent for %.1f s: fencing", node.name, silent)
                self.kill(node, list(node.running), int(signal.SIGKILL))
            if silent > self.agent_timeout and now - node.last_sent >= self.beat_s:
                self.hello(node)  # (the agent answers once it is back)
            elif now - node.last_sent >= self.beat_s:
                self.send(node, W.Beat(time.time(), node.fenced))
            heapq.heappush(heap, (node.last_sent + self.beat_s, i))

    def idle_out(self, now: float) -> bool:
        """Time to go: every node stopped, or the agent silent for agent_timeout_s and
        nothing runs, or the pilot's walltime."""
        live = [n for n in self.nodes if not n.gone]
        if not live and not self.pending:
            return True
        if self.deadline is not None and time.time() >= self.deadline:
            return True
        quiet = all(now - n.last_heard > self.agent_timeout and not n.running for n in live)
        return bool(live) and quiet

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        last_sweep = last_idle = time.monotonic()
        while self.stopping is None:
            now = time.monotonic()
            if self.pending:
                self.connect_some(now)
            timeout = 1.0 if not self.pending else 0.02
            for heap in (self.exits_due, self.beats_due):
                if heap:
                    timeout = min(timeout, max(0.0, heap[0][0] - now))
            if self.dirty:
                timeout = 0.0
            try:
                ready = self.ep.poll(timeout)
            except InterruptedError:
                ready = []
            for fd, _ in ready:
                node = self.by_fd.get(fd)
                if node is not None:
                    self.drain(node)
            now = time.monotonic()
            self.due_exits(now)
            self.due_beats(now)
            if now - last_sweep >= SWEEP_S:
                last_sweep = now
                self.dirty.update(self.by_fd)
            while self.dirty:
                dirty, self.dirty = self.dirty, set()
                for fd in dirty:
                    self.drain(self.by_fd[fd])
            if now - last_idle >= 1.0:
                last_idle = now
                if self.idle_out(now):
                    break
        return self.close()

    def close(self) -> int:
        for node in self.nodes:
            if node.running and not node.gone:
                self.kill(node, list(node.running), int(signal.SIGTERM))
        for node in self.nodes:
            node.sock.close(200 if node.unacked else 0)
        self.ctx.term()
        log.info(
            "%d emulated nodes: %d processes spawned, %d ended",
            len(self.nodes),
            self.spawned,
            self.exited,
        )
        return 0


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def _serve(config: W.NodeConfig, secret: bytes, names: list[str]) -> int:
    from .._inert import open_log
    from .._util import open_private

    d = os.path.join(config.sandbox, "nodes")
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd = open_private(os.path.join(d, f"emulated.{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT)
    open_log(fd)
    em = Emulator(config, secret, names)
    signal.signal(signal.SIGTERM, lambda *_: setattr(em, "stopping", "terminated by signal"))
    log.info("emulating %d nodes (%s ... %s)", len(names), names[0], names[-1])
    return em.run()


def main(argv: list[str] | None = None) -> int:
    from .node_keys import conceal, read_step, step_pipe

    conceal()  # first: before it holds anything (node_keys.py)
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m pilotfish.agent.node_emulated CONFIG.json --procs K NODE... < SECRET"
    if len(argv) < 4 or argv[1] != "--procs" or not argv[2].isdigit() or int(argv[2]) < 1:
        print(usage, file=sys.stderr)
        return 2
    names = argv[3:]
    procs = min(int(argv[2]), len(names))
    try:
        secret = read_step()
    except (ValueError, TimeoutError) as e:
        print(f"emulated node executors: {e}", file=sys.stderr)
        return 2
    os.umask(0o077)
    try:
        config = W.read_node_config(argv[0])
    except ValueError as e:
        print(f"emulated node executors: {e}", file=sys.stderr)
        return 2
    if procs == 1:
        if os.environ.get(CHILD_ENV):
            _die_with_parent()  # (a process of K: its parent is the step's, alive while it is)
        return _serve(config, secret, names)
    import subprocess

    children = []
    for i in range(procs):  # each its share, the secret through its stdin as through ours
        fd = step_pipe(secret)
        try:
            cmd = [sys.executable, "-m", "pilotfish.agent.node_emulated", argv[0], "--procs", "1"]
            env = dict(os.environ, **{CHILD_ENV: "1"})
            children.append(subprocess.Popen([*cmd, *names[i::procs]], stdin=fd, env=env))
        finally:
            os.close(fd)
    del secret
    signal.signal(signal.SIGTERM, lambda *_: _terminate(children))
    return max(abs(c.wait()) for c in children)


def _terminate(children: list) -> None:
    for c in children:
        if c.poll() is None:
            c.terminate()


if __name__ == "__main__":
    sys.exit(main())
