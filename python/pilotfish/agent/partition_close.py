"""What happens to a partition whose launcher changed: launcher instances that became ready
launch what waited for them; one that cannot start closes its partition (when the partition
has no other way to run its tasks) or fails the tasks that asked for it; a closed or draining
partition's waiting and held tasks are evacuated, to be bound elsewhere (or fail with the
reason when no partition is left). Functions of the task table (table.py, its public
methods: launch, release, final, bind, stop, events), which calls them.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import _events as E
from .. import states as S
from .partition import READY, Partition
from .ports import StopWhy

log = logging.getLogger("pilotfish.agent")


def launchers_changed(table: Any, changed: list) -> None:
    """Launcher instances that became ready (launch what waited for them) or failed
    (close the partition, or fail the tasks that asked for that launcher)."""
    for lm in changed:
        held, lm.held = lm.held, []
        for t in held:
            t.held = None
        if lm.state == READY:
            live = [t for t in held if t.final_state is None and t.kill_reason is None]
            if live:
                table.launch(live, [])
            for t in held:  # canceled or timed out while it waited: it never ran
                if t.final_state is None and t.kill_reason is not None:
                    table.release([t])
                    t.reason = t.kill_reason[1]
                    table.final(t, t.kill_reason[0])
            continue
        p = lm.partition
        # (node executors that cannot start at all: the partition's small tasks have no
        # way to run either)
        if lm.name in (p.default_launcher, table.single_node_launcher) and p.open:
            close_partition(table, p, f"launcher {lm.name} cannot be started: {lm.reason}", held)
        else:
            table.release(held)
            for t in held:
                if t.final_state is None:
                    t.reason = (
                        f"launch failed: launcher {lm.name} of partition "
                        f"{p.index} cannot be started: {lm.reason}"
                    )
                    table.final(t, S.FAILED)


def close_partition(table: Any, p: Partition, why: str, held: list) -> None:
    """Nothing can run on p any more: its nodes are reported, its waiting and held tasks
    go to the other partitions (or fail with the reason if none can hold them)."""
    table.events.record(
        table.uid,
        E.PARTITION_CLOSED,
        f"p{p.index} ({', '.join(p.names[:8])}{'...' if len(p.names) > 8 else ''}): {why}"[:500],
    )
    log.error(
        "partition %d closed (%d nodes: %s): %s", p.index, len(p.names), ",".join(p.names), why
    )
    moved = evacuate(table, p, held, why)
    if not any(q.open for q in table.partitions):
        table.stop(S.FAILED, f"no partition can launch: {why}", StopWhy.LAUNCHERS)
        for t in moved:
            t.reason = f"partition {p.index} closed: {why}"
            table.final(t, S.FAILED)
        return
    table.bind(moved, table.clock.mono(), why=f"partition {p.index} closed: {why}")


def evacuate(table: Any, p: Partition, held: list, why: str) -> list:
    """p takes nothing new (closed, or drained): its waiting tasks and those held for its
    launcher (their slots given back) come out, to be bound elsewhere."""
    p.open = False
    p.closed_reason = why
    table.release(held)
    moved = p.scheduler.drain_waiting()
    for t in held:
        if t.final_state is None and t.kill_reason is None:
            t.reset_for_retry()
            moved.append(t)
    return moved
