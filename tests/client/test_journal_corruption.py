"""A damaged or foreign journal is refused at resume, naming the file and the byte offset --
never silently ignored (which re-ran every task and reused the first pilot's uid); a last
frame torn by a kill still resumes. Real sessions and local pilots; executions counted
through a side effect each task leaves."""

from __future__ import annotations

import collections
import os
import struct

import pytest

import pilotfish as pf
from pilotfish._journal import Journal, encode_records, read_journal

N = 20


def _tasks(side):
    return [pf.TaskDescription(executable="/bin/sh",
                               arguments=["-c", f"echo $PILOTFISH_TASK_UID >> {side}"])
            for _ in range(N)]


def _run(path, side, resume=False, extra=0):
    """The same program: one pilot, N tasks (+ extra new ones); returns the tasks."""
    with pf.Session(path=path, resume=resume, heartbeat_s=0.5) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m"))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        tasks = tm.submit_tasks(_tasks(side) + [pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", f"echo $PILOTFISH_TASK_UID-new >> {side}"])
            for _ in range(extra)])
        tm.wait_tasks(timeout=120)
        assert all(t.state == pf.DONE for t in tasks), [(t.uid, t.state, t.reason) for t in tasks]
        return tasks


def _runs(side) -> collections.Counter:
    with open(side) as f:
        return collections.Counter(line.strip() for line in f if line.strip())


def _frames(data: bytes) -> list[int]:
    """The offsets of the frames of a journal."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        out.append(pos)
        pos += 4 + struct.unpack_from("<I", data, pos)[0]
    return out


@pytest.fixture
def ran(tmp_path):
    """A session that ran N tasks once each, closed."""
    path, side = tmp_path / "session", tmp_path / "side"
    _run(path, side)
    assert sum(_runs(side).values()) == N
    return path, side


def _refused(path, offset: int):
    journal = str(path / "journal")
    with pytest.raises(pf.PilotfishError) as e:
        pf.Session(path=path, resume=True)
    msg = str(e.value)
    assert journal in msg and f"byte {offset}" in msg, msg
    assert "new session" in msg, msg  # what the user can do
    assert isinstance(e.value, pf.JournalError)
    assert e.value.offset == offset and e.value.path == journal
    return msg


def test_bad_bytes_inside_a_frame_are_refused(ran):
    path, side = ran
    data = bytearray((path / "journal").read_bytes())
    data[6:9] = b"\xff\xff\xff"
    (path / "journal").write_bytes(bytes(data))
    _refused(path, 0)
    assert sum(_runs(side).values()) == N  # nothing ran again
    assert sorted(os.listdir(path)).count("pilot.0001") == 0


@pytest.mark.parametrize("change", [+1000, -3, 0xFFFF0000])
def test_a_bad_length_in_the_second_frame_is_refused(ran, change):
    path, side = ran
    data = bytearray((path / "journal").read_bytes())
    second = _frames(bytes(data))[1]
    (length,) = struct.unpack_from("<I", data, second)
    struct.pack_into("<I", data, second, (length + change) % 2**32)
    (path / "journal").write_bytes(bytes(data))
    _refused(path, second)
    assert sum(_runs(side).values()) == N


def test_a_foreign_file_is_refused(ran):
    path, _ = ran
    (path / "journal").write_text('{"not": "a journal"}\n' * 10)
    _refused(path, 0)


@pytest.mark.parametrize("records", [
    [["task", "task.000000"]],                             # too short (was IndexError)
    [["pilot", 5, {}, "/tmp/x", None]],                    # a number for a uid (TypeError)
    [["pilot", "pilot.0000", "not a dict", "/tmp/x"]],
    [["task", "task.x", "pilot.0000", {}]],                # not a task uid (ValueError)
    [["final", "task.000000", "DONE", "zero", None, None, 1.0]],
    [["final", "task.000000", "RUNNING", 0, None, None, 1.0]],  # not a final state
    [5],                                                   # not a record (TypeError)
    [["launch", "pilot.0000"]],                            # not a kind the client writes
    {"a": 1},                                              # not a list of records
], ids=["short", "uid-type", "desc-type", "uid-form", "code-type", "state", "int", "kind",
        "dict"])
def test_records_of_the_wrong_shape_are_refused(tmp_path, records):
    path = tmp_path / "s"
    pf.Session(path=path).close()
    good = Journal(str(path / "journal"))
    good.write([["pilot", "pilot.0000", {"resource": "local"}, str(path / "pilot.0000"), None]])
    good.close()
    offset = os.path.getsize(path / "journal")
    payload = encode_records(records)
    with open(path / "journal", "ab") as f:
        f.write(struct.pack("<I", len(payload)) + payload)
    msg = _refused(path, offset)
    assert "record" in msg


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_a_torn_last_frame_resumes_and_is_mended(ran, cut):
    """Killed mid-write: the last frame is cut short. The resume goes on (nothing ran again)
    and appends after the last whole frame, so a later resume reads everything."""
    path, side = ran
    data = (path / "journal").read_bytes()
    (path / "journal").write_bytes(data[:-cut])
    tasks = _run(path, side, resume=True, extra=1)
    runs = _runs(side)
    assert sum(runs.values()) == N + 1 and all(c == 1 for c in runs.values()), runs
    new_uid = tasks[-1].uid
    assert new_uid == f"task.{N:06d}"
    again = _run(path, side, resume=True, extra=1)
    assert again[-1].uid == new_uid
    assert sum(_runs(side).values()) == N + 1  # the new task was journaled: not run again
    list(read_journal(str(path / "journal"), strict=True))  # whole again


@pytest.mark.parametrize("tail", [b"\x07", b"\x07\x00\x00", b"\x00" * 64,
                                  struct.pack("<I", 40) + b"\x91\x94\xa4final"])
def test_read_journal_ignores_a_torn_tail(tmp_path, tail):
    path = str(tmp_path / "journal")
    j = Journal(path)
    j.write([["final", "task.000000", "DONE", 0, None, None, 1.0]])
    j.write([["final", "task.000001", "DONE", 0, None, None, 2.0]])
    j.close()
    with open(path, "ab") as f:
        f.write(tail)
    got = list(read_journal(path, strict=True))
    assert [r[1] for r in got] == ["task.000000", "task.000001"]


def test_a_journal_appended_after_a_torn_frame_still_reads(tmp_path):
    """What a pilotfish before this one left after a kill mid-write and a resume: a torn
    frame, then whole frames (it appended without cutting the torn one off)."""
    path = str(tmp_path / "journal")
    first = encode_records([["final", "task.000000", "DONE", 0, None, None, 1.0]])
    torn = encode_records([["task", f"task.{i:06d}", "pilot.0000", {"executable": "/bin/true"}]
                           for i in range(1, 50)])
    after = [encode_records([["final", f"task.{i:06d}", "DONE", 0, None, None, 2.0]])
             for i in (50, 51)]
    frames = [struct.pack("<I", len(p)) + p for p in [first, torn] + after]
    with open(path, "wb") as f:
        f.write(frames[0] + frames[1][:len(frames[1]) // 2] + frames[2] + frames[3])
    got = [r[1] for r in read_journal(path, strict=True)]
    assert got == ["task.000000", "task.000050", "task.000051"]
    j = Journal(path, repair=True)  # whole frames to the end: nothing to cut
    j.write([["final", "task.000052", "DONE", 0, None, None, 3.0]])
    j.close()
    assert [r[1] for r in read_journal(path, strict=True)][-1] == "task.000052"


def _frame(records) -> bytes:
    payload = encode_records(records)
    return struct.pack("<I", len(payload)) + payload


def test_every_cut_of_a_journal_reads_and_none_is_read_short(tmp_path):
    """Cut anywhere (a kill mid-write), a journal reads (its whole frames); cut anywhere in
    a frame that whole frames were appended after, it reads all of them or is refused --
    never read up to the cut as if that were all (which re-ran what came after)."""
    path = str(tmp_path / "journal")
    first = _frame([["final", "task.000000", "DONE", 0, None, None, 1.0]])
    torn = _frame([["task", f"task.{i:06d}", "pilot.0000", {"arguments": ["a" * i]}]
                   for i in range(1, 16)])
    after = _frame([["final", "task.000050", "DONE", 0, None, None, 2.0]]) + \
        _frame([["final", "task.000051", "FAILED", 1, 9, "x", 2.0]])
    whole = first + torn + after
    for cut in range(len(whole) + 1):
        with open(path, "wb") as f:
            f.write(whole[:cut])
        list(read_journal(path, strict=True))
    outcomes = collections.Counter()
    for cut in range(1, len(torn)):
        with open(path, "wb") as f:
            f.write(first + torn[:cut] + after)
        try:
            got = [r[1] for r in read_journal(path, strict=True)]
        except pf.JournalError:
            outcomes["refused"] += 1
            continue
        assert got == ["task.000000", "task.000050", "task.000051"], cut
        outcomes["read"] += 1
    assert outcomes["read"] > 10 * outcomes["refused"], outcomes  # refused: cut at a record's edge


def test_a_journal_missing_does_not_reuse_pilot_uids(ran):
    """A journal moved away (to start afresh in the same directory): the new pilot does not
    take a used pilot's uid (its sandbox holds the old agent's journal)."""
    path, _ = ran
    os.rename(path / "journal", path / "journal.bad")
    with pf.Session(path=path, resume=True, heartbeat_s=0.5) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="10m"))
        assert pilot.uid == "pilot.0001"
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
