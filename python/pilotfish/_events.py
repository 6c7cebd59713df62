"""The profiler: every state change as a compact event, written in batches.

An event is (t, uid, name, detail). Files are a sequence of frames: a u32 little-endian
length, then a msgpack array of [t, uid, name, detail] arrays. Appending a tuple to a list is
the whole per-event cost on the hot path; encoding and writing happen per batch.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import Iterator, Optional

import msgspec

_LEN = struct.Struct("<I")
_encode = msgspec.msgpack.Encoder().encode
_decode_batch = msgspec.msgpack.Decoder(list[tuple[float, str, str, Optional[str]]]).decode

Event = tuple  # (t, uid, name, detail)

# Service groups and elastic pilots (agent/services.py, agent/_main.py; analytics reads them).
# A member's events carry its uid; a group's its name; the pilot's its uid.
MEMBER_START = "member_start"      # detail: group name
MEMBER_READY = "member_ready"      # detail: endpoint
MEMBER_LEAVE = "member_leave"      # asked to leave; detail: why
MEMBER_LEFT = "member_left"        # it is gone after a leave
MEMBER_FAIL = "member_fail"        # detail: why
MEMBER_RESTART = "member_restart"  # detail: the member it replaces
GROUP_EPOCH = "group_epoch"        # detail: "<epoch> <members>"
GROUP_RESIZE = "group_resize"      # detail: the target
PILOT_GROW = "pilot_grow"          # detail: "<unit> <nodes added> <nodes now>"
PILOT_DRAIN = "pilot_drain"        # detail: "<unit> <nodes>"
PILOT_SHRINK = "pilot_shrink"      # detail: "<unit> <nodes removed> <nodes now>"


class EventWriter:
    """Buffers events and writes them in frames. Thread-safe (one lock per append batch)."""

    def __init__(self, path: str | os.PathLike | None, enabled: bool = True,
                 flush_every: int = 4096, flush_interval: float = 0.5, now=time.time):
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
        if self.enabled:  # never through a planted link; 0600 (the agent's and the client's)
            from ._util import open_private

            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self._fh = os.fdopen(fd, "ab")

    def record(self, uid: str, name: str, detail: str | None = None, t: float | None = None) -> None:
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
            payload = _encode(buf)
            self._fh.write(_LEN.pack(len(payload)))
            self._fh.write(payload)
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
    pos, n = 0, len(data)
    while pos + 4 <= n:
        (length,) = _LEN.unpack_from(data, pos)
        end = pos + 4 + length
        if end > n:
            break
        yield _decode_batch(data[pos + 4:end])
        pos = end


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
