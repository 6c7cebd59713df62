"""Incremental readers of a session's append-only files: only the bytes appended since the
last read are read and decoded.

Both the events files (client.events, <pilot>/agent.events: EventWriter frames) and the
client's journal are sequences of frames, a u32 little-endian length and a msgpack payload
(pilotfish._frames). A `FrameTail` keeps, per file, the byte offset up to which it has read;
each `read()` returns the complete frames appended since, and keeps a frame still being
written (its length runs past the end of the file) as pending bytes, completed by the next
read -- never re-read, never decoded half. `bytes_read` counts
every byte read from the file, so a test can check that nothing is read twice.

A pilot's agents' events are several files when it has sub-agents (a root, and one agent per
partition in <pilot>/sub/p<i>/: pilotfish._agent_files): `PilotTails` follows each with a
FrameTail of its own, a sub-agent's from when its folder appears.

Events are decoded in columns by the vectorized parser of pilotfish.analytics._load (the
same one `pilotfish report` uses; exact, with its msgspec fallback), chunk by chunk:
`decode_events` yields `EventBatch`es whose strings (uids, names) are small per-batch tables,
so a million-task file costs no Python object per event.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import msgspec
import numpy as np

from pilotfish import _frames
from pilotfish._agent_files import sub_dirs
from pilotfish.analytics import _load

_READ_MAX = 64 << 20  # bytes read per call at most (a large finished file: in steps)
_decode_frame = msgspec.msgpack.Decoder(list[tuple[float, str, str, Optional[str]]]).decode


class FrameTail:
    """One append-only file of frames, read from where the last read stopped.

    The file is opened without following a symbolic link. A file that shrinks or is replaced
    (another inode) is not read again from its start (that would count its events twice):
    `problem` says so and reading stops."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0  # bytes of whole frames consumed
        self.pending = b""  # the start of a frame still being written
        self.bytes_read = 0
        self.reads = 0
        self.problem: str | None = None
        self._ino: int | None = None

    def read(self, limit: int = _READ_MAX) -> bytes:
        """The complete frames appended since the last call (up to about `limit` bytes; call
        again while it returns data). b"" if none, or if the file is not there (yet)."""
        if self.problem is not None:
            return b""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return b""
        except OSError as e:
            self.problem = f"cannot open it: {e.strerror}"
            return b""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.problem = "is not a regular file"
                return b""
            start = self.offset + len(self.pending)
            if self._ino is None:
                self._ino = st.st_ino
            elif st.st_ino != self._ino or st.st_size < start:
                self.problem = (
                    f"was replaced or truncated (now {st.st_size} bytes, "
                    f"{start} read before): not read again"
                )
                return b""
            want = min(st.st_size - start, max(limit, _frames.HEADER))
            if want <= 0:
                return b""
            new = os.pread(fd, want, start)
        finally:
            os.close(fd)
        self.reads += 1
        self.bytes_read += len(new)
        data = self.pending + new if self.pending else new
        end = whole_frames(data)  # (a frame longer than limit: the next reads complete it)
        self.pending = data[end:]
        self.offset += end
        return data[:end]

    def unread(self) -> int:
        """Bytes in the file past what was read (0 if it is not there or not readable)."""
        if self.problem is not None:
            return 0
        try:
            size = os.stat(self.path, follow_symlinks=False).st_size
        except OSError:
            return 0
        return max(0, size - self.offset - len(self.pending))


class PilotTails:
    """The agent.events of a pilot's agents, each followed by its own FrameTail: the pilot's
    own (its agent, or its root), then each sub-agent's (sub/p<i>/, listed without following
    a link: _agent_files.sub_dirs) from when its folder is there."""

    EVENTS = "agent.events"

    def __init__(self, sandbox: str):
        self.sandbox = sandbox
        self.own = FrameTail(os.path.join(sandbox, self.EVENTS))
        self.subs: dict[str, FrameTail] = {}  # sub-agent folder -> its tail

    def discover(self) -> list[tuple[FrameTail, bool]]:
        """(tail, whether it is a sub-agent's) of every agent's file, sub-agents' folders
        looked for again."""
        for d in sub_dirs(self.sandbox):
            if d not in self.subs:
                self.subs[d] = FrameTail(os.path.join(d, self.EVENTS))
        return [(self.own, False)] + [(t, True) for t in self.subs.values()]

    def all(self) -> list[FrameTail]:
        return [self.own, *self.subs.values()]

    @property
    def bytes_read(self) -> int:
        return sum(t.bytes_read for t in self.all())


def whole_frames(data: bytes) -> int:
    """Length of the prefix of `data` made of whole frames."""
    return _frames.whole(data)


@dataclass
class EventBatch:
    """Some consecutive events of one file, as columns. uid and name are codes into the
    batch's own tables `uid_texts` and `names` (uid_texts is decoded on demand: `uid_text`);
    details are kept for the names asked for: row -> text."""

    t: np.ndarray
    uid: np.ndarray
    name: np.ndarray
    names: list[str]
    n_uids: int
    details: dict[int, str]
    _texts: Callable[[np.ndarray], list[str]]  # (codes) -> their uids
    k1: np.ndarray | None = None  # two 64-bit keys of each uid of the table (_load's), or None
    k2: np.ndarray | None = None

    def uid_texts(self, codes: np.ndarray) -> list[str]:
        """The uids of these codes of the batch's table, as text."""
        return self._texts(codes)


def decode_events(data: bytes, detail_names: set[str]) -> Iterator[EventBatch]:
    """The events of `data` (whole EventWriter frames), in batches of about 512 KiB."""
    if not data:
        return
    frames = _load.split_frames(data)
    if len(data) < _load.SMALLEST_EVENT_FILE:
        yield from _decode_slow(data, frames, detail_names)
        return
    fb = _load.FileBytes(data)
    for i, j in _load.chunk_spans(frames):
        try:
            ch = _load.parse_chunk(fb, frames[i:j], detail_names)
        except _load.KeyCollision:  # (astronomically rare): this chunk the exact slow way
            yield from _decode_slow(data, frames[i:j], detail_names)
            continue
        table = ch.uid_table

        def texts(codes, fb=fb, table=table):
            codes = np.asarray(codes, dtype=np.int64)
            return _load.decode_texts(fb, table.start[codes], table.length[codes])

        details = {int(r): d for r, d in zip(ch.detail_rows.tolist(), ch.details)}
        yield EventBatch(
            ch.t, ch.uid, ch.name, ch.name_texts, len(table.k1), details, texts, table.k1, table.k2
        )
        if ch.slow_frames:
            yield from _decode_slow(data, ch.slow_frames, detail_names)


def _decode_slow(data: bytes, frames, detail_names: set[str]) -> Iterator[EventBatch]:
    """msgspec decoding of whole frames (what read_events does), as one batch."""
    events = []
    for f in frames:
        if f.count != 0:
            events.extend(_decode_frame(data[f.payload : f.end]))
    if not events:
        return
    t, uids, names, det = zip(*events)
    uid_index: dict[str, int] = {}
    name_index: dict[str, int] = {}
    u = np.fromiter((uid_index.setdefault(x, len(uid_index)) for x in uids), np.int32, len(uids))
    nm = np.fromiter(
        (name_index.setdefault(x, len(name_index)) for x in names), np.int32, len(names)
    )
    uid_list = list(uid_index)
    details = {
        k: d for k, (d, m) in enumerate(zip(det, names)) if d is not None and m in detail_names
    }
    yield EventBatch(
        np.asarray(t, np.float64),
        u,
        nm,
        list(name_index),
        len(uid_list),
        details,
        lambda codes: [uid_list[c] for c in np.asarray(codes).tolist()],
    )


def decode_journal(data: bytes) -> Iterator[list]:
    """The records of whole journal frames (each frame: a msgpack array of records)."""
    for start, end in _frames.spans(data):
        try:
            recs = msgspec.msgpack.decode(data[start:end])
        except msgspec.DecodeError:
            recs = []  # damage: the client's resume names it; the dashboard reads past it
        if isinstance(recs, list):
            yield from (r for r in recs if isinstance(r, list) and r)
