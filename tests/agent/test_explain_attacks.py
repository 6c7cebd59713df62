"""The `explain/` request directory as a task of the pilot can fill it (issue 42, row 9): every
entry that is not a good request -- nested too deep, too large, not a list of uids, not
UTF-8, not a regular file -- gets an answer saying why (or is dropped, for a name that cannot
be a request id), is counted, and the agent goes on; an entry the agent cannot remove (a
directory) is answered once, never again. The unit test drives the reader directly; the
end-to-end test plants the entries from a task of a real local pilot."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time

import pytest

import pilotfish as pf
from pilotfish.agent.explain import MAX_REQUEST_BYTES, RequestReader, requests


def _answers(d) -> dict[str, dict]:
    return {p.name[:-5]: json.loads(p.read_text()) for p in d.iterdir()
            if p.name.endswith(".json")}


def test_reader_answers_every_hostile_entry_once(tmp_path):
    d = tmp_path / "explain"
    d.mkdir(mode=0o700)
    (d / "deep.req").write_bytes(b"[" * 200_000)
    (d / "deepobj.req").write_bytes(b'[{"a":' * 50_000)
    (d / "huge.req").write_bytes(b'["' + b"a" * MAX_REQUEST_BYTES + b'"]')
    (d / "dict.req").write_text('{"uids": ["task.000001"]}')
    (d / "ints.req").write_text("[1, 2]")
    (d / "empty.req").write_bytes(b"")
    (d / "latin.req").write_bytes(b'["task.\xff"]')
    (d / "utf16.req").write_bytes('["task.000001"]'.encode("utf-16"))
    (d / "digits.req").write_bytes(b"[" + b"9" * 100_000 + b"]")
    (d / "boom.req").write_text('["boom"]')       # the agent's own answer raises
    (d / "ok.req").write_text('["task.000001"]')
    os.mkdir(d / "x.req")                            # empty directory
    os.mkdir(d / "y.req")                            # a directory with something in it
    (d / "y.req" / "inside.req").write_text('["task.000002"]')
    os.mkfifo(d / "fifo.req")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(d / "sock.req"))
    secret = tmp_path / "secret"
    secret.write_text('["task.000003"]')
    os.symlink(secret, d / "link.req")
    os.symlink(tmp_path, d / "dirlink.req")
    os.mkdir(d / "bad name.req")                     # not a request id, and not removable

    asked = []

    def answer(uids):
        if uids == ["boom"]:
            raise KeyError("boom")
        asked.append(uids)
        return [{"uid": u} for u in uids]

    reader = RequestReader(str(tmp_path))
    t0 = time.monotonic()
    n = reader.poll(answer) + reader.poll(answer)   # (MAX_PER_POLL answers per look)
    took = time.monotonic() - t0
    srv.close()
    assert asked == [["task.000001"]]                # only the good one reached the agent
    got = _answers(d)
    assert got.pop("ok") == {"answers": [{"uid": "task.000001"}]}
    why = {k: v["error"] for k, v in got.items()}
    assert set(why) == {"deep", "deepobj", "huge", "dict", "ints", "empty", "latin", "utf16",
                        "digits", "boom", "x", "y", "fifo", "sock", "link", "dirlink"}, why
    assert all(f"request {k}.req: " in v for k, v in why.items()), why   # each names itself
    assert "nested too deep" in why["deep"] and "nested too deep" in why["deepobj"]
    assert f"larger than {MAX_REQUEST_BYTES} bytes" in why["huge"]
    for k in ("dict", "ints"):
        assert "not a JSON list of task uids" in why[k]
    assert "not JSON" in why["empty"] and "not JSON" in why["digits"]
    assert "not UTF-8" in why["latin"] and "not UTF-8" in why["utf16"]
    assert "the agent could not answer it: KeyError" in why["boom"]
    assert "not a regular file (a directory)" in why["x"] and "a directory" in why["y"]
    assert "not a regular file (a FIFO)" in why["fifo"]
    assert "not a regular file (a socket)" in why["sock"]
    assert "not a regular file (a symbolic link)" in why["link"]
    assert "a symbolic link" in why["dirlink"]
    assert n == 17 and reader.counts["answered"] == 1 and reader.counts["rejected"] == 16
    assert reader.counts["dropped"] == 1            # 'bad name.req': never answered
    assert took < 10, took                           # (generous: 2 MB parsed, 20 entries)
    # what could be removed is gone; the directories stay (the agent removes none) ...
    left = sorted(p.name for p in d.iterdir() if not p.name.endswith(".json"))
    assert left == ["bad name.req", "x.req", "y.req"], left
    assert secret.read_text() == '["task.000003"]' and (d / "y.req" / "inside.req").exists()
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in d.glob("*.json"))
    # ... and are never answered again
    for p in d.glob("*.json"):
        p.unlink()
    for _ in range(3):
        assert reader.poll(answer) == 0
    assert not list(d.glob("*.json")) and reader.counts["rejected"] == 16
    assert reader.remembered == 3
    # a new entry of the same name (another inode, another kind) is a new request
    os.rmdir(d / "x.req")
    (d / "x.req").write_text('["task.000004"]')
    assert reader.poll(answer) == 1
    assert _answers(d) == {"x": {"answers": [{"uid": "task.000004"}]}}
    assert reader.remembered == 2                    # x.req's old entry forgotten


def test_module_requests_remembers_per_sandbox(tmp_path):
    """The agent's loop calls requests(sandbox, answer) once a second: the remembering lives
    across calls."""
    d = tmp_path / "explain"
    d.mkdir(mode=0o700)
    os.mkdir(d / "x.req")
    assert requests(str(tmp_path), lambda uids: []) == 1
    (d / "x.json").unlink()
    assert requests(str(tmp_path), lambda uids: []) == 0
    assert not (d / "x.json").exists()


def test_reader_answers_a_bounded_number_per_poll(tmp_path):
    """A flood of requests is answered over several polls, never all in one loop round."""
    from pilotfish.agent.explain import MAX_PER_POLL

    d = tmp_path / "explain"
    d.mkdir(mode=0o700)
    for i in range(MAX_PER_POLL * 2 + 5):
        (d / f"r{i}.req").write_text('["task.000001"]')
    reader = RequestReader(str(tmp_path))
    got = [reader.poll(lambda uids: []) for _ in range(4)]
    assert got == [MAX_PER_POLL, MAX_PER_POLL, 5, 0]


PLANT = textwrap.dedent("""
    import os, sys
    d, what = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    if what == "dir":
        os.mkdir(os.path.join(d, "x.req"))
    else:  # written whole, then renamed: the agent never sees half of it
        tmp = os.path.join(d, "deep.tmp")
        with open(tmp, "wb") as f:
            f.write(b"[" * 200_000)
        os.rename(tmp, os.path.join(d, "deep.req"))
""")


def _plant(tmgr, d, what):
    t = tmgr.submit_tasks(pf.TaskDescription(executable=sys.executable,
                                             arguments=["-c", PLANT, d, what]))
    assert t.wait(timeout=60) == pf.DONE, t.reason


@pytest.mark.slow
def test_task_planted_requests_leave_the_agent_running(session):
    """A task writes a directory `x.req` and a 200 KB nested-`[` request into its pilot's
    explain/ directory: each is answered with why (the directory once, not every second),
    the pilot stays ACTIVE and later tasks run."""
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    d = os.path.join(pilot.sandbox, "explain")
    x = os.path.join(d, "x.json")

    _plant(tmgr, d, "dir")
    # every answer to x.req over 4.5 s (the loop looks once a second), each taken away
    answers, end = [], time.monotonic() + 4.5
    while time.monotonic() < end:
        try:
            answers.append(json.load(open(x)))
            os.unlink(x)
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    assert len(answers) == 1, answers
    assert "request x.req: not a regular file (a directory)" in answers[0]["error"]

    _plant(tmgr, d, "deep")
    deep = os.path.join(d, "deep.json")
    end = time.monotonic() + 10
    while not os.path.exists(deep) and time.monotonic() < end:
        time.sleep(0.05)
    assert "nested too deep" in json.load(open(deep))["error"]

    later = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/echo", arguments=[str(i)])
                               for i in range(5)])
    tmgr.wait_tasks([t.uid for t in later], timeout=60)
    assert [t.state for t in later] == [pf.DONE] * 5, [t.reason for t in later]
    assert pilot.state == pf.ACTIVE, pilot.reason
    log = open(os.path.join(pilot.sandbox, "agent.log")).read()
    assert "explain requests refused" in log, log[-2000:]
