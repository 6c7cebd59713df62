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

A node whose executor stops heartbeating for lost_after_s (or never starts) is *lost*: an event
names it and why, and its free resources are fenced off in the placer so that nothing more is
placed there. Its running tasks are not decided then: a silent node is not a dead one (its
link may be down, its executor stopped), and a task there may be running to its end right
now. Deciding it at once ran tasks twice (retried elsewhere) or FAILED tasks that had run to
their end (issue 42). So, exactly once across a lost node that comes back:

- **Its executor fences itself** (node.py): when it has not heard the agent for
  fence_after_s (3 x lost_after_s; the agent heartbeats no node it lost) it SIGKILLs every task
  it runs, and takes no spawn until the agent answers it again (a Resync) -- so a spawn sent
  before the loss and delivered after it never starts late. It checks before anything else in
  each round: an executor that was stopped (SIGSTOP) fences the moment it runs again, before
  it reads what waited. (Not when the agent died and its keeper holds the pilot's tasks: those
  run to their end, as before.)
- **The agent holds a lost node's verdict** until it knows how its tasks ended:
  * the node comes back (link up, SIGCONT): whatever it sends gets a Resync, which it answers
    with a hello -- what it still runs and every exit not acknowledged. Those exits are the
    tasks' real ends: one that ran to its end while the node was unheard ends DONE (or FAILED by
    its own exit code), one the fence killed FAILS "killed by its node executor's fence" (or
    runs again with retries: it never ran to its end), one the node never heard of never
    started and is queued again; what still runs there runs on. The node then *rejoins*: its
    fences are lifted, the placer uses it again, NODE_UP says "rejoined";
  * the node stays silent for verdict_after_s (5 x lost_after_s) after its loss: its executor,
    if it runs at all, fenced at least 2 x lost_after_s before. Each task ends as its node's
    journal on the shared file system says (`nodes/<node>/exits`: the executor records each
    spawn it tries and each exit as it reaps); one its executor never tried before it marked
    its fence there is queued again (it never started: node_verdict.py); one with no word of
    it there ends as lost ("node nK lost: ...; no word of it ...": it FAILS, or runs again
    elsewhere with retries). A node that comes back later
    rejoins once its hello shows it runs none of the tasks decided without it (the agent kills
    those first); their exits are *late*: dropped, counted (late), and the rejoin event says
    how many of them ran to their end after a verdict without word of them.

So no task runs twice to its end and none FAILS that ran to its end when a lost node comes back
within the verdict time, or when its journal records its tasks' ends (its executor, alive,
writes them, its fence's kills included, as long as it reaches the shared file system). What
cannot be told apart from a dead host is a node unheard for longer than lost_after_s +
verdict_after_s whose journal has no word of a task that did run: one that ran to its end
before the fence while the node could not write its journal, or one that ends after its
verdict because its executor was frozen (SIGSTOP, a paused VM) or died alone. Such a task has
run twice (with retries) or FAILED although it ended; the rejoin event counts such ends, if
the node ever comes back.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from typing import Any, Callable

from .. import _events as E
from .. import _node_wire as W
from .._door import PER_PEER, TOTAL, Door, joined
from .._util import write_private
from ..launch.nodes import executor_step
from . import node_keys
from .node_keys import NodeKeys, conceal
from .node_verdict import NEVER_STARTED, Ended, Node, verdict

log = logging.getLogger("pilotfish.agent")

FENCE_KEY0 = 1 << 50  # placer keys of fences on lost nodes (apart from tasks' and processes')
BAD_EVENT_S = 1.0  # at most one BAD_FRAME (or REFUSED) event per node per second


class NodeLink:
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
        beat_s: float = 1.0,
        lost_after_s: float = 10.0,
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
        self._scale(n)
        self.fds = (self.sock, self.keys.zap)  # what the agent's poller watches
        self.routes: dict[bytes, tuple[str, int]] = {}  # routing id -> (node, step): ZAP's
        self.second = 0  # a second connection as a connected node: refused (handshakes, frames)
        self.beat_s = beat_s
        self.lost_after_s = lost_after_s
        # the executor kills its tasks after fence_after_s without the agent (3 x: an agent
        # slow for 2 x lost_after_s costs no task); the agent gives a silent lost node's tasks
        # their verdict verdict_after_s after the loss: by then the executor, if it runs,
        # fenced at least 2 x lost_after_s before (the module docstring)
        self.fence_after_s = 3.0 * lost_after_s
        self.verdict_after_s = 5.0 * lost_after_s
        self.deadline_epoch = deadline_epoch
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
        self._acks: dict[str, list[int]] = {}
        self._fences = 0
        # MPI tasks' PMI worlds (pmi_worlds.PmiWorlds): told of fences and failures the
        # executors' PMI servers report, and of a lost node
        self.pmi: Any = None
        self.config_path = os.path.join(sandbox, "nodes.json")
        write_private(
            self.config_path,
            json.dumps(
                {
                    "pilot": uid,
                    "sandbox": sandbox,
                    "address": self.address,
                    "key_file": self.key_file,
                    "beat_s": beat_s,
                    "fence_after_s": self.fence_after_s,
                    "agent_timeout_s": max(60.0, 6 * lost_after_s),
                    "deadline": deadline_epoch,
                }
            ).encode(),
        )

    def _scale(self, n: int) -> None:
        """Caps and descriptors for n nodes' executors: the door's pending caps grow by n
        (so a pilot's own executors connecting at once are never shut, _door.py), and this
        process's open-file limit is raised towards its hard limit to hold them and as many
        pending strangers."""
        import resource

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
        secret = self.expect(names, starter, float(options.get("start_timeout", 60.0)))
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
        for n in names:
            old = self.nodes.get(n)
            if old is not None and old.keys:
                self._verdict(old)  # (a new executor knows nothing of the old one's tasks)
            self.nodes[n] = Node(n, now + timeout, starter, step)
        return secret

    def waiting(self, starter: Any) -> list[Node]:
        return [
            n for n in self.nodes.values() if n.starter is starter and not n.up and n.lost is None
        ]

    # -- the socket ----------------------------------------------------------------------------
    def on_readable(self) -> None:
        for name in self.keys.serve(self._connected):  # (ZAP: the handshakes waiting)
            self._refused(name, "a second connection")
        zmq = self.zmq
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) < 2:
                continue
            route = frames[0].bytes
            got = self.routes.get(route)
            if got is None:  # a new connection: the node its key proved (ZAP's User-Id)
                try:
                    step, _, name = frames[1].get("User-Id").partition(" ")
                except zmq.ZMQError:  # (none: every connection passes ZAP, bound first)
                    continue
                got = self.routes[route] = (name, int(step))
            node = self.nodes.get(got[0])
            if node is None or node.step != got[1]:
                continue  # a node whose executor was stopped, or replaced: not heard
            try:
                msg = W.decode(joined(frames, 1))
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

    def _late(self, node: Node, r: Any, without_word: bool) -> None:
        """The exit of a task decided while its node was lost: dropped, counted. One that ran to
        its end after a verdict given without word of it is what exactly-once could not hold."""
        node.late += 1
        self.late += 1
        if without_word and not r.sig:
            node.late_ran += 1
            log.error(
                "node %s: key %d ran to its end (code %d) after its verdict",
                node.name,
                r.key,
                r.code,
            )

    # -- a lost node ---------------------------------------------------------------------------
    def _from_lost(self, node: Node, msg: Any) -> None:
        """What a lost node sends: the real ends of its held tasks; a hello, its rejoin.
        Anything else from it gets a Resync (at most one per heartbeat period): its answer is
        a hello."""
        if isinstance(msg, W.NodeHello):
            self._rejoin(node, msg)
            return
        if isinstance(msg, W.Exits):
            self._exits(node, msg.exits)
        elif isinstance(msg, W.Spawned):
            self._spawned(node, msg.results)
        self._resync(node, f"you were lost: {node.lost}")

    def _rejoin(self, node: Node, hello: Any) -> None:
        """A lost node's hello: its exits are its tasks' ends; it rejoins unless it still runs
        a task decided without it (killed first: its next hello decides)."""
        self._exits(node, hello.exits)
        running = set(hello.running)
        stale = sorted(k for k in running if k in node.decided)
        if stale:
            log.warning(
                "node %s is back but runs %d tasks decided without it: killing them",
                node.name,
                len(stale),
            )
            self._send(node, W.Kill(stale, int(signal.SIGKILL)))
            return
        never = sorted(k for k in node.keys if k not in running)
        for k in never:  # neither running there nor ended: its spawn never reached it
            node.keys.discard(k)
            node.kills.discard(k)
            self.owner.pop(k, None)
            self.spawned.append(
                (k, NEVER_STARTED, f"node {node.name} lost ({node.lost}): never started there")
            )
        now = self.clock.real_mono()
        was = node.lost
        node.lost = None
        node.up, node.pid, node.host = True, hello.pid, hello.host
        node.last_heard = now
        self._unfence(node)
        if node.kills:  # stopped (canceled, timed out) while it was lost
            self._send(node, W.Kill(sorted(node.kills), int(signal.SIGKILL)))
        if node.kill_uids:
            self._send(node, W.Kill([], int(signal.SIGKILL), sorted(node.kill_uids)))
        node.kills, node.kill_uids = set(), set()
        what = (
            f"{node.name} {hello.host} {hello.pid} rejoined after {now - node.lost_at:.0f} s "
            f"lost ({was}): {len(node.keys)} running, {len(never)} never started"
        )
        if node.late:
            what += f", {node.late} late exits ({node.late_ran} ran to its end after its verdict)"
        log.warning("%s", what)
        self.events.record(self.uid, E.NODE_UP, what[:500])
        node.late = node.late_ran = 0

    def _verdict(self, node: Node) -> None:
        """A lost node silent for verdict_after_s: its held tasks end as its journal says,
        are queued again if it never started them, or, with no word of them, end as lost
        (node_verdict.py)."""
        v = verdict(
            self.sandbox, node, self.clock.now(), (self.fence_after_s, self.verdict_after_s)
        )
        for key in node.keys:
            self.owner.pop(key, None)
        self.exits.extend(v.exits)
        self.spawned.extend(v.never)
        node.decided.update(v.decided)
        node.keys.clear()
        node.kills.clear()

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
        """Acknowledge exits, heartbeat, find lost nodes, keep lost nodes fenced; what the
        door refused, summed up."""
        now = self.clock.real_mono()
        refused = self.door.take_summary()
        if refused:
            self.events.record(self.uid, E.REFUSED, refused)
        for name, keys in self._acks.items():
            node = self.nodes.get(name)
            if keys and node is not None and (node.up or node.lost is not None):
                self._send(node, W.Ack(keys))  # (a lost node that talks: it may forget them)
        self._acks.clear()
        for node in self.nodes.values():
            if node.lost is not None:
                if node.keys and now - node.lost_at >= self.verdict_after_s:
                    self._verdict(node)
                continue
            if not node.up:
                if now > node.expected_by:
                    self.lose(node, "its node executor did not start in time" + self._stderr_tail())
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

    def lose(self, node: Node, why: str) -> None:
        """Nothing more goes there; its running tasks are held until their end is known (the
        module docstring)."""
        node.lost = why
        node.up = False
        node.lost_at = self.clock.real_mono()
        held = (
            f"; its {len(node.keys)} processes held until their end is known" if node.keys else ""
        )
        log.warning("node %s lost: %s%s", node.name, why, held)
        self.events.record(self.uid, E.NODE_LOST, f"{node.name} {why}{held}"[:500])
        self._fence()
        if self.pmi is not None:  # MPI tasks with ranks there: the others are killed now
            self.pmi.node_lost(node.name, why)

    def _fence(self) -> None:
        """Hold whatever is free on lost nodes, so that the placer uses them no more (until
        they rejoin)."""
        lost = {n.name: n for n in self.nodes.values() if n.lost is not None}
        for p in self.partitions:
            for i, name in enumerate(p.names):
                node = lost.get(name)
                if node is None:
                    continue
                cores, gpus, mem = p.placer.free(i)
                if cores <= 0 and gpus <= 0:
                    continue
                self._fences += 1
                key = FENCE_KEY0 + self._fences
                got = p.placer.place_batch([key], [1], [cores], [gpus], [mem], node_hint=[i])
                if got[0] is None:
                    continue
                if got[0][0][0] != i:  # (a hint: placed elsewhere, it fences nothing here)
                    p.scheduler.release([key])
                    continue
                node.fences.append((p, key))

    def _unfence(self, node: Node) -> None:
        for p, key in node.fences:
            p.scheduler.release([key])
        node.fences.clear()

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


def wanted(desc: dict, resource: str) -> bool:
    """Does this pilot run its single-node tasks through node executors? On a batch pilot
    whose nodes are other hosts (Slurm, whose srun starts them), unless the description or
    PILOTFISH_NODE_EXECUTORS=0 turns them off; on a simulated pilot only when asked
    (node_executors=True: the launch model's "nodes"); on a local pilot when its nodes'
    executors are emulated (launcher_options={"nodes": {"emulate": True}})."""
    opt = desc.get("node_executors")
    env = os.environ.get("PILOTFISH_NODE_EXECUTORS")
    if env is not None and env.strip() in ("0", "false", "no", "off"):
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
    return resource == "slurm"
