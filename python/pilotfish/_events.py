"""The profiler: every state change as a compact event, written in batches.

An event is (t, uid, name, detail). Files are a sequence of frames: a u32 little-endian
length, then a msgpack array of [t, uid, name, detail] arrays. Appending a tuple to a list is
the whole per-event cost on the hot path; encoding and writing happen per batch.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator, Optional

import msgspec

from . import _frames

_encode = msgspec.msgpack.Encoder().encode
_decode_batch = msgspec.msgpack.Decoder(list[tuple[float, str, str, Optional[str]]]).decode

Event = tuple  # (t, uid, name, detail)

# -- The vocabulary: every event name, defined once --------------------------------------
# Producers record these and analytics read them; a literal name anywhere else fails
# tests/test_layers.py. States are events too (a task's or pilot's uid, the state's name):
# their names are states.py's. The detail of each event is said beside it.

# A task in the agent (its uid)
SCHEDULE_OK = "schedule_ok"  # placed on its slots; detail: "<ranks>x<cores>/<gpus> @<n>,..."
# (the pilot's node index of each rank: a live per-node view)
UNSCHEDULE = "unschedule"  # its slots are free again
EXEC_START = "exec_start"  # its launch is being built; detail: its launch method ("nodes"
# when its node executor spawns it (agent/node_link.py), "pmi", "srun", "direct", ...)
EXEC_OK = "exec_ok"  # spawned (the launcher's process, or the task's own)
LAUNCH_OK = "launch_ok"  # its first rank started (supervised launchers; simulated)
EXEC_STOP = "exec_stop"  # its last process ended
LAUNCH_RETRY = "launch_retry"  # launched again: its launcher failed before it ran; detail: why
LAUNCH_HUNG = "launch_hung"  # its launcher outlived its ranks and was killed; detail: why
LAUNCH_PARTIAL = "launch_partial"  # some ranks started, others never did: the launch is
# stopped and the task fails (retries apply); detail: which
RETRY = "retry"  # run again after a failure (retries=); detail: attempt, backoff
REQUEUE = "requeue"  # queued again (a restartable task stopped by a drain)

# The pilot's agent (the pilot's uid)
BOOTSTRAP_START = "bootstrap_start"
RESOURCES_OK = "resources_ok"  # detail: "<n> nodes, <c> cores, <g> gpus (<source>)"
PILOT_NODES = "pilot_nodes"  # (client) the nodes, once the agent said hello; detail: JSON
MPI_LAUNCHER = "mpi_launcher"  # the MPI launcher multi-rank tasks get; detail: its name
PARTITION = "partition"  # detail: JSON {index, nodes, launcher}
PARTITION_CLOSED = "partition_closed"  # its launcher could not start; detail: JSON
QUEUE_PLAN = "queue_plan"  # the scheduler planned its queue (policy "plan"); detail:
# JSON {partition_index, why, tasks, iterations, elapsed_s,
# made_at, baseline_s, best_s, estimates: [learned kinds]}
BAD_FRAME = "bad_frame"  # a frame from the client that did not decode; detail: why
CLIENT_REATTACH = "client_reattach"  # a resumed client; detail: tasks asked
DRAIN_START = "drain_start"  # detail: why
DRAIN_STOP = "drain_stop"
LEFTOVERS_KILLED = "leftovers_killed"  # detail: processes killed at the end
AGENT_STOP = "agent_stop"

# Launcher instances (the pilot's uid; detail: "<method>[ p<k>]: ...")
LAUNCHER_START = "launcher_start"
LAUNCHER_READY = "launcher_ready"
LAUNCHER_RECOVERED = "launcher_recovered"
LAUNCHER_FAILED = "launcher_failed"
LAUNCHER_RESTART = "launcher_restart"
LAUNCHER_RECYCLE = "launcher_recycle"
LAUNCHER_STUCK = "launcher_stuck"
LAUNCHER_STOP = "launcher_stop"

# The session (the client; uid "session", or a pilot's)
SESSION_START = "session_start"  # detail: the session uid
SESSION_RESUME = "session_resume"  # detail: the session uid
SESSION_STOP = "session_stop"
REFUSED = "refused"  # a connection or frame the client let not in; detail: why
REATTACHED = "reattached"  # (a pilot) a resumed session found its agent alive

# Service groups and elastic pilots (agent/services.py, agent/_main.py; analytics reads them).
# A member's events carry its uid; a group's its name; the pilot's its uid.
MEMBER_START = "member_start"  # detail: group name
MEMBER_READY = "member_ready"  # detail: endpoint
MEMBER_LEAVE = "member_leave"  # asked to leave; detail: why
MEMBER_LEFT = "member_left"  # it is gone after a leave
MEMBER_FAIL = "member_fail"  # detail: why
MEMBER_RESTART = "member_restart"  # detail: the member it replaces
ANNOUNCE_REFUSED = "announce_refused"  # detail: why
GROUP_EPOCH = "group_epoch"  # detail: "<epoch> <members>"
GROUP_RESIZE = "group_resize"  # detail: the target
PILOT_GROW = "pilot_grow"  # detail: "<unit> <nodes added> <nodes now>"
PILOT_DRAIN = "pilot_drain"  # detail: "<unit> <nodes>"
PILOT_SHRINK = "pilot_shrink"  # detail: "<unit> <nodes removed> <nodes now>"

# Node executors (agent/node_link.py), the pilot's uid
NODES_START = "nodes_start"  # one launcher step starts executors; detail: "<n> <nodes>"
NODE_UP = "node_up"  # an executor said hello; detail: "<node> <host> <pid>"
NODE_LOST = "node_lost"  # detail: "<node> <why>": its tasks fail, nothing more goes there

# A pilot's root and its sub-agents (agent/root.py): the pilot's uid
SUBAGENT_UP = "subagent_up"  # a sub-agent said hello; detail: "p<i> <pid> <nodes>"
SUBAGENT_LOST = "subagent_lost"  # a sub-agent ended before its pilot; detail: "p<i> <why>"

# The allocation policy (client/autoalloc.py): its uid ("alloc.0000"), a held task's own
ALLOC_POLICY = "alloc_policy"  # it starts; detail: JSON of its template's resource and limits
ALLOC_SUBMIT = "alloc_submit"  # an allocation requested; detail: "<pilot> (<n> nodes): why"
ALLOC_FAIL = "alloc_fail"  # a request that failed; detail: "<pilot>: the batch system's words"
ALLOC_PAUSE = "alloc_pause"  # no more requests after failures in a row; detail: why
ALLOC_RESUME = "alloc_resume"  # requests again (AutoAlloc.resume)
ALLOC_END = "alloc_end"  # an idle pilot ended (drained); detail: "<pilot>: why"
ALLOC_CANCEL = "alloc_cancel"  # a queued pilot no longer needed; detail: "<pilot>: why"
ALLOC_LIMIT = "alloc_limit"  # tasks wait and a limit holds the next request; detail: which
ROUTED = "routed"  # (a task) the policy sent a held task to a pilot; detail: the pilot

NAMES = frozenset(
    v
    for k, v in list(globals().items())
    if k.isupper() and isinstance(v, str) and not k.startswith("_")
)


class EventWriter:
    """Buffers events and writes them in frames. Thread-safe (one lock per append batch)."""

    def __init__(
        self,
        path: str | os.PathLike | None,
        enabled: bool = True,
        flush_every: int = 4096,
        flush_interval: float = 0.5,
        now=time.time,
    ):
        """now: the clock of events recorded without a time (the agent passes its own: a
        simulated pilot's is virtual)."""
        self.path = None if path is None else os.fspath(path)
        self._now = now
        self.enabled = enabled and path is not None
        self._buf: list[Event] = []
        self._lock = threading.Lock()
        self._flush_every = flush_every
        self._flush_interval = flush_interval
        self._last_flush = time.monotonic()
        self._fh = None
        if self.enabled and self.path is not None:  # never via a planted link; 0600 (agent, client)
            from ._util import open_private

            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self._fh = os.fdopen(fd, "ab")

    def record(
        self, uid: str, name: str, detail: str | None = None, t: float | None = None
    ) -> None:
        if not self.enabled:
            return
        self._buf.append((self._now() if t is None else t, uid, name, detail))
        if len(self._buf) >= self._flush_every:
            self.flush()

    def record_many(self, events: list[Event]) -> None:
        """events: (t, uid, name, detail) tuples."""
        if not self.enabled or not events:
            return
        with self._lock:
            self._buf.extend(events)
        if len(self._buf) >= self._flush_every:
            self.flush()

    def maybe_flush(self) -> None:
        if self._buf and time.monotonic() - self._last_flush >= self._flush_interval:
            self.flush()

    def flush(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            buf, self._buf = self._buf, []
            self._last_flush = time.monotonic()
            if not buf or self._fh is None:
                return
            self._fh.write(_frames.pack(_encode(buf)))
            self._fh.flush()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def read_events(path: str | os.PathLike) -> Iterator[list[Event]]:
    """Yield the batches of an events file; a torn last frame (a killed writer) is ignored."""
    with open(path, "rb") as f:
        data = f.read()
    for start, end in _frames.spans(data):
        yield _decode_batch(data[start:end])


def read_all_events(path: str | os.PathLike) -> list[Event]:
    out: list[Event] = []
    for batch in read_events(path):
        out.extend(batch)
    return out


class TaskRecord(msgspec.Struct, array_like=True):
    """One task's summary, written to <session>/tasks.msgpack when the session closes."""

    uid: str
    name: Optional[str]
    pilot: Optional[str]
    ranks: int
    cores_per_rank: int
    gpus_per_rank: int
    state: str
    exit_code: Optional[int]
    nodes: list[int]  # node index of each rank (empty if never placed)


_encode_records = msgspec.msgpack.Encoder().encode
_decode_records = msgspec.msgpack.Decoder(list[TaskRecord]).decode


def write_task_records(path: str | os.PathLike, records: list[TaskRecord]) -> None:
    from ._util import write_private  # (0600, through an unguessable temporary)

    write_private(os.fspath(path), _encode_records(records))


def read_task_records(path: str | os.PathLike) -> list[TaskRecord]:
    with open(path, "rb") as f:
        return _decode_records(f.read())
