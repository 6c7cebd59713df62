"""Where the client's rooms meet: what one may use of another, declared (typing.Protocol).

    agent -> Bridge -> Router -> TaskRegistry  (Updates: UpdateSink)
                             -> the pilot's listener, PilotManager's (Hello, Bye, Heartbeat,
                                Missing, Resized: AgentListener)
                             -> ServiceGroup   (GroupView, MemberNews, GroupAck: GroupListener)

The import order is one way (tests/client/test_client_shape.py checks it): this module and
_bridge import nothing of the client; _router, adoption and session import these ports;
submit and task_books import session; task (the TaskManager) imports its books; _pilot_data
imports task (Pilot.prepare_env runs a task); pilot imports _pilot_data, launching, resume
and elastic (the floors: test_client_shape.FLOORS). So a lower room
never names a higher one's class: it is handed an object that fits a port. Every member
declared here is public (no room uses another module's underscored member: tests/test_layers.py);
those that are no user's say which rooms use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Protocol

if TYPE_CHECKING:
    import collections
    import threading

    from .. import _wire

# Each message from a pilot's agent that is the pilot's own (Hello, Bye, Heartbeat before a
# hello, Missing, Resized), on the IO thread.
AgentListener = Callable[[Any], None]


class UpdateSink(Protocol):
    """The session's task registry (_registry.TaskRegistry) as the router sees it."""

    def take(self, items: "list[_wire.Update]") -> None:
        """Apply a batch of task updates to the tasks' managers (IO thread)."""


class TaskEnds(UpdateSink, Protocol):
    """The session's task registry as the adopter (adoption.Adopter) sees it."""

    def finish_locally(self, tasks: "Iterable[TaskEntry]", state: str, reason: str) -> None:
        """End tasks nobody will report on (not journaled: they run again on resume)."""


class TaskOwner(Protocol):
    """A task's owner, its manager's books (task_books.TaskBooks), as the session's task
    registry reaches it."""

    def apply_updates(self, pairs: "list[tuple[Any, _wire.Update]]", journal: bool = True) -> None:
        """Apply (task, update) pairs of this manager's tasks, in order (IO thread)."""

    def finish_locally(self, tasks: list, state: str, reason: str, journal: bool = False) -> None:
        """Finalize tasks the agent will never report on."""


class TaskEntry(Protocol):
    """A task (task_books.Task) as the task registry and the adopter see it (its owner is the
    registry's entry, made when the task was submitted)."""

    uid: str
    state: str


class TaskCounts(Protocol):
    """A TaskManager as the progress display (progress.wait_with_progress) reads it: its
    per-state counters and its waits."""

    counts: "collections.Counter[str]"

    def __len__(self) -> int: ...

    def wait_tasks(
        self, uids: Any = None, state: Any = None, timeout: float | None = None
    ) -> list[str]: ...

    def get_tasks(self, uids: Any = None) -> list: ...


class GroupListener(NamedTuple):
    """A service group (services.ServiceGroup) as the router sees it: two of its methods,
    handed over by services.submit_group."""

    on: Callable[[Any], None]
    """A GroupView, MemberNews or GroupAck for this group (IO thread)."""

    pilot_final: Callable[[], None]
    """Its pilot ended: wake whoever waits on the group."""


class PilotPort(Protocol):
    """A pilot (pilot.Pilot) as a TaskManager and the service groups use it."""

    uid: str
    state: str
    reason: str | None
    sandbox: str
    envs: dict[str, dict]  # prepared environments (Pilot.prepare_env)
    description: Any  # its PilotDescription (resource "simulated": no agent runs)
    simulated: bool  # its resource is "simulated": no agent runs
    fn_sent: set[bytes]  # digests of the callables its agent was sent (under plane.fn_lock)

    @property
    def missing(self) -> set[str]:
        """Re-attached: the tasks its agent did not know."""

    @property
    def resync(self) -> list[str] | None:
        """Re-attached: the tasks asked about (None: a new pilot)."""

    @property
    def shape(self) -> list[tuple[int, int, int]] | None: ...

    @property
    def partition_shapes(self) -> list[list[tuple[int, int, int]]] | None: ...

    def misfit(
        self, ranks: int, cores_per_rank: int, gpus_per_rank: int, mem_per_rank: int
    ) -> tuple[str, str] | None: ...

    def grow(self, nodes: int = 1, timeout: float | None = 600.0) -> list[str]: ...

    def explain_tasks(self, uids: list[str], timeout: float) -> list[dict] | None:
        """The agent's explanations of these tasks (Task.explain), None without an answer."""

    def when_final(self, listener: Callable[[Any], None]) -> None:
        """listener(pilot) once the pilot reaches a final state (TaskManager.add_pilots)."""


class TaskHolder(Protocol):
    """An allocation policy (autoalloc.AutoAlloc) as a TaskManager it serves hands it the
    tasks it submits (TaskManager.holder; _held.hold) and asks why one waits."""

    def check(self, descs: list) -> None:
        """Raise DescriptionError (index, field, value, why) for a task no allocation of the
        policy can ever hold."""

    def held(self, owner: Any, tasks: list) -> None:
        """These registered tasks of `owner` (a TaskManager's books) wait for one of its
        pilots."""

    def why_waiting(self, uid: str) -> str:
        """Why a task it holds waits (Task.explain)."""


class SubmitPlane(Protocol):
    """The session's plane (plane.Plane) as the submit pipeline (submit.py) uses it."""

    bridge: Any  # send(pilot_uid, frame, on_sent=f): f(when) on the IO thread once it left
    journal: Any  # the session's journal: enabled, write_encoded(payloads) (all or nothing)
    registry: Any  # the session's task registry: entries {uid: (task, its owner)}
    fn_lock: "threading.Lock"  # held while a submit marks callables sent and queues frames

    def check_open(self) -> None:
        """Raise SessionClosed once the session is closed."""

    def next_task_uids(self, n: int) -> list[str]:
        """The next n task uids of the session."""

    def journal_error(self, e: OSError, what: str) -> Exception:
        """The error to raise for a journal write that failed."""


class EventSink(Protocol):
    """The session's event log (session.events, _events) as the submit pipeline records its
    tasks' first states."""

    enabled: bool  # off: nothing is recorded (no event tuples need building)

    def record_many(self, events: list) -> None:
        """(t, uid, event, detail) tuples, in order."""


class SubmitOwner(TaskOwner, Protocol):
    """A TaskManager's books (task_books.TaskBooks) as its submit pipeline (submit.register,
    submit.send) hands them its new
    tasks."""

    def make_tasks(self, uids: list[str], descs: list, pilot_uids: list[str], now: float) -> list:
        """Task objects in SCHEDULING (NEW then SCHEDULING at `now`), nowhere kept yet."""

    def keep_tasks(self, tasks: list, resumed: dict[int, tuple[str, str | None]]) -> None:
        """Registered tasks into the manager's books (its list, its counts; `resumed`: a
        resumed session's matches, put back in their state), then the callbacks of NEW and
        SCHEDULING, before any frame leaves."""

    def tasks_sent(self, tasks: list, when: float) -> None:
        """Their frame left (IO thread): SCHEDULING -> STAGING_INPUT."""
