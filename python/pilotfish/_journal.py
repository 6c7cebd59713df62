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
  ["out", uid, stdout, stderr]                               (agent, with a final whose task
                                                             printed something)

`keeper.journal` (same format, final records only): the tasks the agent's keeper saw end after
the agent itself died (see agent/keeper.py).

Beside the agent's journal, the Rust core appends every exit to `agent.exits` the moment it
reaps it (24-byte records: key, exit code, signal, time; a spawn record, signal -1 and the pid
in the code field, as each child starts): `agent_finals` reads both, so a task
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
SPAWN_MARK = -1  # an exit-log record with this in its signal field is a spawn: code = pid
INTENT_MARK = -2  # ... with this: written just before the spawn of that key was tried


def read_exit_log(sandbox: str, intents: set[int] | None = None
                  ) -> tuple[dict[int, tuple[int, int, float]], dict[int, int]]:
    """({key: (exit code, signal, time)}, {key: pid}) from a pilot's `agent.exits`: the Rust
    core writes an intent record before each spawn, a spawn record (pid) as the child
    exists and an exit record as it is reaped; the agent's keeper appends the exits of what
    it inherited in the same format. Keys with an intent record are added to `intents`."""
    try:
        with open(os.path.join(sandbox, "agent.exits"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}, {}
    exits: dict[int, tuple[int, int, float]] = {}
    pids: dict[int, int] = {}
    for i in range(0, len(data) - len(data) % _EXIT.size, _EXIT.size):
        key, code, sig, t = _EXIT.unpack_from(data, i)
        if sig >= 0:
            exits[key] = (code, sig, t)
        elif sig == SPAWN_MARK:
            pids[key] = code
        elif intents is not None:
            intents.add(key)
    return exits, pids


def exit_record(key: int, code: int, sig: int, t: float) -> bytes:
    return _EXIT.pack(key, code, sig, t)


def spawn_records(sandbox: str) -> tuple[dict[str, list], dict[str, tuple[list[int], bool]]]:
    """(finals, spawns) of an agent journal: {uid: final record}, {uid: (keys of its last
    spawn, done on exit)}."""
    out: dict[str, list] = {}
    spawned: dict[str, tuple[list[int], bool]] = {}
    for r in read_journal(os.path.join(sandbox, "agent.journal")):
        if r and r[0] == "final":
            out[r[1]] = r
        elif r and r[0] == "spawn":
            spawned[r[1]] = (r[2], r[3])
    return out, spawned


def agent_finals(sandbox: str) -> dict[str, list]:
    """uid -> final record, from a pilot's agent journal and its keeper's (the tasks it saw
    end after the agent died); for tasks neither has, from the exit log: every process of the
    task's last spawn exited 0 (and nothing was left to do after, like output staging) means
    DONE. Anything else is not final: it runs again."""
    out, spawned = spawn_records(sandbox)
    for uid, rec in finals(os.path.join(sandbox, "keeper.journal")).items():
        out.setdefault(uid, rec)
    pending = {uid: s for uid, s in spawned.items() if uid not in out and s[1]}
    if not pending:
        return out
    exits, _ = read_exit_log(sandbox)
    for uid, (keys, _) in pending.items():
        ends = [exits.get(k) for k in keys]
        if keys and all(e is not None and e[0] == 0 and e[1] == 0 for e in ends):
            out[uid] = ["final", uid, "DONE", 0, None,
                        "recovered from the exit log (its agent ended before reporting it)",
                        max(e[2] for e in ends)]  # type: ignore[index]
    return out


KEEPER_BEAT_S = 2.0  # a keeper that holds tasks rewrites keeper.json this often


def keeper_state(sandbox: str) -> dict | None:
    """What a pilot's keeper says after its agent died: {"pid", "host", "agent_status",
    "adopted": [task uids], "done": bool, "t"}, or None (agent alive, ended cleanly, or never
    kept)."""
    import json

    try:
        with open(os.path.join(sandbox, "keeper.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def keeper_adopted(sandbox: str, timeout: float = 10.0, live_only: bool = True) -> set[str]:
    """The task uids a live keeper holds (it may still be working out which: wait for it, up
    to timeout); empty when there is no keeper holding anything. live_only=False: also those
    of a keeper that is done (their finals, if any, are in keeper.journal)."""
    end = time.monotonic() + timeout
    while True:
        state = keeper_state(sandbox)
        if state is None:
            return set()
        if state.get("adopted") is not None and (not live_only or keeper_alive(sandbox, state)):
            return set(state["adopted"])
        if not keeper_alive(sandbox, state):
            return set()
        if time.monotonic() > end:
            return set()
        time.sleep(0.02)


def keeper_alive(sandbox: str, state: dict | None = None) -> bool:
    """Whether the keeper still holds tasks: not done, and (same host and pid namespace) its
    pid runs this sandbox's keeper, (elsewhere) it beat recently."""
    state = keeper_state(sandbox) if state is None else state
    if not state or state.get("done"):
        return False
    from ._util import pid_scope

    if state.get("scope") == pid_scope():  # its pid means something here
        try:
            with open(f"/proc/{int(state['pid'])}/cmdline", "rb") as f:
                return sandbox.encode() in f.read()
        except (OSError, ValueError, KeyError):
            return False
    return time.time() - float(state.get("t", 0)) < 3 * KEEPER_BEAT_S


def finals(path: str) -> dict[str, list]:
    """uid -> its last ["final", ...] record in a journal."""
    out = {}
    for r in read_journal(path):
        if r and r[0] == "final":
            out[r[1]] = r
    return out
