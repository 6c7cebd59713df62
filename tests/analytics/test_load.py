"""The vectorized events reader returns exactly what pilotfish._events.read_events returns,
including for inputs that defeat its fast path (those frames go through msgspec)."""

import os
import random
import struct

import numpy as np

from pilotfish._events import EventWriter, TaskRecord, read_all_events, read_task_records, \
    write_task_records
from pilotfish.analytics import _load
from pilotfish.analytics._load import read_event_columns, read_task_record_columns


def as_tuples(cols, source=None, detail_names=None):
    out = []
    rows = range(len(cols)) if source is None else np.flatnonzero(cols.source == source)
    details = cols.details(np.asarray(list(rows), dtype=np.int64))
    for r, d in zip(rows, details):
        out.append((float(cols.t[r]), cols.uids[cols.uid[r]], cols.names[cols.name[r]], d))
    return out


def expected(path, detail_names=None):
    return [(float(t), u, n, d if detail_names is None or n in detail_names else None)
            for t, u, n, d in read_all_events(path)]


def key(e):
    return (e[0], e[1], e[2], "" if e[3] is None else "\x00" + e[3])


def write(path, events, flush_every=4096):
    """Write events in frames of flush_every (record_many alone makes one frame per call)."""
    w = EventWriter(str(path), flush_every=flush_every)
    for k in range(0, len(events), flush_every):
        w.record_many(events[k:k + flush_every])
    w.close()
    return str(path)


def tricky_float(rng):
    """A plausible epoch time whose big-endian bytes contain 94 cb (a false event start)."""
    b = bytearray(struct.pack(">d", 1.7e9 + rng.random() * 1e6))
    k = rng.randrange(2, 7)
    b[k], b[k + 1] = 0x94, 0xCB
    return struct.unpack(">d", bytes(b))[0]


def random_events(n, rng):
    names = ["NEW", "AGENT_SCHEDULING", "schedule_ok", "exec_start", "exec_ok", "exec_stop",
             "unschedule", "DONE", "a_rather_long_sub_event_name_over_32_bytes", "ünïcode"]
    uids = [f"task.{i:06d}" for i in range(n // 5 + 1)] + [
        "pilot.0000", "session", "x" * 40, "task.with\x00nul", "tâche.é", "t" * 300]
    out = []
    for _ in range(n):
        r = rng.random()
        t = tricky_float(rng) if r < 0.05 else 1.7e9 + rng.random() * 1e4
        d = rng.choice([None, None, None, "0", "1x4/1", "d" * 40, "é" * 20, "z" * 300])
        out.append((t, rng.choice(uids), rng.choice(names), d))
    return out


def test_matches_read_events_on_random_events(tmp_path):
    rng = random.Random(7)
    path = write(tmp_path / "a.events", random_events(20_000, rng), flush_every=997)
    cols = read_event_columns([path])
    assert as_tuples(cols) == expected(path)          # fast path: same order too


def test_fallback_frames_and_odd_encodings(tmp_path):
    rng = random.Random(8)
    events = random_events(3000, rng)
    events[10] = (1700000000, "task.int_time", "NEW", None)      # int time: not 0xcb
    events[20] = (1.7e9, "task.big", "exec_stop", "y" * 70_000)  # str32 detail
    events[30] = (1.7e9, "task.mid", "exec_stop", "w" * 1000)    # str16 detail
    path = write(tmp_path / "b.events", events, flush_every=100)
    cols = read_event_columns([path])
    assert sorted(as_tuples(cols), key=key) == sorted(expected(path), key=key)


def test_frame_length_prefix_containing_94cb(tmp_path):
    """A frame of 0xcb94 bytes has a length prefix 94 cb 00 00: a false event start exactly
    where the previous frame ends."""
    path = str(tmp_path / "c.events")
    w = EventWriter(path, flush_every=10**9)
    w.record_many([(1.7e9, "task.000001", "NEW", None)])
    w.flush()
    base = len(_load.msgspec.msgpack.encode([(1.7e9, "task.000002", "NEW", "")]))
    pad = 0xCB94 - base - 2          # "" is a fixstr, the padding a str16: 2 more header bytes
    w.record_many([(1.7e9, "task.000002", "NEW", "p" * pad)])
    w.flush()
    w.record_many([(1.7e9 + 1, "task.000003", "DONE", None)])
    w.close()
    with open(path, "rb") as fh:
        data = fh.read()
    assert b"\x94\xcb\x00\x00" in data
    cols = read_event_columns([path])
    assert sorted(as_tuples(cols), key=key) == sorted(expected(path), key=key)


def test_big_frames_and_torn_tail(tmp_path):
    rng = random.Random(9)
    events = [(1.7e9 + i * 1e-3, f"task.{i % 5000:06d}", "exec_ok", str(i)) for i in range(70_000)]
    path = write(tmp_path / "d.events", events, flush_every=100_000)   # one array32 frame
    more = random_events(500, rng)
    w = EventWriter(path, flush_every=7)
    for k in range(0, len(more), 7):                                     # frames of 7
        w.record_many(more[k:k + 7])
    w.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:                                        # a killed writer
        fh.truncate(size - 5)
    cols = read_event_columns([path])
    assert as_tuples(cols) == expected(path)
    assert len(cols) == 70_000 + 500 - 500 % 7  # the torn last frame (of 3) is dropped


def test_several_files_share_codes_and_filter_details(tmp_path):
    rng = random.Random(10)
    a = write(tmp_path / "client.events", random_events(5000, rng), flush_every=300)
    b = write(tmp_path / "agent.events", random_events(5000, rng), flush_every=4096)
    keep = {"schedule_ok", "exec_stop"}
    cols = read_event_columns([a, str(tmp_path / "missing.events"), b], detail_names=keep)
    assert cols.paths == [a, b]
    assert as_tuples(cols, source=0) == expected(a, keep)
    assert as_tuples(cols, source=1) == expected(b, keep)
    assert len(set(cols.uids)) == len(cols.uids) and len(set(cols.names)) == len(cols.names)


def test_codes_are_unique_across_chunks(tmp_path, monkeypatch):
    """Chunks differ in their longest string; a string's code must not depend on that."""
    monkeypatch.setattr(_load, "_CHUNK_BYTES", 4096)       # many small chunks
    rng = random.Random(12)
    events = random_events(6000, rng)
    # the first chunks hold only names and uids of <= 8 bytes (one word), later ones longer
    events[:3000] = [(t, u[:8], rng.choice(["NEW", "DONE"]), d) for t, u, n, d in events[:3000]]
    path = write(tmp_path / "g.events", events, flush_every=50)
    cols = read_event_columns([path])
    assert as_tuples(cols) == expected(path)
    assert len(set(cols.uids)) == len(cols.uids)
    assert len(set(cols.names)) == len(cols.names)
    assert sorted(set(cols.uids)) == sorted({u for _, u, _, _ in events})


def test_empty_and_missing(tmp_path):
    empty = tmp_path / "e.events"
    empty.write_bytes(b"")
    cols = read_event_columns([str(empty), str(tmp_path / "nope.events")])
    assert len(cols) == 0 and cols.uids == [] and cols.names == []


def test_key_collision_falls_back_to_exact(tmp_path, monkeypatch):
    """Were two strings ever to share the first key, the read is redone with msgspec."""
    rng = random.Random(11)
    path = write(tmp_path / "f.events", random_events(2000, rng), flush_every=128)
    real = _load._string_keys

    def colliding(fb, start, length):
        k1, k2 = real(fb, start, length)
        return k1 & np.uint64(0x3), k2                    # 4 distinct first keys at most
    monkeypatch.setattr(_load, "_string_keys", colliding)
    cols = read_event_columns([path])
    assert sorted(as_tuples(cols), key=key) == sorted(expected(path), key=key)


def test_task_record_columns(tmp_path):
    recs = [TaskRecord(f"task.{i}", None if i % 2 else f"n{i}", "pilot.0000" if i % 3 else None,
                       1 + i % 3, 2, i % 2, "DONE" if i % 4 else "FAILED",
                       None if i % 5 == 0 else i % 2, [0] * (1 + i % 3)) for i in range(50)]
    path = tmp_path / "tasks.msgpack"
    write_task_records(path, recs)
    cols = read_task_record_columns(path)
    back = read_task_records(path)
    assert list(cols["uid"]) == [r.uid for r in back]
    assert list(cols["name"]) == [r.name for r in back]
    assert list(cols["pilot"]) == [r.pilot for r in back]
    assert list(cols["ranks"]) == [r.ranks for r in back]
    assert list(cols["gpus_per_rank"]) == [r.gpus_per_rank for r in back]
    ec = [np.nan if r.exit_code is None else r.exit_code for r in back]
    np.testing.assert_array_equal(cols["exit_code"], np.asarray(ec, float))
