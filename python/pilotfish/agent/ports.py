"""Declared interfaces where the agent's rooms meet (docs/internals.md, "The agent").

    Host        what the task table (table.py) gives the rooms it hosts -- the function pool
                (functions.py), the service registry (services.py), launch supervisors
                (supervisor.py) and the elastic part (elastic.py): accept, cancel, relaunch,
                a function call's end, events, the clock, messages to the client, and what
                waits in a partition's queue (waiting_for: a Waiting).
    TaskEnded   told when a task of the table ends (the pool's workers, the registry's
                members and holders are tasks too).
    NodeLeaving a room whose tasks leave a drained unit their own way (elastic.py).
    CallPool    the function pool as the table sees it: it may own what a cancel names, and
                its idle workers may give way to work a scheduling round left waiting.
    Runner      what turns placed tasks into processes and exits into results: TaskRunner
                (task_runner.py, real processes here), NodeRunner (node_runner.py: and on
                other hosts, through their node executors), SimRunner (simulation.py, a
                virtual clock).

A room is given the narrowest of these it needs, never the Agent (agent/_main.py): only
`__main__` imports that.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Mapping, NamedTuple, Protocol

from .._wire import TaskSpec
from .tasks import AgentTask


class StopWhy(enum.Enum):
    """Why the pilot stops (Host.stopping's third field): what its end does to what runs."""

    WALLTIME = "walltime"  # its walltime reached: what still runs FAILS, killed
    CLIENT_GONE = "client gone"  # no word from the client for client_timeout: CANCELED
    SHUTDOWN = "shutdown"  # the client asked (cancel, session close): CANCELED
    SIGNAL = "signal"  # the agent was sent SIGTERM (e.g. the batch job's end): CANCELED
    LAUNCHERS = "launchers"  # no partition can launch any more (the pilot FAILS): CANCELED


class Waiting(NamedTuple):
    """What waits in a partition's queue and what is free there (Host.waiting_for): exact
    counts kept as the queue changes (scheduler.py), never a scan."""

    tasks: int  # waiting tasks
    cores: int  # cores they ask for in all (ranks x cores per rank)
    gpus: int  # GPUs they ask for in all
    free_cores: int  # free in the partition now (reserved nodes' included)
    free_gpus: int
    settled: bool  # the last scheduling round left them waiting and nothing changed since:
    # they do not fit what is free (on one node, or for memory) -- the counts alone say
    # nothing of nodes or memory


class Host(Protocol):
    uid: str  # the pilot's
    sandbox: str
    desc: dict  # the pilot's description, as the client sent it
    resources: Any  # resources.Resources: the pilot's nodes when it started
    ctx: Any  # the agent's ZeroMQ context (its sockets share its threads)
    clock: Any  # clock.Clock: now(), mono(), real_mono()
    events: Any  # _events.EventWriter
    launchers: Any  # partition.Launchers

    @property
    def tasks(self) -> Mapping[str, AgentTask]:
        """Live tasks by uid (read only: move() changes them)."""

    @property
    def stopping(self) -> tuple[str, str, StopWhy] | None:
        """(pilot state, reason, why) once the pilot stops, else None."""

    @property
    def shapes(self) -> list:
        """Per partition, its nodes' (cores, gpus, mem)."""

    def accept(self, specs: list[TaskSpec]) -> None:
        """Tasks to run (never function calls), checked as any from the client."""

    def cancel(
        self, uids: list[str], reason: str = ..., running_state: str = ..., waiting_state: str = ...
    ) -> None:
        """Stop these tasks: those that wait end at once, those that run are killed."""

    def relaunch(self, tasks: list[AgentTask]) -> None:
        """Launch these tasks again on the slots they hold (a supervisor's retries)."""

    def signal(self, tasks: list[AgentTask], sig: int) -> None:
        """Signal the tasks' processes (their ranks, where a supervisor knows them)."""

    def misfit(self, shape: tuple) -> str | None:
        """Why no partition can ever hold a request of this (ranks, cores, gpus, mem)."""

    def check(self, spec: TaskSpec) -> str | None:
        """Why this task could not run on this pilot, or None."""

    def call_final(
        self,
        uid: str,
        state: str,
        started: float | None,
        ended: float,
        result: bytes | None,
        reason: str | None,
        stdout: str | None = None,
        stderr: str | None = None,
    ) -> None:
        """A function call ended: its events, journal record and update to the client."""

    def send(self, msg: Any) -> None:
        """A message for the client, after the updates gathered before it."""

    def waiting_for(self, partition: Any) -> Waiting:
        """What waits in this partition's queue (partition.Partition: a task's .partition)
        and what is free there. O(1)."""


class TaskEnded(Protocol):
    def task_ended(self, task: AgentTask, state: str, stderr: str | None) -> None: ...


class NodeLeaving(Protocol):
    """A room whose tasks leave a drained unit their own way (service members are replaced,
    function workers retire) rather than being requeued or left to finish."""

    def owns(self, uid: str) -> bool: ...

    def leave(self, uids: set[str], why: str) -> None: ...


class CallPool(Protocol):
    calls: Mapping[str, Any]

    def cancel(self, uids: list[str], state: str, reason: str) -> list[str]:
        """Cancel the calls among uids; the uids that are not its calls."""

    def give_way(self) -> None:
        """A scheduling round left tasks waiting: idle workers whose cores they need stop."""


class Runner(Protocol):
    @property
    def running(self) -> int:
        """Processes (or simulated tasks) running now."""

    signal_ranks: Callable[[AgentTask, int], None] | None
    on_spawn: Callable[[list[tuple[AgentTask, list[int]]]], None] | None

    def launch(self, tasks: list[AgentTask]) -> tuple[list[AgentTask], list]: ...

    def reap(self, block_s: float | None = None) -> tuple[list[AgentTask], list, list]: ...

    def read_outputs(self, tasks: list[AgentTask]) -> list[tuple[str | None, str | None]]: ...

    def kill(self, tasks: list[AgentTask], sig: int) -> None: ...

    def spawn_aux(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
    ) -> int:
        """Start a launcher's daemon; its exit comes back from reap() as an aux exit."""

    def next_event(self) -> float:
        """Monotonic time of the next exit it will produce by itself (a simulated one); inf
        for real processes (their exits are the kernel's)."""
