"""pilotfish.client.reading: a session directory read back from its files, without the CLI
(the `pilotfish logs` / `explain` tests drive it through click; here its functions alone, on
a session written by the events writer)."""

from __future__ import annotations

import os
import stat
import time
from types import SimpleNamespace

import pytest

from pilotfish import _events as E
from pilotfish import _explain as X
from pilotfish import states as S
from pilotfish.client import reading


def _session(path, ended_at=None):
    path.mkdir(parents=True)
    (path / "session.json").write_text('{"uid": "%s"}' % path.name)
    t0 = ended_at or time.time()
    w = E.EventWriter(path / "client.events")
    for uid, states in (
        ("task.000000", [S.NEW, S.SCHEDULING, S.EXECUTING, S.DONE]),
        ("task.000001", [S.NEW, S.SCHEDULING]),
    ):
        for i, state in enumerate(states):
            w.record(
                uid,
                state,
                "pilot.0000" if state == S.SCHEDULING and uid.endswith("0") else None,
                t0 + i,
            )
    w.record("task.000000", E.EXEC_START, "direct", t0 + 2)
    w.close()
    return path


def test_histories_say_each_tasks_states_pilot_and_launcher(tmp_path):
    s = _session(tmp_path / "s")
    h = reading.task_histories(str(s), ["task.000000", "task.000001"])
    assert [st for st, _ in h.history["task.000000"]] == [S.NEW, S.SCHEDULING, S.EXECUTING, S.DONE]
    assert h.pilot == {"task.000000": "pilot.0000"}
    assert h.launcher == {"task.000000": "direct"}
    assert (h.first, h.last) == (None, None)  # (the session's other tasks: none here)
    h = reading.task_histories(str(s), ["task.000001"])
    assert (h.first, h.last) == ("task.000000", "task.000000")


def test_explain_tasks_explains_an_ended_and_an_unsent_task_and_names_an_unknown_one(tmp_path):
    s = _session(tmp_path / "s")
    done, unsent = reading.explain_tasks(str(s), ["task.000000", "task.000001"], timeout=1.0)
    assert done[X.WHERE] == X.FINAL and done[X.PILOT] == "pilot.0000", done
    assert "ended DONE" in str(done) and "launched by direct" in str(done), str(done)
    assert unsent[X.WHERE] == X.NOT_SENT, unsent
    with pytest.raises(
        reading.SessionReadError,
        match=r"task\.000009: no such task in .* "
        r"\(its tasks: task\.000000\.\.task\.000001\)",
    ):
        reading.explain_tasks(str(s), ["task.000009"], timeout=1.0)


def test_a_session_without_its_events_is_named(tmp_path):
    s = _session(tmp_path / "s")
    os.unlink(s / "client.events")
    with pytest.raises(reading.SessionReadError, match="client.events: not there"):
        reading.task_histories(str(s), ["task.000000"])


def test_outputs_kept_by_a_run_are_read_back_and_chosen_by_uid_or_group(tmp_path):
    s = _session(tmp_path / "s")
    outs = reading.task_outputs(str(s))
    assert [(o.uid, o.state) for o in outs] == [
        ("task.000000", S.DONE),
        ("task.000001", S.SCHEDULING),
    ]
    task = SimpleNamespace(
        uid="task.000000",
        name="hello",
        state=S.DONE,
        exit_code=0,
        reason=None,
        stdout="hi\n",
        stderr="",
        description=SimpleNamespace(stdout=None, stderr="err.txt"),
    )
    reading.keep_outputs(str(s), [task])
    kept = s / reading.OUTPUTS
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    outs = reading.task_outputs(str(s))
    first = outs[0]
    assert (first.name, first.stdout, first.stderr_path) == ("hello", "hi\n", "err.txt")
    chosen, missing = reading.choose_outputs(outs, ["hello", "task.000001", "nope"])
    assert [o.uid for o in chosen] == ["task.000000", "task.000001"] and missing == ["nope"]
    kept.write_bytes(b"\xc1 not msgpack")
    said: list[str] = []
    outs = reading.task_outputs(str(s), warn=said.append)
    assert len(outs) == 2 and said and reading.OUTPUTS in said[0], said
