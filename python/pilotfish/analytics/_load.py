"""Fast readers for a session's events files and tasks.msgpack, straight into numpy columns.

`pilotfish._events.read_events` decodes every event into a Python tuple of four objects; for
1M tasks (~13M events) that alone is ~5-10 s and gigabytes of objects. Here each events file
is parsed *vectorized* with numpy instead: the layout EventWriter produces (msgspec encoding)
is regular enough for it --

    frame   = u32le length | msgpack array header (fixarray / array16 / array32) | events
    event   = 0x94 (fixarray of 4) | 0xcb f64be t | str uid | str name | (nil | str) detail
    str     = fixstr 0xa0-0xbf | str8 0xd9 u8 | str16 0xda u16be | str32 0xdb u32be, then bytes

Every event starts with the byte pair 0x94 0xcb. We find all such pairs (true starts plus rare
false positives inside float bytes or a frame's length prefix), compute for each the position
where the event would end, and keep the chain of starts that leads from a frame's first event
exactly to its end. A frame whose chain does not check out (event count from the array header,
exact end) -- a writer that passed an int time, an encoding we did not foresee -- is decoded
with msgspec instead, so the result always equals `read_events`. A torn last frame is ignored,
as `read_events` does.

Strings become integer codes without creating a Python object per event: the bytes of each
uid/name are gathered as little-endian u64 words (unaligned strided views) and mixed into two
independent 64-bit keys. Each chunk factorizes its keys into a small table of distinct
strings; the tables of all chunks are then factorized together (by the first key, checked
with the second) and only the globally distinct strings are decoded. Chunks are small so the
per-event temporaries stay in cache and are reused: fresh memory costs more than the parse.

On the shared 2-core development VM, the 13M events of 1M tasks take 7-10 s (CPU time,
depending on the neighbours), about 1.6x faster than msgspec decoding plus a dict lookup
per event, and without the ~2 GB of Python objects.

The dashboard's incremental reader (analytics/dashboard/tail.py) parses the frames appended
since its last read with the same pieces, public for it: split_frames, SMALLEST_EVENT_FILE,
FileBytes, chunk_spans, parse_chunk (KeyCollision: that chunk the exact slow way), decode_texts.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
import stat
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import msgspec
import numpy as np

from .._util import gc_paused  # (analytics.session imports it from here too)
import pandas as pd

from pilotfish import _frames
from pilotfish._events import TaskRecord

_CHUNK_BYTES = 512 << 10  # parse this much of a file at once (temporaries stay in cache)
_PAD = 16  # a copy of the last bytes, zero padded, for string gathers
SMALLEST_EVENT_FILE = 18  # length, fixarray, 94, cb + f64, "", "", nil
_decode_frame = msgspec.msgpack.Decoder(list[tuple[float, str, str, Optional[str]]]).decode


def _map_file(path: str):
    """The file's bytes without copying them (a read-only map of the page cache). Never
    through a link (O_NOFOLLOW: OSError), never a FIFO or device (ValueError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{path}: not a regular file")
        if os.fstat(fh.fileno()).st_size == 0:
            return b""
        # populate: map all pages up front, in bulk, instead of one fault per page later
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)


# --------------------------------------------------------------------------- byte views


def _view(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A view giving, at index i, the value of dtype stored at byte offset i (unaligned)."""
    size = np.dtype(dtype).itemsize
    return np.ndarray(shape=(len(buf) - size + 1,), dtype=dtype, buffer=buf, strides=(1,))


# msgpack str headers by first byte: header size (0 = not a str) and, for fixstr, the length
_HDR_SIZE = np.zeros(256, np.int64)
_HDR_SIZE[0xA0:0xC0] = 1
_HDR_SIZE[[0xD9, 0xDA, 0xDB]] = [2, 3, 5]
_HDR_SIZE_OR_NIL = _HDR_SIZE.copy()
_HDR_SIZE_OR_NIL[0xC0] = 1
_FIXSTR_LEN = np.zeros(256, np.int64)
_FIXSTR_LEN[0xA0:0xC0] = np.arange(32)


class FileBytes:
    """A file's bytes with the typed unaligned views the parser gathers from."""

    def __init__(self, data: bytes):
        # No padded copy of the file (touching fresh pages costs more than parsing): gathers
        # clip their indices; only the string words of the last few bytes need the padded tail.
        self.buf = np.frombuffer(data, dtype=np.uint8)
        self.n = n = len(data)
        self.tail0 = max(0, n - _PAD)
        self.tail_u64le = _view(
            np.frombuffer(bytes(data[self.tail0 :]) + bytes(8), np.uint8), "<u8"
        )
        self.u16be = _view(self.buf, ">u2")
        self.u32be = _view(self.buf, ">u4")
        self.u64le = _view(self.buf, "<u8")
        self.f64be = _view(self.buf, ">f8")

    def str_at(self, pos: np.ndarray, allow_nil: bool = False):
        """Decode msgpack str (or nil) headers at `pos`: (ok, header_size, length, is_nil).
        Past the end of the data the result is garbage with pos + header > n, which the
        caller's end check rejects."""
        b = self.buf[np.minimum(pos, self.n - 1)]
        hdr = (_HDR_SIZE_OR_NIL if allow_nil else _HDR_SIZE)[b]
        length = _FIXSTR_LEN[b]
        long = np.flatnonzero(hdr > 1)  # str8/16/32: rare, patched one kind at a time
        if len(long):
            p1 = pos[long] + 1
            kind = hdr[long]
            for size, view in ((2, self.buf), (3, self.u16be), (5, self.u32be)):
                sel = kind == size
                length[long[sel]] = view[np.minimum(p1[sel], len(view) - 1)]
        is_nil = (b == 0xC0) if allow_nil else None
        return hdr > 0, hdr, length, is_nil

    def text(self, start: int, length: int) -> str:
        return self.buf[start : start + length].tobytes().decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- frames


@dataclass
class _Frame:
    payload: int  # offset of the msgpack payload
    end: int  # offset just past the payload
    first: int  # offset of the first event (after the array header)
    count: int  # number of events (from the array header); -1: header not understood


def split_frames(data: bytes) -> list[_Frame]:
    """The whole frames of `data` (_frames.spans: a torn last frame, a killed writer's, is
    ignored, as read_events does), each with where its events start and how many."""
    out: list[_Frame] = []
    for start, end in _frames.spans(data):
        length = end - start
        h = data[start] if length else 0
        if 0x90 <= h <= 0x9F:
            first, count = start + 1, h & 0x0F
        elif h == 0xDC and length >= 3:
            first, count = start + 3, int.from_bytes(data[start + 1 : start + 3], "big")
        elif h == 0xDD and length >= 5:
            first, count = start + 5, int.from_bytes(data[start + 1 : start + 5], "big")
        else:
            first, count = start, -1
        out.append(_Frame(start, end, first, count))
    return out


# --------------------------------------------------------------------------- strings -> keys
#
# A string is identified by two independent 64-bit keys mixed from its length and its bytes.
# Codes come from factorizing the first key; the second key must then be constant within each
# code, which detects a collision of the first (the pair colliding is ~1e-27 for 1M strings).
# On a detected collision the reader gives up the fast path for the whole read (exact result).

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))
_SHIFT = np.uint64(29)
_TAIL_MASK = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], np.uint64)


class KeyCollision(Exception):
    pass


def _gather_words(fb: FileBytes, start: np.ndarray, length: np.ndarray, k: int) -> np.ndarray:
    """The little-endian u64 word at byte k of each string, bytes past its end zeroed."""
    pos = start + k
    word = fb.u64le[np.minimum(pos, len(fb.u64le) - 1)]
    near_end = np.flatnonzero(pos >= len(fb.u64le))
    if len(near_end):  # words reaching past the data; from past it they are all mask anyway
        p = pos[near_end]
        word[near_end] = np.where(p < fb.n, fb.tail_u64le[np.minimum(p, fb.n - 1) - fb.tail0], 0)
    if len(length) == 0:
        return word
    shortest, longest = int(length.min()), int(length.max())
    if shortest >= k + 8:  # common: the word is inside every string
        return word
    if shortest == longest:  # common too (uids of one format): one mask for all
        return word & _TAIL_MASK[min(max(shortest - k, 0), 8)]
    return word & _TAIL_MASK[np.minimum(np.maximum(length - k, 0), 8)]


def _string_keys(fb: FileBytes, start: np.ndarray, length: np.ndarray):
    """Two keys per string that depend on the string alone: word k is mixed in only for
    strings longer than k (not for all strings up to the chunk's longest)."""
    k1 = length.astype(np.uint64) * _MIX[0]
    k2 = length.astype(np.uint64) * _MIX[1]
    for k in range(0, int(length.max()) if len(length) else 0, 8):
        w = _gather_words(fb, start, length, k)
        m1 = (k1 ^ w) * _MIX[0]
        m1 ^= m1 >> _SHIFT
        m2 = (k2 ^ w) * _MIX[1]
        m2 ^= m2 >> _SHIFT
        if length.min() > k:
            k1, k2 = m1, m2
        else:
            longer = length > k
            k1 = np.where(longer, m1, k1)
            k2 = np.where(longer, m2, k2)
    return k1, k2


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """Row of each code's first occurrence, for codes numbered in order of first appearance:
    the running maximum steps up exactly there (no sort needed)."""
    if len(codes) == 0:
        return np.zeros(0, np.int64)
    running = np.maximum.accumulate(codes)
    steps = np.empty(len(codes), bool)
    steps[0] = True
    np.greater(running[1:], running[:-1], out=steps[1:])
    return np.flatnonzero(steps)


def _factorize_keys(k1: np.ndarray, k2: np.ndarray):
    """(codes int32, first rows) from key pairs; raises KeyCollision if k1 alone collides."""
    codes = pd.factorize(k1)[0].astype(np.int32)
    first = _first_rows(codes)
    if not np.array_equal(k2, k2[first][codes]):
        raise KeyCollision
    return codes, first


def decode_texts(fb: FileBytes, start: np.ndarray, length: np.ndarray) -> list[str]:
    """Decode the strings at (start, length), vectorized for ASCII without NUL bytes."""
    if len(start) == 0:
        return []
    n_words = max(1, -(-int(length.max()) // 8))
    words = np.stack([_gather_words(fb, start, length, 8 * k) for k in range(n_words)], axis=1)
    raw = np.ascontiguousarray(words).view(f"S{8 * n_words}").ravel()
    try:
        # 'S' drops trailing NULs, so a length mismatch means a NUL inside: decode those slowly
        if np.array_equal(np.char.str_len(raw), length):
            return raw.astype(f"U{8 * n_words}").tolist()
    except UnicodeDecodeError:  # non-ASCII: utf-8, one by one
        pass
    return [fb.text(int(s), int(n)) for s, n in zip(start, length)]


@dataclass
class _Distinct:
    """A chunk's distinct strings of one field: keys and where the first occurrence lies."""

    k1: np.ndarray
    k2: np.ndarray
    start: np.ndarray
    length: np.ndarray


def _distinct(fb: FileBytes, start: np.ndarray, length: np.ndarray):
    """(per-row local code, _Distinct) for the strings at (start, length)."""
    k1, k2 = _string_keys(fb, start, length)
    codes, first = _factorize_keys(k1, k2)
    return codes, _Distinct(k1[first], k2[first], start[first], length[first])


_BUCKETS = 1 << 14


def _distinct_few(fb: FileBytes, start: np.ndarray, length: np.ndarray):
    """_distinct for a field with few distinct values (event names): rows are put in 2^14
    buckets by their first key, and every row's keys must equal its bucket's (any) member's
    -- then a bucket is one string and no hash table is needed. Two strings in one bucket
    (rare) take the general path."""
    k1, k2 = _string_keys(fb, start, length)
    if not len(k1):
        return _distinct(fb, start, length)
    bucket = (k1 >> np.uint64(50)).astype(np.intp)
    member = np.empty(_BUCKETS, np.intp)
    member[bucket] = np.arange(len(k1))  # whichever row lands last: any member will do
    rep = member[bucket]
    if not (np.array_equal(k1, k1[rep]) and np.array_equal(k2, k2[rep])):
        return _distinct(fb, start, length)
    used = np.flatnonzero(np.bincount(bucket, minlength=_BUCKETS))
    code_of = np.empty(_BUCKETS, np.int32)
    code_of[used] = np.arange(len(used), dtype=np.int32)
    first = member[used]
    return code_of[bucket], _Distinct(k1[first], k2[first], start[first], length[first])


# --------------------------------------------------------------------------- one chunk


@dataclass
class _Chunk:
    """The events of some consecutive frames of one file."""

    t: np.ndarray
    uid: np.ndarray  # local codes into uid_table
    uid_table: _Distinct
    name: np.ndarray  # local codes into name_table
    name_table: _Distinct
    name_texts: list[str]  # of name_table (few)
    detail_rows: np.ndarray  # rows (within the chunk) whose detail was kept
    details: list[str]
    slow_frames: list[_Frame]


def chunk_spans(frames: list[_Frame]) -> Iterator[tuple[int, int]]:
    """(i, j): frames[i:j] is the next chunk to parse, whole frames of about _CHUNK_BYTES
    (at least one frame each), in order."""
    i, n = 0, len(frames)
    while i < n:
        j, size = i, 0
        while j < n and (size == 0 or size + frames[j].end - frames[j].payload <= _CHUNK_BYTES):
            size += frames[j].end - frames[j].payload + _frames.HEADER
            j += 1
        yield i, j
        i = j


def parse_chunk(fb: FileBytes, frames: list[_Frame], detail_names) -> _Chunk:
    lo, hi = frames[0].payload, frames[-1].end
    # bytes 94 cb: find the 94s with a contiguous (SIMD) byte compare, then check the next
    cand = np.flatnonzero(fb.buf[lo:hi] == 0x94) + lo
    cand = cand[fb.buf[np.minimum(cand + 1, fb.n - 1)] == 0xCB]
    uid_h = cand + 10
    ok_u, hs_u, len_u, _ = fb.str_at(uid_h)
    name_h = uid_h + hs_u + len_u
    ok_n, hs_n, len_n, _ = fb.str_at(name_h)
    det_h = name_h + hs_n + len_n
    ok_d, hs_d, len_d, nil_d = fb.str_at(det_h, allow_nil=True)
    nxt = det_h + hs_d + len_d
    valid = ok_u & ok_n & ok_d & (nxt <= hi)
    # `chained`: a start whose event ends where the next candidate begins -- if it is a true
    # start, so is the next one, and runs of chained starts are taken in one step. A run may
    # wrongly continue past a frame's end only through a 94 cb inside the next length prefix;
    # the count check below then sends that frame to the fallback.
    chained = np.zeros(len(cand), bool)
    chained[:-1] = valid[:-1] & (nxt[:-1] == cand[1:])
    breaks = np.flatnonzero(~chained)

    def next_start(j: int) -> int:
        """Index of the candidate where the event at candidate j ends, or -1."""
        k = int(np.searchsorted(cand, nxt[j]))
        return k if k < len(cand) and cand[k] == nxt[j] else -1

    keep = np.zeros(len(cand) + 1, np.int32)  # +1/-1 at run edges, cumsum -> membership
    slow: list[_Frame] = []
    i = 0
    for f in frames:
        if f.count == 0 and f.first == f.end:
            continue
        runs, count = [], 0
        if i >= len(cand) or cand[i] != f.first:  # usually the previous frame ended at i
            i = int(np.searchsorted(cand, f.first))
        good = f.count > 0 and i < len(cand) and cand[i] == f.first
        while good:
            j = int(breaks[np.searchsorted(breaks, i)])
            runs.append((i, j))
            count += j - i + 1
            if not valid[j] or count > f.count:
                good = False
            elif nxt[j] == f.end:
                i = j + 1
                break
            elif nxt[j] < f.end and (k := next_start(j)) >= 0:
                i = k
            else:
                good = False
        if good and count == f.count:
            for a, b in runs:
                keep[a] += 1
                keep[b + 1] -= 1
        else:
            slow.append(f)
    sel = np.flatnonzero(np.cumsum(keep[:-1]) > 0)

    uid, uid_table = _distinct(fb, uid_h[sel] + hs_u[sel], len_u[sel])
    name, name_table = _distinct_few(fb, name_h[sel] + hs_n[sel], len_n[sel])
    name_texts = decode_texts(fb, name_table.start, name_table.length)
    d_len = len_d[sel]
    d_keep = ~nil_d[sel]
    if detail_names is not None:
        wanted = [c for c, s in enumerate(name_texts) if s in detail_names]
        d_keep &= np.isin(name, wanted)
    detail_rows = np.flatnonzero(d_keep)
    d_start = det_h[sel][detail_rows] + hs_d[sel][detail_rows]
    details = [fb.text(int(a), int(b)) for a, b in zip(d_start, d_len[detail_rows])]
    return _Chunk(
        t=fb.f64be[np.minimum(cand[sel] + 2, len(fb.f64be) - 1)].astype(np.float64),
        uid=uid,
        uid_table=uid_table,
        name=name,
        name_table=name_table,
        name_texts=name_texts,
        detail_rows=detail_rows,
        details=details,
        slow_frames=slow,
    )


# --------------------------------------------------------------------------- public


@dataclass
class EventColumns:
    """All events of a set of files as columns.

    t: float64 epoch seconds; uid, name: int32 codes into `uids` / `names`; source: int16
    index into `paths`. Row order: file by file, within a file in file order, except that
    frames decoded by the fallback come after the others of their file. Details are kept only
    for the names asked for (and never nil ones): `detail_rows` (sorted) and `detail_values`.
    """

    paths: list[str]
    t: np.ndarray
    uid: np.ndarray
    name: np.ndarray
    source: np.ndarray
    uids: list[str]
    names: list[str]
    detail_rows: np.ndarray
    detail_values: list[str]

    def __len__(self) -> int:
        return len(self.t)

    def name_code(self, name: str) -> int:
        """Code of an event name, -1 if no event has it."""
        return self.names.index(name) if name in self.names else -1

    def details(self, rows) -> list[Optional[str]]:
        """Detail of each given row (None: nil, or not kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.detail_rows, rows)
        out: list[Optional[str]] = []
        for r, k in zip(rows.tolist(), at.tolist()):
            hit = k < len(self.detail_rows) and self.detail_rows[k] == r
            out.append(self.detail_values[k] if hit else None)
        return out


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


class _Table:
    """Global codes for one string field, built from the chunks' distinct tables."""

    def __init__(self) -> None:
        self.parts: list[tuple[FileBytes, _Distinct]] = []
        self.size = 0

    def add(self, fb: FileBytes, d: _Distinct) -> int:
        """Remember a chunk's table; returns its offset in the concatenation."""
        offset = self.size
        self.parts.append((fb, d))
        self.size += len(d.k1)
        return offset

    def resolve(self) -> tuple[np.ndarray, list[str]]:
        """(global code of each concatenated table entry, distinct strings by code)."""
        if not self.parts:
            return np.zeros(0, np.int32), []
        codes, first = _factorize_keys(
            _cat([d.k1 for _, d in self.parts], np.uint64),
            _cat([d.k2 for _, d in self.parts], np.uint64),
        )
        start = _cat([d.start for _, d in self.parts], np.int64)[first]
        length = _cat([d.length for _, d in self.parts], np.int64)[first]
        # decode the first occurrences file by file (parts of a file share its bytes)
        files = list({id(fb): fb for fb, _ in self.parts}.values())
        file_of_part = np.array([files.index(fb) for fb, _ in self.parts], np.intp)
        sizes = np.array([len(d.k1) for _, d in self.parts])
        file_of = np.repeat(file_of_part, sizes)[first]
        texts = np.empty(len(first), object)
        for f, fb in enumerate(files):
            at = np.flatnonzero(file_of == f)
            texts[at] = decode_texts(fb, start[at], length[at])
        return codes, texts.tolist()


def read_event_columns(
    paths: Sequence[str | os.PathLike], detail_names: Optional[set[str]] = None
) -> EventColumns:
    """Read events files (missing ones are skipped, as are links and what is not a regular
    file: never followed) into one EventColumns.

    detail_names: keep the details of events with these names only (None: all). Details are
    per-event strings; keeping all of a large session's costs memory and time.
    """
    with gc_paused():
        try:
            return _read(paths, detail_names, fast=True)
        except KeyCollision:
            return _read(paths, detail_names, fast=False)


def _read(paths, detail_names, fast: bool) -> EventColumns:
    # Fresh memory is the dearest thing here (on the development VM first-touching a GB
    # costs seconds), so the output columns are allocated once, at their final size (the
    # frames' headers give the event counts), and filled chunk by chunk; nothing per event
    # is concatenated or copied afterwards.
    files = []
    for path in map(os.fspath, paths):
        try:  # (missing: skipped; a link or what is not a file is not read either)
            data = _map_file(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno == errno.ELOOP:
                continue
            raise
        except ValueError:
            continue
        small = len(data) < SMALLEST_EVENT_FILE  # no event (and too small for the views)
        files.append((path, data, [] if small else split_frames(data)))
    total = sum(f.count for _, _, frames in files for f in frames if f.count > 0)
    t_out = np.empty(total, np.float64)
    uid_out = np.empty(total, np.int32)
    name_out = np.empty(total, np.int32)
    src_out = np.empty(total, np.int16)
    uid_tab, name_tab = _Table(), _Table()
    fast_slices: list[tuple[int, int, int, int]] = []  # (row, end, uid off, name off)
    slow_slices: list[tuple[int, int, tuple, tuple]] = []  # (row, end, uids, names)
    d_rows: list[np.ndarray] = []
    d_vals: list[str] = []
    row = 0
    for src, (path, data, frames) in enumerate(files):
        file_row = row
        slow_frames = [] if fast else [f for f in frames if f.count != 0]
        fb = FileBytes(data) if frames and fast else None
        if fb is not None:  # fast, and frames to parse
            for i, j in chunk_spans(frames):  # chunks of whole frames
                ch = parse_chunk(fb, frames[i:j], detail_names)
                n = len(ch.t)
                uoff, noff = uid_tab.add(fb, ch.uid_table), name_tab.add(fb, ch.name_table)
                t_out[row : row + n] = ch.t
                uid_out[row : row + n] = ch.uid
                name_out[row : row + n] = ch.name
                fast_slices.append((row, row + n, uoff, noff))
                d_rows.append(ch.detail_rows + row)
                d_vals.extend(ch.details)
                slow_frames.extend(ch.slow_frames)
                row += n
        for f in slow_frames:  # the fallback: msgspec, as read_events does
            events = _decode_frame(data[f.payload : f.end])
            if not events:
                continue
            t, u, nm, det = zip(*events)
            n = len(t)
            t_out[row : row + n] = t
            keep = [
                k
                for k, (d, m) in enumerate(zip(det, nm))
                if d is not None and (detail_names is None or m in detail_names)
            ]
            d_rows.append(np.asarray(keep, dtype=np.int64) + row)
            d_vals.extend(det[k] for k in keep)
            slow_slices.append((row, row + n, u, nm))
            row += n
        src_out[file_row:row] = src
    assert row == total, "event count differs from the frame headers"

    uid_map, uids = uid_tab.resolve()
    name_map, names = name_tab.resolve()
    for a, b, uoff, noff in fast_slices:  # chunk-local codes -> global, in place
        uid_out[a:b] = uid_map[uid_out[a:b] + uoff]
        name_out[a:b] = name_map[name_out[a:b] + noff]
    if slow_slices:
        uid_index = {u: k for k, u in enumerate(uids)}
        name_index = {u: k for k, u in enumerate(names)}
        for a, b, u, nm in slow_slices:
            uid_out[a:b] = _intern(u, uid_index, uids)
            name_out[a:b] = _intern(nm, name_index, names)
    return EventColumns(
        [p for p, _, _ in files],
        t_out,
        uid_out,
        name_out,
        src_out,
        uids,
        names,
        _cat(d_rows, np.int64),
        d_vals,
    )


def _intern(strings, index: dict, table: list) -> np.ndarray:
    """Codes of strings in a growing table (the fallback's path: one dict lookup each)."""
    out = []
    for s in strings:
        c = index.get(s)
        if c is None:
            c = index[s] = len(table)
            table.append(s)
        out.append(c)
    return np.asarray(out, dtype=np.int32)


# --------------------------------------------------------------------------- tasks.msgpack

# TaskRecord as a plain tuple: decoding to tuples lets zip(*) build columns at C speed.
# The nodes list is kept raw (not needed for metrics; decoded on demand).
_RECORD_FIELDS = (
    "uid",
    "name",
    "pilot",
    "ranks",
    "cores_per_rank",
    "gpus_per_rank",
    "state",
    "exit_code",
    "nodes",
)
assert TaskRecord.__struct_fields__ == _RECORD_FIELDS, (
    "TaskRecord changed: update pilotfish.analytics._load._RECORD_FIELDS and _RecordTuple"
)
_RecordTuple = tuple[
    str, Optional[str], Optional[str], int, int, int, str, Optional[int], msgspec.Raw
]
_decode_records = msgspec.msgpack.Decoder(list[_RecordTuple]).decode


def read_task_record_columns(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """tasks.msgpack as columns: uid, name, pilot, state (object arrays), ranks,
    cores_per_rank, gpus_per_rank (int64), exit_code (float64, NaN = none). The per-rank node
    list is not decoded (not needed for the metrics)."""
    with gc_paused():
        return _record_columns(path)


def _record_columns(path) -> dict[str, np.ndarray]:
    with open(path, "rb") as fh:
        records = _decode_records(fh.read())
    n = len(records)

    def column(i: int, dtype) -> np.ndarray:  # one pass per field; no transposed copy
        return np.fromiter(map(operator.itemgetter(i), records), dtype=dtype, count=n)

    cols = {f: column(i, object) for i, f in enumerate(_RECORD_FIELDS[:3])}
    for i, f in enumerate(_RECORD_FIELDS[3:6], start=3):
        cols[f] = column(i, np.int64)
    cols["state"] = column(6, object)
    cols["exit_code"] = column(7, object).astype(np.float64)  # None -> NaN
    return cols
