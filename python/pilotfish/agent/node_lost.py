"""A lost node (the agent's side: agent/node_link.py, whose NodeLink this part is of).

A node whose executor stops heartbeating for lost_after_s (or never starts) is *lost*: an event
names it and why, and its free resources are fenced off in the placer so that nothing more is
placed there. Its running tasks are not decided then: a silent node is not a dead one (its
link may be down, its executor stopped), and a task there may be running to its end right
now. Deciding it at once ran tasks twice (retried elsewhere) or FAILED tasks that had run to
their end (issue 42). So, exactly once across a lost node that comes back:

- **Its executor fences itself** (node_executor.py): when it has not heard the agent for
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

import logging
import signal
from typing import TYPE_CHECKING, Any

from .. import _events as E
from .. import _node_wire as W
from .node_verdict import NEVER_STARTED, Ended, Node, verdict

log = logging.getLogger("pilotfish.agent")

FENCE_KEY0 = 1 << 50  # placer keys of fences on lost nodes (apart from tasks' and processes')


class LostNodes:
    """NodeLink's lost nodes: losing one, what it sends while lost, its rejoin or verdict,
    and the fences that keep the placer off it (the module docstring)."""

    nodes: dict[str, Node]
    lost_names: set[str]  # the nodes lost now (what _fence looks at)
    partitions: list
    owner: dict[int, str]
    spawned: list[tuple]
    exits: list[Ended]
    late: int
    sandbox: str
    uid: str
    clock: Any
    events: Any
    pmi: Any
    fence_after_s: float
    verdict_after_s: float
    _fences: int
    _where_shape: list
    _where_at: dict[str, list[tuple[Any, int]]]

    if TYPE_CHECKING:  # (NodeLink's)

        def _exits(self, node: Node, rows: list) -> None: ...

        def _spawned(self, node: Node, rows: list) -> None: ...

        def _resync(self, node: Node, why: str, route: bytes | None = None) -> None: ...

        def _send(self, node: Node, msg: Any, route: bytes | None = None) -> None: ...

        def _arm(self, node: Node, t: float) -> None: ...

        def _unheard_done(self, node: Node) -> None: ...

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
        self.lost_names.discard(node.name)
        node.up, node.pid, node.host = True, hello.pid, hello.host
        node.last_heard = now
        self._arm(node, now)
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

    def lose(self, node: Node, why: str) -> None:
        """Nothing more goes there; its running tasks are held until their end is known (the
        module docstring)."""
        node.lost = why
        node.up = False
        node.lost_at = self.clock.real_mono()
        self.lost_names.add(node.name)
        self._unheard_done(node)
        if node.keys:
            self._arm(node, node.lost_at + self.verdict_after_s)
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
        they rejoin): a look at the lost nodes alone, never at every node."""
        for name in list(self.lost_names):
            node = self.nodes.get(name)
            if node is None or node.lost is None:
                self.lost_names.discard(name)
                continue
            for p, i in self._where(name):
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

    def _where(self, name: str) -> list[tuple[Any, int]]:
        """(partition, index) of the node of that name in each partition that has it; the
        index made again when the partitions changed (a unit grown or let go)."""
        shape = [(id(p), len(p.names)) for p in self.partitions]
        if shape != self._where_shape:
            self._where_shape = shape
            self._where_at = {}
            for p in self.partitions:
                for i, n in enumerate(p.names):
                    self._where_at.setdefault(n, []).append((p, i))
        return self._where_at.get(name, [])

    def _unfence(self, node: Node) -> None:
        for p, key in node.fences:
            p.scheduler.release([key])
        node.fences.clear()
