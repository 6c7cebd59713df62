"""Elastic pilots: nodes of a further allocation join as a partition of their own (grow); a
grown unit's nodes are drained and let go (shrink).

Grow: the new nodes get their own launcher instance and placer; placement sees them at once,
and waiting work that fits there moves at once. Shrink: no new placements on the unit;
waiting tasks move; restartable running tasks are stopped and queued again elsewhere;
service members leave (and are replaced elsewhere) and function workers retire (the rooms
that own tasks on the unit: ports.NodeLeaving); the others finish. `Resized` tells the
client when a unit joined or is gone.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .. import _events as E
from .. import _wire
from .._shapes import MAX_CORES_PER_NODE, MAX_GPUS_PER_NODE, MAX_MEM_MIB, misfit
from ..launch import LAUNCHERS, launchers
from .partition import Partition, add_work, task_work
from .partition_close import evacuate
from .ports import NodeLeaving
from .resources import Resources
from .table import REQUEUE, TaskTable


class Elastic:
    def __init__(
        self,
        table: TaskTable,
        launchers: Any,
        resources: Any,
        default_launcher: str,
        policy: str,
        may_rebalance: bool,
        launchers_changed: Callable[[list], None],
        forget_partition: Callable[[Partition], None],
    ):
        """launchers_changed(changed): what the loop does with launcher instances that became
        ready or failed; forget_partition(p): the loop drops p's sockets (rank notes)."""
        self.table = table
        self.partitions: list[Partition] = table.partitions
        self.launchers = launchers
        self.resources = resources
        self.default_launcher = default_launcher
        self.policy = policy
        self.may_rebalance = may_rebalance
        self.rebalance_on = len(self.partitions) > 1 and may_rebalance
        self.leaving: list[NodeLeaving] = []  # rooms whose tasks leave a drained unit their way
        self._launchers_changed = launchers_changed
        self._forget = forget_partition
        self._draining: list[Partition] = []
        # node and partition indices are never reused (events name them)
        self._next_node = sum(len(p.nodes) for p in self.partitions)
        self._next_part = len(self.partitions)

    def nodes(self) -> list:
        return [n for p in self.partitions for n in p.nodes]

    def grow(self, msg: _wire.Grow) -> None:
        """New nodes join as a partition of their own, with its own launcher instance;
        placement sees them at once (waiting tasks move there by rebalance)."""
        table = self.table
        now = table.clock.now()
        names = {n.name for p in self.partitions for n in p.nodes}
        problem = _grow_problem(msg, self.partitions, names)
        if problem is not None:
            table.send(_wire.Resized(msg.unit, self.nodes(), now, problem))
            return
        if len(self.partitions) == 1:  # one partition binds without counting work: count it
            for t in table.tasks.values():
                if t.partition is not None and not t.work and t.final_state is None:
                    t.work = task_work(t.spec)
                    add_work(t.partition, t.spec, t.work)
        res = Resources(list(msg.nodes), self.resources.source, self.resources.overrides)
        p = Partition(
            self._next_part,
            list(msg.nodes),
            self._next_node,
            res,
            msg.launcher or self.default_launcher,
            self.policy,
            table.clock,
        )
        self._next_node += len(msg.nodes)
        self._next_part += 1
        p.unit = msg.unit
        p.options = dict(msg.options)
        self.partitions.append(p)
        table.misfits.clear()
        self.rebalance_on = self.may_rebalance
        table.events.record(
            table.uid, E.PILOT_GROW, f"{msg.unit} {len(msg.nodes)} {len(self.nodes())}", now
        )
        table.events.record(
            table.uid,
            E.PARTITION,
            json.dumps(
                {"index": p.index, "nodes": p.names, "launcher": p.default_launcher, "unit": p.unit}
            ),
        )
        lm = self.launchers.get(p, None)
        started = [lm]
        if table.single_node_launcher is not None:  # its node executors start now too
            started.append(self.launchers.get(p, table.single_node_launcher))
        self._launchers_changed(self.launchers.poll(started))
        table.send(_wire.Resized(msg.unit, self.nodes(), table.clock.now()))
        # what waits elsewhere and fits here starts here now (as many as fill its cores;
        # rebalance steals only from longer queues)
        room = p.cores
        for q in self.partitions:
            if q is p or not q.scheduler.waiting or room <= 0:
                continue
            moved = q.scheduler.take(
                room,
                lambda key, shape=p.shape: misfit(key[0], key[1], key[2], key[3], shape) is None,
            )
            if moved:
                room -= sum(t.spec.ranks * t.spec.cores_per_rank for t in moved)
                table.move_to(p, moved)

    def shrink(self, msg: _wire.Shrink) -> None:
        """Drain grown units: no new placements; waiting tasks move; restartable running
        tasks are stopped and queued again elsewhere, service members leave (and are
        replaced elsewhere), the others finish. Resized tells when a unit is gone."""
        table = self.table
        now = table.clock.now()
        for unit in msg.units:
            p = next((q for q in self.partitions if q.unit == unit), None)
            if p is None or p.draining:
                table.send(
                    _wire.Resized(
                        unit,
                        self.nodes(),
                        now,
                        f"no grown unit {unit!r} in this pilot"
                        if p is None
                        else f"unit {unit!r} is being drained already",
                    )
                )
                continue
            p.draining = True
            table.events.record(table.uid, E.PILOT_DRAIN, f"{unit} {len(p.nodes)}", now)
            self._draining.append(p)
            held = [t for lm in p.launchers.values() for t in lm.held]
            for lm in p.launchers.values():
                lm.held = []
            for t in held:
                t.held = None
            moved = evacuate(table, p, held, f"draining ({unit} leaves the pilot)")
            table.bind(moved, table.clock.mono(), why=f"partition {p.index} drained")
            theirs: dict[int, set[str]] = {}
            requeue = []
            for t in table.tasks.values():
                if (
                    t.partition is not p
                    or not t.running
                    or t.final_state is not None
                    or t.kill_reason is not None
                ):
                    continue
                room = next((i for i, r in enumerate(self.leaving) if r.owns(t.spec.uid)), None)
                if room is not None:
                    theirs.setdefault(room, set()).add(t.spec.uid)
                elif t.spec.restartable:
                    t.kill_reason = (REQUEUE, f"its node left the pilot ({unit})")
                    requeue.append(t)
            for room, uids in theirs.items():
                self.leaving[room].leave(uids, f"its node leaves the pilot ({unit})")
            table.kill(requeue)
        self.check_drained()

    def check_drained(self) -> None:
        """Let go of draining units that nothing runs on any more."""
        table = self.table
        table.drain_check = False
        for p in list(self._draining):
            if any(t.partition is p and t.final_state is None for t in table.tasks.values()):
                continue
            self._draining.remove(p)
            for lm in p.launchers.values():
                if lm in self.launchers.starting:
                    self.launchers.starting.remove(lm)
            self._forget(p)
            self.launchers.stop_all([p])
            self.partitions.remove(p)
            table.misfits.clear()
            if len(self.partitions) == 1:
                self.rebalance_on = False
            now = table.clock.now()
            nodes = self.nodes()
            table.events.record(
                table.uid, E.PILOT_SHRINK, f"{p.unit} {len(p.nodes)} {len(nodes)}", now
            )
            table.send(_wire.Resized(p.unit, nodes, now))  # type: ignore[arg-type]  # nodes: the wire's list of node names


def _grow_problem(msg: _wire.Grow, partitions: list[Partition], names: set[str]) -> str | None:
    """Why these nodes cannot join, or None (the wire is an API: checked here too)."""
    if not msg.nodes:
        return "no nodes"
    if any(p.unit == msg.unit for p in partitions):
        return f"unit {msg.unit!r} joined already"
    if names & {n.name for n in msg.nodes}:
        return f"nodes {sorted(names & {n.name for n in msg.nodes})} are in the pilot already"
    if any(
        not n.name
        or not 1 <= n.cores <= MAX_CORES_PER_NODE
        or not 0 <= n.gpus <= MAX_GPUS_PER_NODE
        or not 0 <= n.mem <= MAX_MEM_MIB
        for n in msg.nodes
    ):
        return (
            f"nodes: each needs a name, 1..{MAX_CORES_PER_NODE} cores, "
            f"0..{MAX_GPUS_PER_NODE} GPUs, mem >= 0"
        )
    if len({n.name for n in msg.nodes}) != len(msg.nodes):
        return "nodes: names repeat"
    lm = msg.launcher
    if lm is not None and lm not in LAUNCHERS and lm not in launchers():
        return f"launcher {msg.launcher!r} is not a launch method"
    return None
