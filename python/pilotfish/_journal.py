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
  ["spawn", uid, [process keys], done_on_exit]              (agent, before the spawn)

Beside the agent's journal, the Rust core appends every exit to `agent.exits` the moment it
reaps it (24-byte records: key, exit code, signal, time): `agent_finals` reads both, so a task
that ended just before its agent was killed is not run again.
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


_EXIT = struct.Struct("<qiid")


def agent_finals(sandbox: str) -> dict[str, list]:
    """uid -> final record, from a pilot's agent journal; for tasks it has none for, from the
    exit log: every process of the task's last spawn exited 0 (and nothing was left to do
    after, like output staging) means DONE. Anything else is not final: it runs again."""
    out: dict[str, list] = {}
    spawned: dict[str, tuple[list[int], bool]] = {}
    for r in read_journal(os.path.join(sandbox, "agent.journal")):
        if r and r[0] == "final":
            out[r[1]] = r
        elif r and r[0] == "spawn":
            spawned[r[1]] = (r[2], r[3])
    pending = {uid: s for uid, s in spawned.items() if uid not in out and s[1]}
    if not pending:
        return out
    try:
        with open(os.path.join(sandbox, "agent.exits"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return out
    exits = {}
    for i in range(0, len(data) - len(data) % _EXIT.size, _EXIT.size):
        key, code, sig, t = _EXIT.unpack_from(data, i)
        exits[key] = (code, sig, t)
    for uid, (keys, _) in pending.items():
        ends = [exits.get(k) for k in keys]
        if keys and all(e is not None and e[0] == 0 and e[1] == 0 for e in ends):
            out[uid] = ["final", uid, "DONE", 0, None,
                        "recovered from the exit log (its agent ended before reporting it)",
                        max(e[2] for e in ends)]  # type: ignore[index]
    return out


def finals(path: str) -> dict[str, list]:
    """uid -> its last ["final", ...] record in a journal."""
    out = {}
    for r in read_journal(path):
        if r and r[0] == "final":
            out[r[1]] = r
    return out
