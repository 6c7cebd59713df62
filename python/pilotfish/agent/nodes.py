"""The agent's side of its node executors (node.py): the link the launch method `nodes`
(launch/nodes.py) starts them through and sends their spawns over.

A pilot whose nodes are other hosts (a batch pilot: its default launcher is not `direct`)
starts one node executor per other node, once, in one step of the batch system's launcher
(`srun --ntasks-per-node=1`), per partition (grown units are partitions too). Single-node tasks
that name no launcher then run through them (table.py routes them to the method `nodes`):
spawn specs go to the node's executor in one frame per loop round, exits come back in
batches -- no launcher process per task, none on this host at all. Tasks on the agent's own
node are spawned by its own core, as `direct` would. Multi-node tasks keep the partition's
launcher (srun, mpiexec, prrte). NodeLink implements launch.nodes.NodeStarter.

NodeLink owns the ROUTER the executors connect to (CURVE; its server key in a 0600 file of
the sandbox: an executor started with another key fails the handshake, and is counted), and
knows which node is up. A node whose executor stops heartbeating (or never starts) is *lost*:
an event names it and why, its running processes end as failures with "node nK lost: why"
(TaskRunner gives them to the table: they FAIL, or run again elsewhere with retries), and its
free resources are fenced off in the placer so that nothing more is placed there.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Callable

from .. import _events as E
from .. import _node_wire as W
from .._door import Door, joined
from .._util import write_private

log = logging.getLogger("pilotfish.agent")

FENCE_KEY0 = 1 << 50  # placer keys of fences on lost nodes (apart from tasks' and processes')


class Node:
    __slots__ = ("name", "pid", "host", "up", "lost", "last_heard", "last_sent", "keys",
                 "expected_by", "starter")

    def __init__(self, name: str, expected_by: float, starter: Any):
        self.name = name
        self.pid = 0
        self.host = ""
        self.up = False
        self.lost: str | None = None
        self.last_heard = 0.0
        self.last_sent = 0.0
        self.keys: set[int] = set()  # its running processes' spawn keys
        self.expected_by = expected_by  # its executor must have said hello by then
        self.starter = starter  # the NodeExecutors method that started it


class NodeLink:
    """The node executors of one agent: their socket, their nodes' state, what they sent."""

    def __init__(self, ctx: Any, sandbox: str, clock: Any, events: Any, uid: str,
                 partitions: list, deadline_epoch: float, beat_s: float = 1.0,
                 lost_after_s: float = 10.0):
        import zmq

        from .._sockets import bind_tcp, curve_router

        self.zmq = zmq
        self.sandbox = sandbox
        self.clock = clock
        self.events = events
        self.uid = uid
        self.partitions = partitions  # the agent's list (grown units join it)
        self.key_file = os.path.join(sandbox, "nodes.key")
        self.sock, _ = curve_router(ctx, self.key_file, "nodes")
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.address = bind_tcp(self.sock)
        # what a stranger may hold of this port before its handshake (_door.py); its refusals
        # reach the events as one summary per interval (tick)
        self.door = Door(self.sock, "node executor port")
        self.fds = (self.sock,)  # what the agent's poller watches
        self.beat_s = beat_s
        self.lost_after_s = lost_after_s
        self.deadline_epoch = deadline_epoch
        self.nodes: dict[str, Node] = {}
        self.gone: set[str] = set()  # nodes whose executors were stopped (a drained unit)
        self.owner: dict[int, str] = {}  # running spawn key -> node
        # what the executors sent, until TaskRunner takes it
        self.spawned: list[tuple] = []  # (key, pid, info)
        self.exits: list[tuple] = []  # (key, pid, code, sig, t_exit, ut, st, rss, reason)
        self.outputs: dict[int, tuple[str | None, str | None]] = {}
        self._acks: dict[str, list[int]] = {}
        self._fences = 0
        self.config_path = os.path.join(sandbox, "nodes.json")
        write_private(self.config_path, json.dumps({
            "pilot": uid, "sandbox": sandbox, "address": self.address,
            "key_file": self.key_file, "beat_s": beat_s,
            "agent_timeout_s": max(60.0, 6 * lost_after_s),
            "deadline": deadline_epoch}).encode())

    # -- starting ------------------------------------------------------------------------------
    def start(self, names: list[str], spawn: Callable, starter: Any, options: dict) -> None:
        """One step of the batch system's launcher: an executor on each of these nodes."""
        names = [n for n in names if n not in self.nodes or self.nodes[n].lost]
        if not names:
            return
        timeout = float(options.get("start_timeout", 60.0))
        now = self.clock.real_mono()
        for n in names:
            self.nodes[n] = Node(n, now + timeout, starter)
        srun = str(options.get("srun") or "srun")
        argv = [srun]
        jobid = options.get("jobid") or os.environ.get("SLURM_JOB_ID")
        if jobid:
            argv.append(f"--jobid={jobid}")
        argv += ["--overlap", f"--nodes={len(names)}", f"--ntasks={len(names)}",
                 "--ntasks-per-node=1", f"--nodelist={','.join(names)}", "--cpus-per-task=1",
                 "--kill-on-bad-exit=0", "--no-kill", "--mpi=none",  # a dead node: not the step
                 str(options.get("python") or sys.executable), "-m", "pilotfish.agent.node",
                 self.config_path]
        self.events.record(self.uid, E.NODES_START, f"{len(names)} {','.join(names[:8])}")
        spawn(argv, {"SLURM_OVERLAP": "1"})

    def waiting(self, starter: Any) -> list[Node]:
        return [n for n in self.nodes.values()
                if n.starter is starter and not n.up and n.lost is None]

    # -- the socket ----------------------------------------------------------------------------
    def on_readable(self) -> None:
        zmq = self.zmq
        sock = self.sock
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) < 2:  # not an identity and a payload: dropped
                continue
            ident, frame = frames[0], joined(frames, 1)  # (split by the sender: _door.py)
            name = ident.decode(errors="replace")
            node = self.nodes.get(name)
            if node is None and name in self.gone:
                continue
            if node is None:
                log.warning("a node executor for %r, which is not a node of this pilot", name)
                self.events.record(self.uid, E.BAD_FRAME, f"unknown node {name[:40]!r}")
                continue
            try:
                msg = W.decode(frame)
            except Exception as e:  # noqa: BLE001 -- a frame that does not decode is dropped
                log.warning("dropped an undecodable frame from %s: %s", name, e)
                self.events.record(self.uid, E.BAD_FRAME, f"node {name}: {str(e)[:200]}")
                continue
            if node.lost is not None:
                continue  # what a lost node says comes too late: its tasks are decided
            node.last_heard = self.clock.real_mono()
            if isinstance(msg, W.Exits):
                self._exits(node, msg.exits)
            elif isinstance(msg, W.Spawned):
                for key, pid, info in msg.results:
                    if pid <= 0:
                        node.keys.discard(key)
                        self.owner.pop(key, None)
                    self.spawned.append((key, pid, info if pid > 0 else f"{info} (on {name})"))
            elif isinstance(msg, W.NodeHello):
                first = not node.up
                node.up, node.pid, node.host = True, msg.pid, msg.host
                if first:
                    self.events.record(self.uid, E.NODE_UP, f"{name} {msg.host} {msg.pid}")
                if msg.exits:
                    self._exits(node, msg.exits)

    def _exits(self, node: Node, rows: list) -> None:
        acks = self._acks.setdefault(node.name, [])
        for r in rows:
            key = r[0]
            acks.append(key)
            if key not in node.keys:
                continue  # already known (a resent exit)
            node.keys.discard(key)
            self.owner.pop(key, None)
            self.exits.append(tuple(r[:8]) + (None,))
            if r[8] is not None or r[9] is not None:
                self.outputs[key] = (r[8], r[9])

    # -- to the executors ----------------------------------------------------------------------
    def spawn(self, name: str, specs: list[tuple]) -> str | None:
        """Send these spawn specs to the node's executor; why not (None: sent)."""
        node = self.nodes.get(name)
        if node is None or node.lost is not None or not node.up:
            return f"node {name} lost: {node.lost}" if node is not None and node.lost else \
                f"no node executor on {name}"
        for s in specs:
            node.keys.add(s[0])
            self.owner[s[0]] = name
        self._send(node, W.Spawn(specs))
        return None

    def kill(self, keys: list[int], sig: int) -> None:
        by: dict[str, list[int]] = {}
        for k in keys:
            n = self.owner.get(k)
            if n is not None:
                by.setdefault(n, []).append(k)
        for n, ks in by.items():
            node = self.nodes.get(n)
            if node is not None and node.up and node.lost is None:
                self._send(node, W.Kill(ks, int(sig)))

    def kill_marked(self, uids_by_node: dict[str, set[str]]) -> None:
        """Tasks stopped for good: their nodes' executors kill what they left behind."""
        for name, uids in uids_by_node.items():
            node = self.nodes.get(name)
            if node is not None and node.up and node.lost is None:
                self._send(node, W.Kill([], 9, sorted(uids)))

    def _send(self, node: Node, msg: Any) -> None:
        try:
            self.sock.send_multipart([node.name.encode(), W.encode(msg)], self.zmq.NOBLOCK)
        except self.zmq.ZMQError as e:  # gone for now (ROUTER_MANDATORY off: dropped silently)
            log.warning("cannot send to node %s: %s", node.name, e)
        node.last_sent = self.clock.real_mono()

    # -- time ----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Acknowledge exits, heartbeat, find lost nodes, keep lost nodes fenced; what the
        door refused, summed up."""
        now = self.clock.real_mono()
        refused = self.door.take_summary()
        if refused:
            self.events.record(self.uid, E.REFUSED, refused)
        for name, keys in self._acks.items():
            node = self.nodes.get(name)
            if keys and node is not None and node.lost is None:
                self._send(node, W.Ack(keys))
        self._acks.clear()
        for node in self.nodes.values():
            if node.lost is not None:
                continue
            if not node.up:
                if now > node.expected_by:
                    self.lose(node, "its node executor did not start in time"
                              + self._stderr_tail())
                continue
            silent = now - node.last_heard
            if silent > self.lost_after_s:
                self.lose(node, f"no heartbeat for {silent:.0f} s")
            elif now - node.last_sent >= self.beat_s:
                self._send(node, W.Beat(self.clock.now()))
        if any(n.lost for n in self.nodes.values()):
            self._fence()

    def aux_exited(self, code: int, sig: int) -> None:
        """The launcher step that started executors ended: those not up will never be."""
        tail = self._stderr_tail()
        for node in self.nodes.values():
            if not node.up and node.lost is None:
                self.lose(node, f"its node executor's launcher ended (code {code}, signal "
                                f"{sig}) before it started{tail}")

    def _stderr_tail(self) -> str:
        import glob

        text = ""
        for path in sorted(glob.glob(os.path.join(glob.escape(self.sandbox), "nodes.p*.err"))):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.path.getsize(path) - 400))
                    text += f.read().decode(errors="replace").strip()
            except OSError:
                pass
        return f"; launcher stderr: {text[-300:]}" if text else ""

    def lose(self, node: Node, why: str) -> None:
        node.lost = why
        node.up = False
        reason = f"node {node.name} lost: {why}"
        log.warning("%s", reason)
        self.events.record(self.uid, E.NODE_LOST, f"{node.name} {why}"[:500])
        t = self.clock.now()
        for key in sorted(node.keys):
            self.owner.pop(key, None)
            self.exits.append((key, 0, 255, 0, t, 0.0, 0.0, 0, reason))
        node.keys.clear()
        self._fence()

    def _fence(self) -> None:
        """Hold whatever is free on lost nodes, so that the placer never uses them again."""
        lost = {n.name for n in self.nodes.values() if n.lost is not None}
        for p in self.partitions:
            for i, name in enumerate(p.names):
                if name not in lost:
                    continue
                cores, gpus, mem = p.placer.free(i)
                if cores <= 0 and gpus <= 0:
                    continue
                self._fences += 1
                p.placer.place_batch([FENCE_KEY0 + self._fences], [1], [cores], [gpus],
                                     [mem], node_hint=[i])

    def take(self) -> tuple[list[tuple], list[tuple]]:
        """(spawn results, exits) sent since the last call."""
        s, e = self.spawned, self.exits
        self.spawned, self.exits = [], []
        return s, e

    def stop(self, reason: str, starter: Any = None) -> None:
        """Stop the executors this starter started (None: all); they leave the pilot (what
        they still send is not needed: their tasks were stopped before)."""
        for node in list(self.nodes.values()):
            if starter is not None and node.starter is not starter:
                continue
            if node.up and node.lost is None:
                self._send(node, W.Stop(reason))
            self.gone.add(node.name)
            del self.nodes[node.name]

    def close(self) -> None:
        self.door.close()
        self.sock.close(0)


def wanted(desc: dict, resource: str) -> bool:
    """Does this pilot run its single-node tasks through node executors? On a batch pilot
    whose nodes are other hosts (Slurm, whose srun starts them), unless the description or
    PILOTFISH_NODE_EXECUTORS=0 turns them off; on a simulated pilot only when asked
    (node_executors=True: the launch model's "nodes")."""
    opt = desc.get("node_executors")
    env = os.environ.get("PILOTFISH_NODE_EXECUTORS")
    if env is not None and env.strip() in ("0", "false", "no", "off"):
        return False
    if opt is False:
        return False
    if resource == "simulated":
        return opt is True
    # (a Slurm pilot all on this host may still grow onto others)
    return resource == "slurm"

