"""Journals: append-only logs that let a session resume without losing or re-running work.

Two journals, one format (frames, _frames.py: a u32 little-endian length + a msgpack array
of records):

- the client's `<session>/journal`: pilots and tasks as submitted (descriptions), and every
  final state the client learns;
- each agent's `<pilot sandbox>/agent.journal`: every final state, written *before* the
  update leaves the agent.

Records are written with one write() per batch on an O_APPEND descriptor, so a killed process
loses nothing it wrote (the page cache keeps it); fsync runs at most every `sync_s` seconds,
bounding what a machine crash can lose. A write that fails (a full disk) is taken back
(ftruncate to where it began): the journal never holds half a batch before a whole one.

Reading tells a torn tail from damage. A last frame cut short by a kill mid-write (its length
runs past the end of the file and what is there is the start of a msgpack array, or the file
ends inside a length, or in zeros a crash left) is ignored, and a Journal opened with
repair=True cuts it off before appending. Anything else -- a frame that does not decode, a
length that does not match its records, a record of the wrong shape -- is damage:
read_journal(strict=True) raises JournalError naming the file and the frame's byte offset
(the client's resume reads so); lenient readers stop there with a warning. One exception, for
journals of pilotfish versions that appended after a torn frame without cutting it off: a
frame that is the start of a msgpack array and is followed by whole frames to the end of the
file is read past.

Record forms (lists, first item the kind; RECORD_SHAPES checks them):
  ["pilot", uid, description-dict, sandbox, replaced pilot uid | None]
  ["task", uid, pilot_uid, description-values-dict]        (only fields away from defaults)
  ["final", uid, state, exit_code, signal, reason, t]
  ["spawn", uid, [process keys], done_on_exit]              (agent, before the spawn)
  ["out", uid, stdout, stderr]                               (agent, with a final whose task
                                                             printed something)

`keeper.journal` (same format, final records only): the tasks the agent's keeper saw end after
the agent itself died (see agent/keeper.py).

Beside the agent's journal, the Rust core appends every exit to `agent.exits` the moment it
reaps it (24-byte records: key, exit code, signal, time; a spawn record, signal -1 and the pid
in the code field, as each child starts; _exit_log.py): `agent_finals` reads both, so a task
that ended just before its agent was killed is not run again.
  ["session", next_task_id, next_pilot_id]                   (counters, at close)
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Iterator

import msgspec

from . import _frames
from ._errors import JournalError
from ._exit_log import read_exit_log, read_node_exit_logs
from ._util import open_private, read_private

log = logging.getLogger("pilotfish.journal")

_LEN = _frames.LEN  # (the framing: _frames.py)
_encode = msgspec.msgpack.Encoder().encode
encode_records = _encode
_decode = msgspec.msgpack.Decoder().decode


class Journal:
    """Append records in batches; thread-safe.

    The file is opened O_NOFOLLOW, created 0600 (see _util.open_private). repair=True: a
    torn last frame (a kill mid-write) is cut off first, so what is appended follows whole
    frames (the client does this on resume). A write that fails is taken back and raised
    (OSError); if it cannot be taken back, every later write raises too."""

    def __init__(self, path: str, sync_s: float = 1.0, enabled: bool = True, repair: bool = False):
        self.path = path
        self.enabled = enabled
        self.sync_s = sync_s
        self._lock = threading.Lock()
        self._broken: OSError | None = None
        self._fd = -1
        self._size = 0  # where the next frame begins (only this object appends)
        if enabled:
            self._fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                self._size = os.fstat(self._fd).st_size
                if repair and self._size:
                    self._cut_torn_tail()
            except BaseException:
                os.close(self._fd)
                raise
        self._last_sync = time.monotonic()
        self._dirty = False

    def _cut_torn_tail(self) -> None:
        data = read_private(self.path)
        end = whole_frames_end(data)
        if end is not None and end < len(data):
            log.warning(
                "journal %s: the last %d bytes are a record torn by a kill mid-write: "
                "cut off before appending",
                self.path,
                len(data) - end,
            )
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
            self._size = end

    def write(self, records: list[Any]) -> None:
        """One frame, one write(): durable against a killed process at once."""
        if not records or self._fd < 0:
            return
        self.write_encoded([_encode(records)])

    def write_encoded(self, payloads: list[bytes]) -> None:
        """Frames already encoded (msgpack arrays of records), in one write(); all or nothing:
        a write that fails (ENOSPC...) is cut off again and the OSError raised."""
        if not payloads or self._fd < 0:
            return
        data = _frames.pack_all(payloads)
        with self._lock:
            if self._fd < 0:
                return
            if self._broken is not None:
                raise OSError(
                    self._broken.errno,
                    f"nothing more is written to this journal: a "
                    f"failed write could not be taken back ({self._broken.strerror})",
                    self.path,
                )
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
            except OSError as e:
                self._take_back(e)
                raise
            self._size += len(data)
            self._dirty = True
            if time.monotonic() - self._last_sync >= self.sync_s:
                self._sync_locked()

    def _take_back(self, e: OSError) -> None:
        """After a failed write: cut what it wrote, or refuse to write after it."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as again:
            self._broken = e
            log.error(
                "journal %s: a failed write (%s) could not be cut off (%s): nothing more "
                "is written to it",
                self.path,
                e.strerror,
                again.strerror,
            )

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
        """Sync and close; the descriptor is closed even if the sync fails (raised after)."""
        with self._lock:
            if self._fd >= 0:
                try:
                    self._sync_locked()
                finally:
                    os.close(self._fd)
                    self._fd = -1


# -- reading ---------------------------------------------------------------------------------

_NONE = type(None)
_STATES = ("DONE", "FAILED", "CANCELED")
_PILOT_UID = re.compile(r"pilot\.\d+")
_TASK_UID = re.compile(r"task\.\d+")

# kind -> (number of items after the kind (min, max), [(types, uid pattern or None)] per item)
RECORD_SHAPES: dict[str, tuple[tuple[int, int], list[tuple[tuple[type, ...], Any]]]] = {
    "pilot": (
        (3, 4),
        [((str,), _PILOT_UID), ((dict,), None), ((str,), None), ((str, _NONE), _PILOT_UID)],
    ),
    "task": ((3, 3), [((str,), _TASK_UID), ((str,), _PILOT_UID), ((dict,), None)]),
    "final": (
        (6, 6),
        [
            ((str,), None),
            ((str,), _STATES),
            ((int, _NONE), None),
            ((int, _NONE), None),
            ((str, _NONE), None),
            ((float, int), None),
        ],
    ),
    "spawn": ((3, 3), [((str,), None), ((list,), None), ((bool,), None)]),
    "out": ((3, 3), [((str,), None), ((str, bytes, _NONE), None), ((str, bytes, _NONE), None)]),
    "session": ((2, 2), [((int,), None), ((int,), None)]),
}


# -- the records, made here only (every writer calls these; RECORD_SHAPES checks a read) --


def pilot_record(uid: str, description: dict, sandbox: str, replaced: str | None) -> list:
    return ["pilot", uid, description, sandbox, replaced]


def task_record(uid: str, pilot_uid: str, values: dict) -> list:
    return ["task", uid, pilot_uid, values]


def final_record(
    uid: str,
    state: str,
    exit_code: int | None,
    signal: int | None,
    reason: str | None,
    t: float,
) -> list:
    return ["final", uid, state, exit_code, signal, reason, t]


def spawn_record(uid: str, keys: list, done_on_exit: bool) -> list:
    return ["spawn", uid, keys, done_on_exit]


def out_record(uid: str, stdout: str | bytes | None, stderr: str | bytes | None) -> list:
    return ["out", uid, stdout, stderr]


def check_record(rec: object) -> str | None:
    """Why `rec` is not a journal record of a known form (RECORD_SHAPES), or None."""
    if type(rec) is not list or not rec:
        return "not a record (a list whose first item is its kind)"
    shape = RECORD_SHAPES.get(rec[0]) if type(rec[0]) is str else None
    if shape is None:
        return f"no pilotfish journal has records of kind {rec[0]!r}"
    (low, high), items = shape
    if not low <= len(rec) - 1 <= high:
        want = str(low) if low == high else f"{low} to {high}"
        return f"a {rec[0]!r} record has {want} items after its kind, not {len(rec) - 1}"
    for i, (value, (types, form)) in enumerate(zip(rec[1:], items), 1):
        if type(value) not in types:
            return (
                f"item {i} of a {rec[0]!r} record is a {type(value).__name__}, not "
                f"{' or '.join('None' if t is _NONE else t.__name__ for t in types)}"
            )
        if isinstance(form, tuple) and value not in form:
            return f"item {i} of a {rec[0]!r} record is {value!r}, not one of {', '.join(form)}"
        if isinstance(form, re.Pattern) and type(value) is str and not form.fullmatch(value):
            return f"item {i} of a {rec[0]!r} record, {value[:60]!r}, is not a {form.pattern} uid"
    return None


def _show(rec: object) -> str:
    text = repr(rec)
    return text if len(text) <= 120 else text[:117] + "..."


def _object_end(data: bytes, pos: int, limit: int) -> int | None:
    """Where the msgpack object at data[pos:limit] ends; None if `limit` comes first (it is
    cut short); ValueError if the bytes are no msgpack. Walks headers only (no decoding)."""
    pending = 1
    while pending:
        if pos >= limit:
            return None
        b = data[pos]
        pos += 1
        pending -= 1
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):  # fixint, nil, bool
            continue
        if b <= 0x8F:  # fixmap
            pending += 2 * (b & 0x0F)
        elif b <= 0x9F:  # fixarray
            pending += b & 0x0F
        elif b <= 0xBF:  # fixstr
            pos += b & 0x1F
        elif b == 0xC1:
            raise ValueError("byte 0xc1 is never msgpack")
        elif b in _FIXED:
            pos += _FIXED[b]
        else:
            width, extra, kind = _SIZED[b]
            if pos + width > limit:
                return None
            count = int.from_bytes(data[pos : pos + width], "big")
            pos += width
            if kind == "bytes":
                pos += extra + count
            elif kind == "array":
                pending += count
            else:  # map
                pending += 2 * count
    return pos if pos <= limit else None


# msgpack types of a fixed size after their first byte: floats, ints, fixext
_FIXED = {
    0xCA: 4,
    0xCB: 8,
    0xCC: 1,
    0xCD: 2,
    0xCE: 4,
    0xCF: 8,
    0xD0: 1,
    0xD1: 2,
    0xD2: 4,
    0xD3: 8,
    0xD4: 2,
    0xD5: 3,
    0xD6: 5,
    0xD7: 9,
    0xD8: 17,
}
# ... and those with a size: first byte -> (width of the size, bytes before the data, kind)
_SIZED = {
    0xC4: (1, 0, "bytes"),
    0xC5: (2, 0, "bytes"),
    0xC6: (4, 0, "bytes"),
    0xC7: (1, 1, "bytes"),
    0xC8: (2, 1, "bytes"),
    0xC9: (4, 1, "bytes"),
    0xD9: (1, 0, "bytes"),
    0xDA: (2, 0, "bytes"),
    0xDB: (4, 0, "bytes"),
    0xDC: (2, 0, "array"),
    0xDD: (4, 0, "array"),
    0xDE: (2, 0, "map"),
    0xDF: (4, 0, "map"),
}


def _is_array_start(b: int) -> bool:
    return 0x90 <= b <= 0x9F or b in (0xDC, 0xDD)


def _torn_or_why(data: bytes, pos: int) -> str | None:
    """The end of a journal from `pos` on is not a whole frame: None if it is what a kill
    mid-write (or a crash's zero fill) leaves, else why it is damage."""
    n = len(data)
    if n - pos < 4 or not data[pos:].strip(b"\0"):
        return None  # inside a length, or zeros
    (length,) = _LEN.unpack_from(data, pos)
    if pos + 4 == n:
        return None
    if not _is_array_start(data[pos + 4]):
        return f"a frame of {length} bytes does not start with a list of records"
    try:
        end = _object_end(data, pos + 4, n)
    except ValueError as e:
        return f"a frame of {length} bytes is not msgpack ({e})"
    if end is None:
        return None  # the start of a frame whose write was cut short
    return (
        f"the frame's length says {length} bytes, but its records end after "
        f"{end - pos - 4} and the file goes on"
    )


def _frame(data: bytes, pos: int, shapes: bool) -> tuple[str, int, Any]:
    """The frame at `pos`: ("frame", its end, records), ("end", pos, None) at the end of the
    file, ("torn", pos, None) for what a kill mid-write leaves (if nothing whole follows: see
    _after_torn), ("bad", pos, why) or ("shape", pos, why)."""
    n = len(data)
    if pos >= n:
        return "end", pos, None
    if n - pos >= 4:
        (length,) = _LEN.unpack_from(data, pos)
        end = pos + 4 + length
        if length and end <= n:
            try:
                records = _decode(data[pos + 4 : end])
            except Exception as e:  # noqa: BLE001 -- DecodeError, UnicodeDecodeError (a bad
                # string), whatever garbage makes the decoder raise: damage, reported as such
                return "bad", pos, f"a frame of {length} bytes does not decode ({e})"
            if type(records) is not list:
                return (
                    "bad",
                    pos,
                    (f"a frame holds a {type(records).__name__}, not a list of records"),
                )
            if shapes:
                for i, rec in enumerate(records):
                    why = check_record(rec)
                    if why is not None:
                        return "shape", pos, f"record {i} of the frame, {_show(rec)}: {why}"
            return "frame", end, records
        if not length and data[pos:].strip(b"\0"):
            return "bad", pos, "an empty frame"
    why = _torn_or_why(data, pos)
    return ("torn", pos, None) if why is None else ("bad", pos, why)


def _torn_prefix(data: bytes, start: int, cut: int) -> bool:
    """Whether data[start:cut] is what a write cut short leaves of a frame's records: a
    msgpack array whose whole records are well-formed, cut inside a record (or its header),
    before its count is reached. (Cut at a boundary between records, it is rather a length
    or a count that was damaged.)"""
    b = data[start]
    width = 0 if b <= 0x9F else 2 if b == 0xDC else 4
    if start + 1 + width > cut:
        return True
    count = b & 0x0F if not width else int.from_bytes(data[start + 1 : start + 1 + width], "big")
    i, whole = start + 1 + width, 0
    while i < cut:
        try:
            end = _object_end(data, i, cut)
        except ValueError:
            return False
        if end is None:
            return whole < count
        try:
            rec = _decode(data[i:end])
        except Exception:  # noqa: BLE001 -- not a record
            return False
        if check_record(rec) is not None:
            return False
        whole += 1
        i = end
    return False


def _after_torn(data: bytes, pos: int) -> int | str | None:
    """A journal appended to after a frame torn by a kill (pilotfish before repair=True):
    where the whole frames after the torn one begin, if that is what is at `pos` -- the
    start of a msgpack array of well-formed records cut short inside a record, within its
    length, then whole frames of well-formed records to the end of the file (or a torn
    tail). None if no whole frames follow; why, if they do but what is before them is no
    write cut short (damage, not to be read past -- nor taken for a torn tail)."""
    n = len(data)
    if n - pos < 6 or not _is_array_start(data[pos + 4]):
        return None
    (length,) = _LEN.unpack_from(data, pos)
    try:
        ends = _object_end(data, pos + 4, n)  # what the torn bytes would complete into
    except ValueError:
        ends = None
    limit = min(pos + 4 + length, n)
    if ends is not None:
        limit = min(limit, ends)  # a prefix cut short is incomplete up to the next frame
    for q in range(pos + 5, limit):
        if q + 5 > n or not _is_array_start(data[q + 4]):
            continue
        (lq,) = _LEN.unpack_from(data, q)
        if not lq or q + 4 + lq > n:
            continue
        at, frames = q, 0
        while True:
            kind, at, _ = _frame(data, at, True)
            if kind != "frame":
                break
            frames += 1
        if kind in ("end", "torn") and frames:
            if _torn_prefix(data, pos + 4, q):
                return q
            return (
                f"whole frames follow from byte {q}, but what is before them is no "
                f"write cut short (a damaged length or count)"
            )
    return None


_warned: set[tuple[str, int]] = set()


def read_journal(path: str, strict: bool = False) -> Iterator[list]:
    """Every record of a journal, in order (nothing if the file does not exist).

    A torn last frame is ignored (see the module's docstring). Damage: strict=True raises
    JournalError (file, byte offset, why), also for a record not of a known form
    (check_record); else reading stops there, with a warning (once per file and offset)."""
    try:
        fd = open_private(path, os.O_RDONLY, own=False)  # (anyone's: a support reading)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    pos = 0
    while True:
        kind, at, value = _frame(data, pos, strict)
        if kind == "frame":
            yield from value
            pos = at
            continue
        if kind in ("bad", "torn"):
            resumed = _after_torn(data, at)
            if isinstance(resumed, int):
                if (path, at) not in _warned:
                    _warned.add((path, at))
                    log.warning(
                        "journal %s: a record torn by a kill at byte %d, written to "
                        "after (an older pilotfish): read past it",
                        path,
                        at,
                    )
                pos = resumed
                continue
            if resumed is not None:
                kind, value = "bad", resumed
        if kind in ("end", "torn"):
            return
        if strict:
            raise JournalError(path, at, value)
        if (path, at) not in _warned:
            _warned.add((path, at))
            log.warning(
                "journal %s damaged at byte %d (%s): what follows is not read", path, at, value
            )
        return


def whole_frames_end(data: bytes) -> int | None:
    """Where the whole frames of a journal's bytes end (len(data) if nothing is torn), or
    None if they are damaged before that."""
    pos = 0
    while True:
        kind, at, _ = _frame(data, pos, False)
        if kind == "frame":
            pos = at
        elif kind == "end":
            return at
        else:
            resumed = _after_torn(data, at)
            if isinstance(resumed, int):
                pos = resumed
            elif kind == "torn" and resumed is None:
                return at
            else:
                return None


def spawn_records(
    sandbox: str, strict: bool = False
) -> tuple[dict[str, list], dict[str, tuple[list[int], bool]]]:
    """(finals, spawns) of an agent journal: {uid: final record}, {uid: (keys of its last
    spawn, done on exit)}. strict: see read_journal."""
    out: dict[str, list] = {}
    spawned: dict[str, tuple[list[int], bool]] = {}
    for r in read_journal(os.path.join(sandbox, "agent.journal"), strict):
        if r and r[0] == "final":
            out[r[1]] = r
        elif r and r[0] == "spawn":
            spawned[r[1]] = (r[2], r[3])
    return out, spawned


def agent_finals(sandbox: str, strict: bool = False) -> dict[str, list]:
    """uid -> final record, from a pilot's agent journal and its keeper's (the tasks it saw
    end after the agent died); for tasks neither has, from the exit log: every process of the
    task's last spawn exited 0 (and nothing was left to do after, like output staging) means
    DONE. Anything else is not final: it runs again. strict: see read_journal."""
    out, spawned = spawn_records(sandbox, strict)
    for uid, rec in finals(os.path.join(sandbox, "keeper.journal"), strict).items():
        out.setdefault(uid, rec)
    pending = {uid: s for uid, s in spawned.items() if uid not in out and s[1]}
    if not pending:
        return out
    exits, _ = read_exit_log(sandbox)
    remote, _ = read_node_exit_logs(sandbox)  # tasks its node executors ran
    if remote:
        exits = {**remote, **exits}
    for uid, (keys, _) in pending.items():
        ends = [exits.get(k) for k in keys]
        done = [e for e in ends if e is not None and e[0] == 0 and e[1] == 0]
        if keys and len(done) == len(ends):
            out[uid] = [
                "final",
                uid,
                "DONE",
                0,
                None,
                "recovered from the exit log (its agent ended before reporting it)",
                max(e[2] for e in done),
            ]
    return out


KEEPER_BEAT_S = 2.0  # a keeper that holds tasks rewrites keeper.json this often


def keeper_state(sandbox: str) -> dict | None:
    """What a pilot's keeper says after its agent died: {"pid", "host", "agent_status",
    "adopted": [task uids], "done": bool, "t"}, or None (agent alive, ended cleanly, or never
    kept)."""
    from . import _json

    try:
        with open(os.path.join(sandbox, "keeper.json")) as f:
            return _json.load(f)
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


def finals(path: str, strict: bool = False) -> dict[str, list]:
    """uid -> its last ["final", ...] record in a journal (strict: see read_journal)."""
    out = {}
    for r in read_journal(path, strict):
        if r and r[0] == "final":
            out[r[1]] = r
    return out
