"""The agent's side of its node executors (node_executor.py): the link the launch method `nodes`
(launch/nodes.py) starts them through and sends their spawns over.

A pilot whose nodes are other hosts (a batch pilot: its default launcher is not `direct`)
starts one node executor per other node, once, in one step of the batch system's launcher
(`srun --ntasks-per-node=1`), per partition (grown units are partitions too). Single-node tasks
that name no launcher then run through them (table.py routes them to the method `nodes`):
spawn specs go to the node's executor in one frame per loop round, exits come back in
batches -- no launcher process per task, none on this host at all. Tasks on the agent's own
node are spawned by its own core, as `direct` would. Multi-node tasks keep the partition's
launcher (srun, mpiexec, prrte). NodeLink implements launch.nodes.NodeStarter.

NodeLink owns the ROUTER the executors connect to, and knows which node is up. A node is who
its key says it is (node_keys.py): each executor proves itself with its own CURVE key, derived
from a step secret that reaches it through its launcher step's stdin and no file; the port's
ZAP handler refuses every other key at the handshake, and a node's key while that node is
connected (counted, one REFUSED event per node per second at most); a frame's node is the one
its connection proved, and the agent answers a node on one connection only, its route (the
one its hello came over; a later one only with its executor's token). The server key
(`nodes.key`, 0600) lets a peer check the agent, not speak as a node. Every frame is typed
to the last field (_node_wire.py): one of any other shape is dropped, counted (bad_frames) and
logged -- one BAD_FRAME event per node per second at most -- and the agent goes on; a node's
frame about a process that is not its own touches nothing.

A node whose executor stops heartbeating for lost_after_s (or never starts) is *lost*: nothing
more is placed there, and its running tasks are held until their end is known -- its rejoin or
its verdict, exactly once (node_lost.py says how).

At scale (issue 48): the door's caps and the port's listen queue grow with the pilot's nodes,
so a machine's worth of executors connecting at once is let in, never shut (_door.py); the
heartbeat period grows with the nodes too (beat_period: at most BEATS_PER_S heartbeats a second
each way, all nodes together; lost_after_s at least LOST_BEATS periods; what nodes.json tells
the executors), and each node's next deadline (its start, its beat, its silence, its verdict)
sits in a heap: a tick looks at the nodes due, never at every node. The executors can be
emulated (node_emulated.py: a local pilot's, many per process) to run this control plane of
thousands of nodes on one machine.
"""

from __future__ import annotations

import heapq
import logging
import os
from typing import Any, Callable

import msgspec

from .. import _events as E
from .. import _node_wire as W
from .._door import PER_PEER, TOTAL, Door, joined
from .._util import write_private
from ..launch.nodes import executor_step
from . import node_keys
from .node_keys import NodeKeys, conceal
from .node_lost import LostNodes
from .node_verdict import NEVER_STARTED, Ended, Node

log = logging.getLogger("pilotfish.agent")

BAD_EVENT_S = 1.0  # at most one BAD_FRAME (or REFUSED) event per node per second
BEATS_PER_S = 1000  # heartbeats an agent sends (and is sent) a second, all its nodes together
LOST_BEATS = 3  # a node is lost after no fewer heartbeat periods of silence than this
# exits are acknowledged at most this often, all a node's since in one frame (an executor keeps
# an exit until then: a second's worth more, resent only in a hello)
ACK_S = 0.5


def beat_period(nodes: int, beat_s: float, lost_after_s: float) -> tuple[float, float]:
    """(heartbeat period, lost_after_s) for an agent of that many nodes: the period asked for,
    or longer so that the nodes' beats come to at most BEATS_PER_S a second; lost after at
    least LOST_BEATS periods of silence."""
    beat = max(beat_s, nodes / BEATS_PER_S)
    return beat, max(lost_after_s, LOST_BEATS * beat)


class NodeLink(LostNodes):
    """The node executors of one agent: their socket, their nodes' state, what they sent."""

    def __init__(
        self,
        ctx: Any,
        sandbox: str,
        clock: Any,
        events: Any,
        uid: str,
        partitions: list,
        deadline_epoch: float,
        beat_s: float = W.BEAT_S,
        lost_after_s: float = W.LOST_AFTER_S,
    ):
        import zmq

        from .._sockets import bind_tcp, curve_router

        self.zmq = zmq
        self.sandbox = sandbox
        self.clock = clock
        self.events = events
        self.uid = uid
        self.partitions = partitions  # the agent's list (grown units join it)
        conceal()  # no process of the owner's reads this one's memory (node_keys.py)
        # the port has a context of its own (not the agent's, ctx): its ZAP handler answers
        # every CURVE server of its context, and it answers this port alone
        self.ctx = zmq.Context(1)
        self.keys = NodeKeys(self.ctx)
        self.step_stdin: int | None = None  # while start() starts a step: its secret's pipe
        self.key_file = os.path.join(sandbox, "nodes.key")
        self.sock, _ = curve_router(self.ctx, self.key_file, "nodes", handover=False)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        n = sum(len(p.names) for p in partitions)  # (all may connect at once: a queue for all)
        self.sock.setsockopt(zmq.BACKLOG, max(100, n))  # (the kernel caps it: somaxconn)
        self.address = bind_tcp(self.sock)
        # what a stranger may hold of this port before its handshake (_door.py), caps grown
        # with the nodes (_scale); its refusals reach the events summed up (tick)
        self.door = Door(self.sock, "node executor port")
        self.fds = (self.sock, self.keys.zap)  # what the agent's poller watches
        self.routes: dict[bytes, tuple[str, int]] = {}  # routing id -> (node, step): ZAP's
        self.second = 0  # a second connection as a connected node: refused (handshakes, frames)
        self.asked = (beat_s, lost_after_s)  # (as the description says: _scale adapts them)
        self.beat_s, self.lost_after_s = beat_s, lost_after_s
        # the executor kills its tasks after fence_after_s without the agent (3 x: an agent
        # slow for 2 x lost_after_s costs no task); the agent gives a silent lost node's tasks
        # their verdict verdict_after_s after the loss: by then the executor, if it runs,
        # fenced at least 2 x lost_after_s before (node_lost.py)
        self.fence_after_s = 3.0 * lost_after_s
        self.verdict_after_s = 5.0 * lost_after_s
        self.deadline_epoch = deadline_epoch
        self._scaled = 0  # the most nodes scaled for (_scale)
        self._due: list[tuple[float, int, Node]] = []  # (when, seq, node): its next deadline
        self._seq = 0
        self._unheard: dict[int, set[str]] = {}  # id(starter) -> its nodes not up, not lost
        self.lost_names: set[str] = set()
        self._where_shape: list = []
        self._where_at: dict[str, list[tuple[Any, int]]] = {}
        self.bad_frames = 0  # frames dropped as malformed
        self.late = 0  # exits of tasks decided while their node was lost (all nodes)
        self._bad_at: dict[str, float] = {}  # node (or "?") -> last BAD_FRAME event
        self._bad_since: dict[str, int] = {}  # ... frames dropped since, unreported
        self.nodes: dict[str, Node] = {}
        self.owner: dict[int, str] = {}  # running spawn key -> node
        # what the executors sent, until TaskRunner takes it
        self.spawned: list[tuple] = []  # (key, pid, info)
        self.exits: list[Ended] = []
        self.outputs: dict[int, tuple[str | None, str | None]] = {}
        self._acks: dict[str, list[int]] = {}  # node -> exits to acknowledge
        self._acked = 0.0  # when acknowledgments last went out (tick)
        self._fences = 0
        # MPI tasks' PMI worlds (agent/pmi/worlds.PmiWorlds): told of fences and failures the
        # executors' PMI servers report, and of a lost node
        self.pmi: Any = None
        self.config_path = os.path.join(sandbox, "nodes.json")
        self._scale(n, write=True)

    def _write_config(self) -> None:
        """nodes.json: what an executor needs (where, the server key, its heartbeat)."""
        config = W.NodeConfig(
            pilot=self.uid,
            sandbox=self.sandbox,
            address=self.address,
            key_file=self.key_file,
            beat_s=self.beat_s,
            fence_after_s=self.fence_after_s,
            agent_timeout_s=max(W.AGENT_TIMEOUT_S, 6 * self.lost_after_s),
            deadline=self.deadline_epoch,
        )
        write_private(self.config_path, msgspec.json.encode(config))

    def _scale(self, n: int, write: bool = False) -> None:
        """Caps, descriptors and heartbeats for n nodes' executors: the door's pending caps
        grow by n (so a pilot's own executors connecting at once are never shut, _door.py);
        this process's open-file limit is raised towards its hard limit to hold them and as
        many pending strangers; the heartbeat period and the times derived from it follow
        beat_period (written to nodes.json for the executors started from now on)."""
        import resource

        n = self._scaled = max(n, self._scaled)  # (never shorter: an executor's beat is)
        beat, lost = beat_period(n, *self.asked)
        if (beat, lost) != (self.beat_s, self.lost_after_s) or write:
            self.beat_s, self.lost_after_s = beat, lost
            self.fence_after_s, self.verdict_after_s = 3.0 * lost, 5.0 * lost
            self._write_config()
        self.door.scale(PER_PEER + n, TOTAL + n)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 2 * n + 1024
        if soft != resource.RLIM_INFINITY and soft < want:
            top = want if hard == resource.RLIM_INFINITY else min(hard, want)
            if top > soft:
                resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))

    # -- starting ------------------------------------------------------------------------------
    def start(self, names: list[str], spawn: Callable, starter: Any, options: dict) -> None:
        """One step of the batch system's launcher: an executor on each of these nodes."""
        names = [n for n in names if n not in self.nodes or self.nodes[n].lost]
        if not names:
            return
        self._scale(len(set(self.nodes) | set(names)))
        argv, env = executor_step(names, options, self.config_path)  # (launch/nodes.py)
        secret = self.expect(names, starter, float(options.get("start_timeout", W.START_TIMEOUT_S)))
        self.events.record(self.uid, E.NODES_START, f"{len(names)} {','.join(names[:8])}")
        self.step_stdin = node_keys.step_pipe(secret)  # (NodeRunner.spawn_aux passes it on)
        try:
            spawn(argv, env)
        finally:
            os.close(self.step_stdin)
            self.step_stdin = None

    def expect(self, names: list[str], starter: Any = None, timeout: float = 60.0) -> bytes:
        """Executors of these nodes are about to start: a Node each (whose executor must say
        hello within timeout), and the secret of their step (node_keys.py)."""
        now = self.clock.real_mono()
        secret, step = self.keys.new_step(names)
        unheard = self._unheard.setdefault(id(starter), set())
        for n in names:
            old = self.nodes.get(n)
            if old is not None:
                self._unheard_done(old)
                self.lost_names.discard(n)
                if old.keys:
                    self._verdict(old)  # (a new executor knows nothing of the old one's tasks)
            node = self.nodes[n] = Node(n, now + timeout, starter, step)
            unheard.add(n)
            self._arm(node, node.expected_by)
        return secret

    def waiting(self, starter: Any) -> list[str]:
        """The nodes this starter started whose executors have not said hello yet (nor
        were lost)."""
        return list(self._unheard.get(id(starter), ()))

    def _unheard_done(self, node: Node) -> None:
        """Its executor said hello, or it was lost (or replaced): not waited for."""
        unheard = self._unheard.get(id(node.starter))
        if unheard is not None:
            unheard.discard(node.name)

    # -- the socket ----------------------------------------------------------------------------
    def on_readable(self) -> None:
        for name in self.keys.serve(self._connected):  # (ZAP: the handshakes waiting)
            self._refused(name, "a second connection")
        zmq = self.zmq
        sock = self.sock
        recv, getsockopt, routes, nodes = sock.recv, sock.getsockopt, self.routes, self.nodes
        NOBLOCK, RCVMORE, Again = zmq.NOBLOCK, zmq.RCVMORE, zmq.Again
        while True:  # (per frame, heartbeats included: as few calls as it takes)
            try:
                route = recv(NOBLOCK)  # (bytes: a known route's frames need no more)
            except Again:
                return
            if not getsockopt(RCVMORE):
                continue
            got = routes.get(route)
            if got is None:  # a new connection: the node its key proved (ZAP's User-Id)
                frames = sock.recv_multipart(0, copy=False)  # (the rest of this message)
                try:
                    step, _, name = frames[0].get("User-Id").partition(" ")
                except zmq.ZMQError:  # (none: every connection passes ZAP, bound first)
                    continue
                got = routes[route] = (name, int(step))
                payload = joined(frames, 0)
            else:
                payload = recv(0)  # (one frame, unless send_split split it: the rest)
                if getsockopt(RCVMORE):
                    payload = joined([payload, *sock.recv_multipart(0)], 0)
            node = nodes.get(got[0])
            if node is None or node.step != got[1]:
                continue  # a node whose executor was stopped, or replaced: not heard
            try:
                msg = W.decode(payload)
            except Exception as e:  # noqa: BLE001 -- a frame that does not decode is dropped
                self._bad(node, str(e))
                continue
            if route != node.route and not self._adopt(node, route, msg):
                continue
            try:
                self._on_message(node, msg)
            except Exception as e:  # a well-formed frame we cannot take: dropped alone
                log.exception("node %s: a frame failed", node.name)
                self._bad(node, f"{type(e).__name__}: {e}")

    def _connected(self, name: str) -> bool:
        """Is this node's executor connected (a route, not lost)? Then ZAP refuses its key."""
        node = self.nodes.get(name)
        return node is not None and node.route is not None and node.lost is None

    def _adopt(self, node: Node, route: bytes, msg: Any) -> bool:
        """A frame from a connection that is not the node's route: its hello makes it the
        route while the node has none or is lost -- with its executor's token, once the node
        has one (node_keys.py); anything else from it asks it for a hello (an executor that
        reconnected). While the node's route is up it is a second connection's: refused."""
        if node.route is not None and node.lost is None:
            self._refused(node.name, "a frame from a second connection")
            return False
        if not isinstance(msg, W.NodeHello):
            self._resync(node, "say hello on this connection", route)
            return False
        if not node_keys.same_token(node.token, msg.token):
            self._refused(node.name, "a hello without its executor's token")
            return False
        if node.route is not None:
            self.routes.pop(node.route, None)
        node.route, node.token = route, msg.token
        return True

    def _told(self, key: str) -> int | None:
        """Rate of events: None when one was told for `key` less than BAD_EVENT_S ago (this
        one is summed up); else how many were summed up since the last."""
        now = self.clock.real_mono()
        if now - self._bad_at.get(key, -BAD_EVENT_S) < BAD_EVENT_S:
            self._bad_since[key] = self._bad_since.get(key, 0) + 1
            return None
        self._bad_at[key] = now
        return self._bad_since.pop(key, 0)

    def _bad(self, node: Node, why: str) -> None:
        """A frame dropped as malformed: counted, logged, an event -- at a bounded rate."""
        self.bad_frames += 1
        more = self._told(node.name)
        if more is None:
            return
        what = f"node {node.name}: {why[:200]}"
        if more:
            what += f" (and {more} more dropped since)"
        log.warning("dropped a malformed node frame: %s", what)
        self.events.record(self.uid, E.BAD_FRAME, what)

    def _refused(self, name: str, what: str) -> None:
        """A second connection as a connected node (its handshake, or a frame of one that got
        in before the node's hello), refused: counted, logged, an event at a bounded rate."""
        self.second += 1
        more = self._told(f"refused {name}")
        if more is None:
            return
        text = f"node executor port: {what} as node {name}, which is connected: refused"
        if more:
            text += f" (and {more} more since)"
        log.warning("%s", text)
        self.events.record(self.uid, E.REFUSED, text)

    def _on_message(self, node: Node, msg: Any) -> None:
        if not isinstance(msg, W.FROM_NODE):
            self._bad(node, f"a {type(msg).__name__} message, which no node sends")
            return
        if isinstance(msg, W.NodeHello) and msg.node != node.name:
            self._bad(node, f"a hello naming node {msg.node[:40]!r}")
            return
        if isinstance(msg, W.Spawned):
            bad = _bad_spawned(msg.results)
            if bad:
                self._bad(node, bad)
                return
        if node.lost is not None:
            self._from_lost(node, msg)
            return
        node.last_heard = self.clock.real_mono()
        if isinstance(msg, W.Exits):
            self._exits(node, msg.exits)
        elif isinstance(msg, W.PmiFence):
            if self.pmi is not None:
                self.pmi.on_fence(node.name, msg.kvsname, msg.epoch, msg.keys)
        elif isinstance(msg, W.PmiFail):
            if self.pmi is not None:
                self.pmi.on_fail(node.name, msg.kvsname, msg.rank, msg.why, msg.kind)
        elif isinstance(msg, W.Spawned):
            self._spawned(node, msg.results)
            if any(pid == NEVER_STARTED for _, pid, _ in msg.results):
                self._resync(node, "the agent hears you")  # (it fenced itself: see below)
        elif isinstance(msg, W.NodeHello):
            first = not node.up
            node.up, node.pid, node.host = True, msg.pid, msg.host
            if first:
                self._unheard_done(node)
                self._arm(node, node.last_heard + self.beat_s)
                self.events.record(self.uid, E.NODE_UP, f"{node.name} {msg.host} {msg.pid}")
            if msg.exits:
                self._exits(node, msg.exits)
        elif msg.fenced:
            # it fenced itself though we never lost it (this agent was slow): it may spawn
            # again; its killed tasks' exits come as usual, saying so
            self._resync(node, "the agent hears you")

    def _resync(self, node: Node, why: str, route: bytes | None = None) -> None:
        """Ask it for a hello, which also lets it spawn again: at most once per heartbeat
        period (what it refused meanwhile is queued again). route: a connection of its that
        is not its route yet."""
        now = self.clock.real_mono()
        if now - node.resynced >= self.beat_s:
            node.resynced = now
            self._send(node, W.Resync(why[:300]), route)

    def _spawned(self, node: Node, rows: list) -> None:
        for key, pid, info in rows:
            if key not in node.keys:
                continue  # not a process of this node's (or decided while it was lost)
            if pid <= 0:
                node.keys.discard(key)
                node.kills.discard(key)
                self.owner.pop(key, None)
                info = f"{info} (on {node.name})"
            self.spawned.append((key, pid, info))

    def _exits(self, node: Node, rows: list) -> None:
        acks = self._acks.setdefault(node.name, [])
        for r in rows:
            key = r.key
            acks.append(key)
            if key not in node.keys:
                if key in node.decided:  # its verdict was given while the node was lost
                    self._late(node, r, node.decided.pop(key))
                continue  # (or already known: a resent exit)
            node.keys.discard(key)
            node.kills.discard(key)
            self.owner.pop(key, None)
            reason = None
            if r.fenced and r.sig:
                reason = (
                    f"node {node.name}: killed by its node executor's fence (no word from "
                    f"the agent for {self.fence_after_s:g} s)"
                )
                if node.lost is not None:
                    reason += f"; node {node.name} lost: {node.lost}"
            self.exits.append(Ended(r.key, r.pid, r.code, r.sig, r.t, r.ut, r.st, r.rss, reason))
            if r.stdout is not None or r.stderr is not None:
                self.outputs[key] = (r.stdout, r.stderr)

    # -- to the executors ----------------------------------------------------------------------
    def spawn(self, name: str, specs: list[tuple], worlds: Any = ()) -> str | None:
        """Send these spawn specs to the node's executor (with the PMI worlds it serves ranks
        of); why not (None: sent)."""
        node = self.nodes.get(name)
        if node is None or node.lost is not None or not node.up:
            return (
                f"node {name} lost: {node.lost}"
                if node is not None and node.lost
                else f"no node executor on {name}"
            )
        for s in specs:
            node.keys.add(s[0])
            self.owner[s[0]] = name
        self._send(node, W.Spawn(specs, list(worlds)))
        return None

    def send_to(self, name: str, msg: Any) -> None:
        """A message for a node's executor, if it is up (a PMI fence's answer)."""
        node = self.nodes.get(name)
        if node is not None and node.up and node.lost is None:
            self._send(node, msg)

    def kill(self, keys: list[int], sig: int) -> None:
        by: dict[str, list[int]] = {}
        for k in keys:
            n = self.owner.get(k)
            if n is not None:
                by.setdefault(n, []).append(k)
        for n, ks in by.items():
            node = self.nodes.get(n)
            if node is not None and node.lost is not None:
                node.kills.update(ks)  # (sent if it rejoins; its verdict otherwise)
            elif node is not None and node.up:
                self._send(node, W.Kill(ks, int(sig)))

    def kill_marked(self, uids_by_node: dict[str, set[str]]) -> None:
        """Tasks stopped for good: their nodes' executors kill what they left behind."""
        for name, uids in uids_by_node.items():
            node = self.nodes.get(name)
            if node is not None and node.lost is not None:
                node.kill_uids.update(uids)
            elif node is not None and node.up:
                self._send(node, W.Kill([], 9, sorted(uids)))

    def _send(self, node: Node, msg: Any, route: bytes | None = None) -> None:
        """To the node's route (the connection its hello came over), or this one of its."""
        route = route or node.route
        if route is None:
            return  # (no hello yet: nowhere that is surely the node)
        try:
            self.sock.send_multipart([route, W.encode(msg)], self.zmq.NOBLOCK)
        except self.zmq.ZMQError as e:  # gone for now (ROUTER_MANDATORY off: dropped silently)
            log.warning("cannot send to node %s: %s", node.name, e)
        node.last_sent = self.clock.real_mono()

    # -- time ----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Acknowledge exits; look at the nodes whose deadline came (heartbeat them, find the
        silent and the unstarted lost, give a lost node's tasks their verdict); keep lost
        nodes fenced; what the door refused, summed up."""
        now = self.clock.real_mono()
        refused = self.door.take_summary()
        if refused:
            self.events.record(self.uid, E.REFUSED, refused)
        if self._acks and now - self._acked >= ACK_S:  # (one frame per node per ACK_S)
            self._acked = now
            for name, keys in self._acks.items():
                node = self.nodes.get(name)
                if keys and node is not None and (node.up or node.lost is not None):
                    self._send(node, W.Ack(keys))  # (a lost node that talks: may forget them)
            self._acks.clear()
        due = self._due
        tail: list[str] = []  # (the launcher's stderr, read once a tick at most)
        while due and due[0][0] <= now:
            node = heapq.heappop(due)[2]
            if self.nodes.get(node.name) is node and node.due <= now:
                node.due = float("inf")
                self._look(node, now, tail)
        if self.lost_names:
            self._fence()

    def _arm(self, node: Node, t: float) -> None:
        """Look at this node again at t (or sooner, if it is due sooner already)."""
        if t < node.due:
            node.due = t
            self._seq += 1
            heapq.heappush(self._due, (t, self._seq, node))

    def _look(self, node: Node, now: float, tail: list[str]) -> None:
        """A node whose deadline came: what is due of it, and its next deadline."""
        if node.lost is not None:
            if node.keys and now - node.lost_at >= self.verdict_after_s:
                self._verdict(node)
            elif node.keys:
                self._arm(node, node.lost_at + self.verdict_after_s)
            return
        if not node.up:
            if now >= node.expected_by:
                if not tail:
                    tail.append(self._stderr_tail())
                self.lose(node, "its node executor did not start in time" + tail[0])
            else:
                self._arm(node, node.expected_by)
            return
        silent = now - node.last_heard
        if silent > self.lost_after_s:
            self.lose(node, f"no heartbeat for {silent:.0f} s")
            return
        if now - node.last_sent >= self.beat_s:
            self._send(node, W.Beat(self.clock.now()))
        self._arm(node, min(node.last_heard + self.lost_after_s, node.last_sent + self.beat_s))

    def aux_exited(self, code: int, sig: int) -> None:
        """The launcher step that started executors ended: those not up will never be."""
        tail = self._stderr_tail()
        for node in self.nodes.values():
            if not node.up and node.lost is None:
                self.lose(
                    node,
                    f"its node executor's launcher ended (code {code}, signal "
                    f"{sig}) before it started{tail}",
                )

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

    def take(self) -> tuple[list[tuple], list[Ended]]:
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
            elif node.keys:
                self._verdict(node)  # (held tasks of a lost node: nobody would decide them)
            self.keys.forget(node.name)  # (its connection may linger: not heard)
            self._unheard_done(node)
            self.lost_names.discard(node.name)
            del self.nodes[node.name]

    def close(self) -> None:
        self.door.close()
        self.sock.close(0)
        self.keys.close()
        self.ctx.term()


def _bad_spawned(rows: list) -> str | None:
    """Why these spawn results are not a node's (a pid with a time, -errno with a message)."""
    for key, pid, info in rows:
        if (pid > 0) != isinstance(info, float):
            return f"spawn result {key}: pid {pid} with {type(info).__name__} info"
    return None


def wanted(desc: dict, resource: str, allowed: bool = True) -> bool:
    """Does this pilot run its single-node tasks through node executors? On a batch pilot
    whose nodes are other hosts (Slurm, whose srun starts them), unless the description or
    the agent's knob (allowed=False: PILOTFISH_NODE_EXECUTORS=0, knobs.py) turns them off; on
    a simulated pilot only when asked (node_executors=True: the launch model's "nodes"); on a
    local pilot when its nodes' executors are emulated (launcher_options={"nodes": {"emulate":
    True}})."""
    opt = desc.get("node_executors")
    if not allowed:
        return False
    if opt is False:
        return False
    if resource == "local" and ((desc.get("launcher_options") or {}).get("nodes") or {}).get(
        "emulate"
    ):
        return True  # emulated executors of its declared nodes (agent/node_emulated.py)
    if resource == "simulated":
        return opt is True
    # (a Slurm pilot all on this host may still grow onto others)
    from ..batch.registry import batch_system

    return batch_system(resource).node_executors
