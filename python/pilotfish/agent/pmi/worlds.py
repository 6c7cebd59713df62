"""The agent's side of MPI tasks without a launcher (launch method `pmi`): one *world* per task
attempt, whose ranks are served by the PMI server of the process that spawns them -- a node
executor (agent/node_executor.py) for its node, the agent's own (a NodePmi, node.py) for the
agent's node.

    placed task ──► TaskRunner.launch: specs per rank, keys ──► PmiWorlds.prepare
        agent's node: its NodePmi serves them; pass_fd = the rank's end (its descriptor 3)
        other nodes:  a PmiStart rides in the node's Spawn frame; its executor does the same
    rank: PMI init, put ... fence ──► its node's server (when ALL its local ranks arrived):
        its keys in bounded parts, PmiFence ──► PmiWorlds.on_fence: each part counted against
        the world's cap as it arrives (fence.Gather) ── every node of the world in? ──►
        the union's parts, PmiFenceDone, to each node ──► ranks answered, gets served
    a world whose ranks all live on one node completes its fences there: no round trip

Failures, each failing the task alone, naming the rank and its node, every other rank killed
(SIGKILL) on every node: a rank that exits non-zero or is killed (reaped by its spawner:
`rank_exit`), `MPI_Abort` (PMI abort, with its message), a malformed or oversized PMI input
(that world only: bounded buffers, engine.py), a world whose keys and values, all nodes
together, would pass max_kvs_bytes (the contribution that would, as it arrives: nothing is
merged or sent back), a fence frame that cannot be accepted (at once), a rank that does not
reach PMI init within the launch method's init_timeout, a rank that exits or closes its
connection before MPI_Finalize, and a node lost mid-task (`node_lost`). These end the task
FAILED by its ranks' exits, so its retries apply. One more ends it FAILED without retries: a
rank that ended without ever speaking PMI (a program not of the MPICH ABI; judged when its
process is reaped, whoever else still holds its descriptor) -- never N singletons ending DONE.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import msgspec

from ... import _node_wire as W
from ... import states as S
from ...launch.direct import remote_nodes
from ...launch.mpi_abi import MPICH, program_mpi
from ..task_runner import signal_name
from ..tasks import AgentTask
from .fence import FenceError, Gather
from .node import NodePmi
from .wire import MAX_KVS_BYTES

log = logging.getLogger("pilotfish.agent")

HERE = ""  # the place of ranks the agent spawns itself (its own node)


class World:
    __slots__ = ("task", "kvsname", "nodes", "places", "gather", "failed", "weak")

    def __init__(self, task: AgentTask, kvsname: str, nodes: tuple[str, ...], places: set[str]):
        self.task = task
        self.kvsname = kvsname
        self.nodes = nodes  # the node of every rank (rank order)
        self.places = places  # node executors serving its ranks; HERE: the agent
        self.gather: Gather | None = None  # its fences (fence.py), once prepared
        self.failed: str | None = None
        self.weak = False  # failed for a reason a rank's own exit may name better


class PmiWorlds:
    def __init__(
        self,
        here: str,
        kill: Callable[[AgentTask], None],
        link: Any = None,
        mono: Callable[[], float] | None = None,
        max_kvs_bytes: int = MAX_KVS_BYTES,
    ):
        """here: the name of the agent's node (in reasons); kill(task): SIGKILL every rank of
        the task, wherever it runs; link: the node executors (agent/node_link.py), if any;
        max_kvs_bytes: a world's key-value space, all its nodes together."""
        self.kill = kill
        self.link = link
        self.max_kvs_bytes = max_kvs_bytes
        kw = {"mono": mono} if mono is not None else {}
        self.local = NodePmi(here, self._local_fence, self._local_fail, wire=False, **kw)
        self.worlds: dict[str, World] = {}
        self.of_task: dict[str, World] = {}  # task uid -> its live world
        self.bad = 0  # node messages about worlds they do not serve (dropped)

    def fileno(self) -> int:
        return self.local.fileno()

    # -- launching ------------------------------------------------------------------------------
    def prepare(
        self,
        t: AgentTask,
        world: Any,
        ranks: list[tuple[int, int, str | None]],
        init_timeout: float,
    ) -> tuple[dict[int, int], dict[str, W.PmiStart]]:
        """A world for task t's attempt: ranks [(rank, spawn key, node executor or None)].
        Returns the pass_fd of each rank spawned here, and each node's PmiStart. Raises
        ValueError when the agent's own server cannot take it (the task fails alone)."""
        old = self.of_task.pop(t.spec.uid, None)
        if old is not None:  # (an earlier attempt's, not ended through ended())
            self.worlds.pop(old.kvsname, None)
        here = [(r, k) for r, k, node in ranks if node is None]
        away: dict[str, list[tuple[int, int]]] = {}
        for r, k, node in ranks:
            if node is not None:
                away.setdefault(node, []).append((r, k))
        fds: dict[int, int] = {}
        if here:
            got = self.local.start(world.kvsname, world.size, world.nodes, here, init_timeout)
            fds = {k: fd for k, (fd, _env) in got.items()}
        places = set(away) | ({HERE} if here else set())
        w = World(t, world.kvsname, world.nodes, places)
        name = w.kvsname
        w.gather = Gather(
            places,
            self.max_kvs_bytes,
            send=lambda p, e, step: self._send(p, W.PmiFenceDone(name, e, step)),
            local=lambda e, keys, more: self.local.fence_part(name, e, keys, more),
            pending=lambda: self.local.pending(name),
            name=lambda p: self._place_name(w, p),
        )
        self.worlds[w.kvsname] = w
        self.of_task[t.spec.uid] = w
        starts = {
            node: W.PmiStart(world.kvsname, world.size, list(world.nodes), rs, init_timeout)
            for node, rs in away.items()
        }
        return fds, starts

    def spawned(self, kvsnames: list[str]) -> None:
        for k in kvsnames:
            self.local.spawned(k)

    # -- from the nodes' servers ----------------------------------------------------------------
    def on_fence(self, place: str, kvsname: str, epoch: int, keys: Any) -> None:
        """A fence step from a node executor (keys: a PmiStep, encoded) or the agent's own
        ranks' whole contribution (a dict)."""
        w = self.worlds.get(kvsname)
        if w is None or place not in w.places or w.gather is None:
            self.bad += 1
            return
        if w.failed is not None:
            return
        try:
            w.gather.step(place, epoch, keys)
        except FenceError as e:
            self._fail(w, f"PMI error: {e}", weak=False)
            return
        if HERE in w.places and w.failed is None:  # (the agent's ranks' puts: what is left)
            self.local.elsewhere(kvsname, w.gather.elsewhere())

    def _send(self, place: str, msg: W.PmiFenceDone) -> None:
        if self.link is not None:
            self.link.send_to(place, msg)

    def _place_name(self, w: World, place: str) -> str:
        node = place or self.local.node
        ranks = [r for r, n in enumerate(w.nodes) if n == node]
        if not ranks:
            return f"node {node}"
        if len(ranks) == 1:
            return f"node {node} (rank {ranks[0]})"
        if ranks == list(range(ranks[0], ranks[-1] + 1)):
            return f"node {node} (ranks {ranks[0]}-{ranks[-1]})"
        more = f" +{len(ranks) - 4} more" if len(ranks) > 4 else ""
        return f"node {node} (ranks {', '.join(map(str, ranks[:4]))}{more})"

    def on_fail(self, place: str, kvsname: str, rank: int, why: str, kind: str) -> None:
        w = self.worlds.get(kvsname)
        if w is None or place not in w.places:
            self.bad += 1
            return
        self._fail(w, why, weak=kind == "lost", fatal=kind == "noinit")

    def _local_fence(self, kvsname: str, epoch: int, keys: dict) -> None:
        self.on_fence(HERE, kvsname, epoch, keys)

    def _local_fail(self, kvsname: str, rank: int, why: str, kind: str) -> None:
        self.on_fail(HERE, kvsname, rank, why, kind)

    # -- from the runner and the node link ------------------------------------------------------
    def rank_exit(self, t: AgentTask, rank: int, code: int, sig: int) -> None:
        """A rank of t was reaped: a non-zero exit or a signal fails its world (once)."""
        w = self.of_task.get(t.spec.uid)
        if w is None or not (code or sig):
            return
        if w.failed is not None and (not w.weak or sig == signal.SIGKILL):
            return  # (a second failure, or a rank we killed: it says nothing of the first)
        node = w.nodes[rank] if 0 <= rank < len(w.nodes) else "?"
        how = f"was killed by {signal_name(sig)}" if sig else f"exited with code {code}"
        self._fail(w, f"rank {rank} on {node} {how}", weak=False)

    def node_lost(self, node: str, why: str) -> None:
        for w in list(self.worlds.values()):
            if node in w.places and (w.failed is None or w.weak):
                self._fail(w, f"node {node} lost mid-task: {why}", weak=False)

    def abandon(self, t: AgentTask, why: str) -> None:
        """t could not be launched whole (the runner kills what started): its world is not
        served any more, and what its ranks report from now on decides nothing."""
        w = self.of_task.get(t.spec.uid)
        if w is not None and (w.failed is None or w.weak):
            w.failed, w.weak = why, False
            if w.gather is not None:
                w.gather.drop()
            self.local.fail(w.kvsname, why)

    def finished(self, t: AgentTask) -> None:
        """Every rank of t was reaped: a failed world never ends DONE (its ranks may all have
        exited 0 -- e.g. programs that never spoke PMI); then forget it."""
        w = self.of_task.get(t.spec.uid)
        if (
            w is not None
            and w.failed is not None
            and t.kill_reason is None
            and not t.exit_code
            and not t.signal
        ):
            t.kill_reason = (S.FAILED, w.failed)
        self.ended(t)

    def ended(self, t: AgentTask) -> None:
        w = self.of_task.pop(t.spec.uid, None)
        if w is not None:
            self.worlds.pop(w.kvsname, None)
            if w.gather is not None:
                w.gather.drop()  # (now: its lambdas and the world make a cycle)
            self.local.fail(w.kvsname, "its task ended")  # (closed once its ranks are reaped)

    def tick(self) -> None:
        if self.local.jobs:
            self.local.tick()

    def close(self) -> None:
        self.local.close()

    # -- failing a world ------------------------------------------------------------------------
    def _fail(self, w: World, why: str, weak: bool, fatal: bool = False) -> None:
        t = w.task
        first = w.failed is None
        if not first and not w.weak:
            return
        if not first and weak:
            return
        w.failed, w.weak = why, weak
        if w.gather is not None:
            w.gather.drop()  # (what it held of the world's keys)
        if t.kill_reason is None or t.kill_reason[0] == S.FAILED:
            if fatal and t.kill_reason is None:  # (the pilot's own kill keeps its reason)
                t.kill_reason = (S.FAILED, why)  # (no retry: a wrong guess, not bad luck)
            elif t.kill_reason is None:
                t.reason = f"{why}; the task's other ranks were killed" if t.running > 1 else why
        if first:
            log.warning("task %s: %s", t.spec.uid, why)
            self.local.fail(w.kvsname, why)
            if t.running:
                self.kill(t)


def kill_ranks(runner: Any) -> Callable[[AgentTask], None]:
    """kill(task) for PmiWorlds: SIGKILL every rank of the task through the runner."""
    return lambda t: runner.kill([t], signal.SIGKILL)


def routes(desc: dict, resources: Any, link: Any) -> bool:
    """Does this pilot send a multi-rank MPICH-ABI task that names no launcher to `pmi`? On a
    real pilot whose description names no launcher, when every node is this host or has a
    node executor; not when PILOTFISH_PMI=0 (what a benchmark's baseline sets)."""
    if desc.get("launcher") or os.environ.get("PILOTFISH_PMI", "1").strip() in ("0", "off"):
        return False
    return link is not None or not remote_nodes(resources)


def route(spec: Any, cwd: str | None) -> Any:
    """The task with launcher "pmi" when its program is of the MPICH ABI (launch/mpi_abi.py),
    else as it is."""
    if (
        program_mpi(
            spec.executable or "", list(spec.arguments or ()), dict(spec.environment or {}), cwd
        )
        == MPICH
    ):
        return msgspec.structs.replace(spec, launcher="pmi")
    return spec


def agent_node(resources: Any) -> str:
    """The name of the agent's own node among the pilot's (what reasons call it)."""
    remote = set(remote_nodes(resources))
    for n in resources.nodes:
        if n.name not in remote:
            return n.name
    return socket.gethostname()
