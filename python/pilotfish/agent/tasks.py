"""The agent's task: where it is (one explicit state) and what the decisions about it need --
and the one function that changes that state, refusing a move that is not in the table.

    NEW ──► WAITING ──► PLACED ──► RUNNING ──► FINAL
     │         │  ▲        │  ▲       │ │ ▲
     │         │  └ moved  ▼  │       │ │ └ relaunch (same slots)
     │         │         HELD ┘       │ └──► NEW (retry, requeue: back to the queue)
     │         ▼ (canceled, unplaceable)
     │      DROPPED ──► FINAL
     └──► BACKOFF (a failed task's retry wait) ──► WAITING | FINAL

NEW: received, or back from a run (retry, requeue) or from a closed launcher; WAITING: in its
partition's scheduler queue (the heaps skip entries whose task is no longer WAITING: lazy
removal); PLACED: the placer gave it slots; HELD: placed, waiting for its launcher instance
to be ready (task.held names it); RUNNING: spawned, its processes run or are being judged by
supervision; BACKOFF: failed, waiting out its retry backoff (a timer queues it again);
DROPPED: out of the queue without being placed (canceled, unplaceable); FINAL: reported DONE,
FAILED or CANCELED (final_state says which). Every legal move is in LEGAL; `move` raises
IllegalTransition for any other -- a bug, never a task's fault, so it is loud.
"""

from __future__ import annotations

import enum
from typing import Any

from .._wire import RankSlot


class TaskState(enum.Enum):
    NEW = "new"
    WAITING = "waiting"
    PLACED = "placed"
    HELD = "held"
    RUNNING = "running"
    BACKOFF = "backoff"
    DROPPED = "dropped"
    FINAL = "final"

    # members are singletons compared by identity: hashed as such in C (Enum's own __hash__
    # is Python code, and move() hashes two states per call, four calls per task)
    __hash__ = object.__hash__


NEW, WAITING, PLACED, HELD = TaskState.NEW, TaskState.WAITING, TaskState.PLACED, TaskState.HELD
RUNNING, BACKOFF, DROPPED, FINAL = (
    TaskState.RUNNING,
    TaskState.BACKOFF,
    TaskState.DROPPED,
    TaskState.FINAL,
)

# from -> the states it may go to (and why)
LEGAL: dict[TaskState, frozenset[TaskState]] = {
    # queued; refused on arrival (a bad spec, no partition holds it); a retry's backoff
    NEW: frozenset({WAITING, FINAL, BACKOFF}),
    # placed; moved to another partition's queue; canceled or unplaceable (DROPPED); failed
    # or canceled where it waited (no partition left, the pilot's end)
    WAITING: frozenset({PLACED, WAITING, DROPPED, FINAL}),
    # launched; its launcher is not ready yet; it could not be launched
    PLACED: frozenset({RUNNING, HELD, FINAL}),
    # its launcher became ready; ... is still starting (polled again); canceled, or its
    # launcher failed for good; its partition closed (back to the queues, elsewhere)
    HELD: frozenset({RUNNING, HELD, FINAL, NEW}),
    # ended (or canceled while it ran); relaunched by its supervisor on the same slots, whose
    # launcher may be starting again (HELD); back to the queue (retry, requeue)
    RUNNING: frozenset({FINAL, RUNNING, HELD, NEW}),
    # its backoff ended (queued again); canceled meanwhile, or the pilot's end
    BACKOFF: frozenset({WAITING, FINAL}),
    DROPPED: frozenset({FINAL}),
    FINAL: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A task asked to move where the state table has no arrow: a bug in the agent."""


def move(task: "AgentTask", to: TaskState) -> None:
    """The one place a task's state changes."""
    if to not in LEGAL[task.state]:
        raise IllegalTransition(
            f"task {task.spec.uid}: {task.state.name} -> {to.name} is not "
            f"a move the agent makes (tasks.LEGAL)"
        )
    task.state = to


class AgentTask:
    """The agent's view of one task."""

    __slots__ = (
        "spec",
        "seq",
        "key",
        "state",
        "slots",
        "procs",
        "running",
        "exit_code",
        "signal",
        "reason",
        "kill_reason",
        "out_paths",
        "cwd",
        "final_state",
        "released",
        "lm",
        "launch",
        "attempt",
        "queued",
        "spool",
        "partition",
        "work",
        "held",
        "timed",
        "extra_outs",
        "gen",
        "rkeys",
    )

    def __init__(self, spec, seq: int):
        self.spec = spec
        self.seq = seq
        self.key = seq  # placement key in the Rust placer
        self.state = NEW  # changed by move() only
        self.slots: list[RankSlot] | None = None
        self.procs: list[int] = []  # pids
        self.rkeys: list[int] | None = None  # spawn keys of its processes on node executors
        self.running = 0
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.reason: str | None = None
        self.kill_reason: tuple[str, str] | None = None  # (final state, why) when we kill it
        self.out_paths: tuple[str | None, str | None] = (None, None)
        self.released = False
        self.cwd: str | None = None
        self.final_state: str | None = None
        self.lm: Any = None  # its launch method, once built
        self.launch: Any = None  # its LaunchRecord (supervisor.py): supervised methods only
        self.attempt = 0  # retries done so far
        self.queued = 0.0  # when it last joined the scheduler's queue (aging)
        self.spool = -1  # its captured-output files in the spool (TaskRunner), while it has them
        self.partition: Any = None  # the Partition it is bound to (agent/partition.py)
        self.work = 0.0  # what it adds to its partition's bound work (meta-scheduler)
        self.held: Any = None  # the Launcher it waits for, placed, while that one starts
        self.timed = False  # its timeout timer is set (once, at its first launch)
        self.extra_outs = 0  # processes beyond the first whose captured output is beside it
        self.gen = 0  # bumped when it goes back to waiting: older timers are not for it

    def reset_for_retry(self) -> None:
        """Back to NEW, as if it just arrived (its key is free again in the placer)."""
        move(self, NEW)
        self.gen += 1
        self.released = False
        self.slots = None
        self.procs = []
        self.running = 0
        self.exit_code = self.signal = self.reason = self.kill_reason = None
        self.launch = None
