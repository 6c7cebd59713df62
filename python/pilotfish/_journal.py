"""Journals: append-only logs that let a session resume without losing or re-running work.

Two journals, one format (frames: u32 little-endian length + a msgpack array of records):

- the client's `<session>/journal`: pilots and tasks as submitted (descriptions), and every
  final state the client learns;
- each agent's `<pilot sandbox>/agent.journal`: every final state, written *before* the
  update leaves the agent.

Records are written with one write() per batch on an O_APPEND descriptor, so a killed process
loses nothing it wrote (the page cache keeps it); fsync runs at most every `sync_s` seconds,
bounding what a machine crash can lose. A torn last frame (killed mid-write) is ignored on
reading.

Record forms (lists, first item the kind):
  ["pilot", uid, description-dict, sandbox]
  ["task", uid, pilot_uid, description-values-dict]        (only fields away from defaults)
  ["final", uid, state, exit_code, signal, reason, t]
  ["session", next_task_id, next_pilot_id]                   (counters, at close)
"""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import Any, Iterator

import msgspec

_LEN = struct.Struct("<I")
_encode = msgspec.msgpack.Encoder().encode
encode_records = _encode
_decode = msgspec.msgpack.Decoder().decode


class Journal:
    """Append records in batches; thread-safe."""

    def __init__(self, path: str, sync_s: float = 1.0, enabled: bool = True):
        self.path = path
        self.enabled = enabled
        self.sync_s = sync_s
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600) \
            if enabled else -1
        self._last_sync = time.monotonic()
        self._dirty = False

    def write(self, records: list[Any]) -> None:
        """One frame, one write(): durable against a killed process at once."""
        if not records or self._fd < 0:
            return
        self.write_encoded([_encode(records)])

    def write_encoded(self, payloads: list[bytes]) -> None:
        """Frames already encoded (msgpack arrays of records), in one write()."""
        if not payloads or self._fd < 0:
            return
        data = b"".join(_LEN.pack(len(p)) + p for p in payloads)
        with self._lock:
            if self._fd < 0:
                return
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self._dirty = True
            if time.monotonic() - self._last_sync >= self.sync_s:
                self._sync_locked()

    def maybe_sync(self) -> None:
        if self._dirty and time.monotonic() - self._last_sync >= self.sync_s:
            with self._lock:
                self._sync_locked()

    def sync(self) -> None:
        with self._lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        if self._fd >= 0 and self._dirty:
            os.fsync(self._fd)
            self._dirty = False
        self._last_sync = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._sync_locked()
                os.close(self._fd)
                self._fd = -1


def read_journal(path: str) -> Iterator[list]:
    """Every record of a journal, in order (nothing if the file does not exist)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return
    pos, n = 0, len(data)
    while pos + 4 <= n:
        (length,) = _LEN.unpack_from(data, pos)
        end = pos + 4 + length
        if end > n:
            break  # torn by a kill mid-write
        try:
            records = _decode(data[pos + 4:end])
        except msgspec.DecodeError:
            break
        yield from records
        pos = end


def finals(path: str) -> dict[str, list]:
    """uid -> its last ["final", ...] record in a journal."""
    out = {}
    for r in read_journal(path):
        if r and r[0] == "final":
            out[r[1]] = r
    return out
