"""A pilot's grown units (Pilot.grow, Pilot.shrink): their nodes, their batch jobs, and the
agent's answers to the resizes that add and remove them.

Each grow is a unit (grow0, grow1, ... in the order grown) of nodes of the pilot's declared
shape, with the batch job that holds them (a Slurm unit's holder job, batch/holder.py) or
none (a local pilot's); shrink gives back whole units, newest first. A unit leaves once the
agent's Resized no longer lists its nodes: its job is canceled then. The Pilot keeps its
state and talks to its agent; GrownUnits keeps the units and waits for the answers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from .. import _wire
from .. import states as S
from .._errors import DescriptionError, PilotfishError
from ..batch import BatchJob

log = logging.getLogger("pilotfish.client")


class GrownUnits:
    """The grown units of pilot `uid`, in the order grown, and the resizes it waits for."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self._units: dict[str, tuple[list[_wire.NodeInfo], BatchJob | None]] = {}
        self._n = 0
        self._answers: dict[str, _wire.Resized] = {}  # unit -> the agent's Resized
        self._cond = threading.Condition()

    def name_next(self) -> str:
        """A new unit's name (grow0, grow1, ...): never given twice."""
        unit = f"grow{self._n}"
        self._n += 1
        return unit

    def add(self, unit: str, nodes: list[_wire.NodeInfo], job: BatchJob | None) -> None:
        """A unit grown (before the agent is told: its nodes count in the pilot's shape)."""
        self._units[unit] = (nodes, job)

    def drop(self, unit: str) -> None:
        """A unit the agent refused or never took (its job is the caller's to end)."""
        self._units.pop(unit, None)

    def node_lists(self) -> list[list[_wire.NodeInfo]]:
        """Each unit's nodes, in the order grown (the pilot's shape ends with them)."""
        return [nodes for nodes, _ in self._units.values()]

    def nodes_of(self, unit: str) -> list[_wire.NodeInfo]:
        """The unit's nodes ([] for one that has left)."""
        got = self._units.get(unit)
        return got[0] if got else []

    def job_of(self, unit: str) -> BatchJob | None:
        """The batch job holding the unit's nodes (None: a unit of the pilot's own job, or one
        that has left)."""
        got = self._units.get(unit)
        return got[1] if got else None

    def select(self, nodes, own: set[str]) -> list[str]:
        """The units `nodes` names for shrink: a count (the newest units that add up to it)
        or node names (whole units). DescriptionError naming the value and why otherwise;
        `own`: the pilot's own node names (its batch job's: never given back)."""
        units = list(self._units)
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            if nodes < 1:
                raise DescriptionError("Pilot.shrink", "nodes", nodes, "must be >= 1")
            out, n = [], 0
            for u in reversed(units):
                if n >= nodes:
                    break
                out.append(u)
                n += len(self._units[u][0])
            if n != nodes:
                sizes = [len(self._units[u][0]) for u in reversed(units)]
                raise DescriptionError(
                    "Pilot.shrink",
                    "nodes",
                    nodes,
                    f"{self.uid} has {sum(sizes)} grown node(s), in units of {sizes} (newest "
                    "first): shrink gives back whole units"
                    if sizes
                    else f"{self.uid} has no grown nodes (its own nodes are its batch job's)",
                )
            return out
        if isinstance(nodes, str) or not all(isinstance(x, str) for x in nodes):
            raise DescriptionError(
                "Pilot.shrink", "nodes", nodes, "must be a node count or a list of node names"
            )
        wanted = set(nodes)
        out = [u for u in units if {n.name for n in self._units[u][0]} & wanted]
        covered = {n.name for u in out for n in self._units[u][0]}
        unknown = sorted(wanted - covered)
        if unknown:
            raise DescriptionError(
                "Pilot.shrink",
                "nodes",
                unknown,
                "are the pilot's own nodes (its batch job's): only grown nodes are given back"
                if set(unknown) <= own
                else f"no such node in {self.uid}",
            )
        if covered != wanted:
            raise DescriptionError(
                "Pilot.shrink",
                "nodes",
                sorted(wanted),
                f"grown units are given back whole: also name {sorted(covered - wanted)}",
            )
        return out

    def expect(self, units: list[str]) -> None:
        """Forget earlier answers about these units: a resize of them is about to be sent."""
        with self._cond:
            for u in units:
                self._answers.pop(u, None)

    def resized(self, msg: _wire.Resized) -> None:
        """The agent's Resized (IO thread), first: a unit whose nodes it no longer lists has
        left (its job ends). Before the pilot takes the new nodes: its shape is cut into
        partitions by what is grown."""
        if msg.error is None:
            unit = self._units.get(msg.unit)
            now = {n.name for n in msg.nodes}
            if unit is not None and not {n.name for n in unit[0]} & now:  # it left: its job ends
                del self._units[msg.unit]
                if unit[1] is not None:
                    cancel_quietly(unit[1])

    def answered(self, msg: _wire.Resized) -> None:
        """The agent's Resized (IO thread), last (once the pilot took its nodes): whoever
        waits for the unit wakes."""
        with self._cond:
            self._answers[msg.unit] = msg
            self._cond.notify_all()

    def wait(self, unit: str, deadline: float | None, state: Callable[[], str]) -> _wire.Resized:
        """The agent's answer about `unit`; PilotfishError if the pilot ends first (state():
        the pilot's state now) or the deadline (monotonic) passes."""
        with self._cond:
            while unit not in self._answers:
                if state() in S.FINAL:
                    raise PilotfishError(f"{self.uid} ended ({state()}) during a resize")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise PilotfishError(f"{self.uid}: resize of {unit} not done in time")
                self._cond.wait(1.0 if left is None else min(left, 1.0))
            return self._answers.pop(unit)

    def end(self) -> None:
        """The pilot ended: every unit goes (its job canceled); resize waits wake."""
        for unit, (_, job) in list(self._units.items()):
            if job is not None:
                cancel_quietly(job)
            self._units.pop(unit, None)
        with self._cond:
            self._cond.notify_all()


def cancel_quietly(job: BatchJob) -> None:
    """Cancel a grown unit's job; a failure is logged (its walltime ends it anyway)."""
    try:
        job.cancel()
    except Exception as e:  # noqa: BLE001 -- its walltime ends it anyway
        log.warning("cancel of a grown unit's job failed: %s", e)
