"""Every JSON file the client reads back fails alone when it is nested too deep (issue 47,
row 10). Python's json raises RecursionError for it -- not a ValueError, so no reader caught
it: a resume of a session whose session.json or session.key is `[[[[...]]]]` died of a bare
RecursionError, `pilotfish report` too, and `pilotfish explain`, analytics and resume's
local_agent on a deep pilot.json, keeper_state on a deep keeper.json. Now (_json.py) each
reader treats it as any other damaged file: a resume is refused with a SessionError naming
the file; a reader that skips an unreadable file skips it. Each test failed before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import pilotfish as pf
from pilotfish import SessionError

DEEP = b"[" * 200_000 + b"]" * 200_000


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pilotfish.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def ended(tmp_path_factory):
    """A session run by `pilotfish run` (its run.json too), ended."""
    top = tmp_path_factory.mktemp("deep")
    wl = top / "w.yaml"
    wl.write_text(
        "pilot: {nodes: 1, cores_per_node: 1, runtime: 5m}\n"
        "tasks:\n  - {name: ok, count: 2, executable: /bin/echo, arguments: [hi]}\n"
    )
    r = _cli("run", "-q", "--sessions", str(top / "runs"), str(wl))
    assert r.returncode == 0, r.stdout + r.stderr
    (path,) = (top / "runs").iterdir()
    return str(path), str(wl)


@pytest.fixture
def damaged(ended, tmp_path):
    """A copy of the session with one file (relative path) made deep."""
    src, wl = ended

    def make(rel: str) -> str:
        d = str(tmp_path / "s")
        shutil.copytree(src, d, symlinks=True)
        with open(os.path.join(d, rel), "wb") as f:
            f.write(DEEP)
        return d

    make.workload = wl
    return make


@pytest.mark.parametrize("rel", ["session.json", "session.key"])
def test_a_resume_refuses_a_deep_session_file_naming_it(damaged, rel):
    d = damaged(rel)
    with pytest.raises(SessionError) as e:
        pf.Session(path=d, resume=True)
    assert os.path.join(d, rel) in str(e.value), str(e.value)
    r = _cli("run", "-q", "--resume", d, damaged.workload)  # the command says it, no traceback
    assert r.returncode != 0 and os.path.join(d, rel) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr


def test_run_resume_refuses_a_deep_run_json_naming_it(damaged):
    d = damaged("run.json")
    r = _cli("run", "-q", "--resume", d, damaged.workload)
    assert r.returncode == 2 and os.path.join(d, "run.json") in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    "rel",
    ["session.json", "pilot.0000/pilot.json", "pilot.0000/agent.json", "pilot.0000/keeper.json"],
)
def test_the_commands_that_read_a_session_read_past_a_deep_file(damaged, rel):
    d = damaged(rel)
    for args in (
        ["logs", d],
        ["report", d, "--out", os.path.join(d, "rep")],
        ["explain", d, "task.000000"],
    ):
        r = _cli(*args)
        assert r.returncode == 0, (args, r.stdout[-500:], r.stderr[-2000:])
        assert "RecursionError" not in r.stderr, (args, r.stderr)


def test_each_reader_fails_alone(damaged):
    from pilotfish._journal import keeper_state
    from pilotfish.analytics.partitions import pilot_layout
    from pilotfish.analytics.session import load_session
    from pilotfish.client.resume import Resumed, local_agent

    d = damaged("pilot.0000/pilot.json")
    sandbox = os.path.join(d, "pilot.0000")
    assert local_agent(sandbox) == (0, True)  # (unknown: ask it)
    assert pilot_layout(d, "pilot.0000") is None
    assert load_session(d).simulated is False
    for rel in ("keeper.json", "agent.json"):
        with open(os.path.join(sandbox, rel), "wb") as f:
            f.write(DEEP)
    assert keeper_state(sandbox) is None
    r = Resumed()  # (the journal names the first session's sandbox: this copy's, here)
    r.pilots = [("pilot.0000", {}, sandbox)]
    assert r.pilot_keys() == {}
    with open(os.path.join(d, "session.json"), "wb") as f:
        f.write(DEEP)
    assert load_session(d).info == {}
