"""Issue 41 phase 3: what RP's tutorials multiple_pilots, debugging and raptor_mpi (1.60)
need of pilotfish.rp -- a task naming a pilot not (yet) added waits for it (RP's early
binding), RP's sandbox layout (<pilot sandbox>/<uid>/ with <uid>.out and <uid>.err), and
prepare_env on an existing venv ('path') -- and TaskManager.remove_pilots. One local session
for the module."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

import pilotfish.rp as rp


@pytest.fixture(scope="module")
def rp_session(tmp_path_factory):
    s = rp.Session(path=str(tmp_path_factory.mktemp("rp41c") / "session"))
    pmgr = rp.PilotManager(s)
    pilots = pmgr.submit_pilots([rp.PilotDescription(
        {"resource": "local.localhost", "cores": 2, "runtime": 10}) for _ in range(2)])
    yield s, pmgr, pilots
    s.close()


def _recorder():
    seen, lock = [], threading.Lock()

    def cb(task, state):
        with lock:
            seen.append((task.uid, state))
    return seen, cb


def test_a_task_naming_a_pilot_not_added_yet_waits_for_it(rp_session):
    s, _, (pilot, _) = rp_session
    tmgr = rp.TaskManager(s)
    seen, cb = _recorder()
    tmgr.register_callback(cb)
    t = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/sh", "pilot": pilot.uid,
                                              "arguments": ["-c", "echo on $RP_PILOT_ID"]}))
    assert t.state == rp.TMGR_SCHEDULING and t.uid in tmgr.list_tasks()
    assert tmgr.wait_tasks(t.uid, timeout=0.2) == rp.TMGR_SCHEDULING  # (returns: pending)
    assert t.stdout == "" and t.exit_code is None and t.sandbox is None
    tmgr.add_pilots(pilot)  # (RP: scheduled now)
    assert tmgr.wait_tasks(t.uid, timeout=60) == rp.DONE
    assert t.pilot == pilot.uid and t.stdout.strip() == f"on {pilot.uid}"
    assert tmgr.get_tasks(t.uid) is t
    mine = [st for u, st in seen if u == t.uid]
    assert mine[:2] == [rp.NEW, rp.TMGR_SCHEDULING] and mine[-1] == rp.DONE
    assert mine.count(rp.NEW) == 1 and mine.count(rp.TMGR_SCHEDULING) == 1, mine


def test_a_task_naming_a_pilot_never_added_stays_pending_until_canceled(rp_session):
    s, _, (_, other) = rp_session
    tmgr = rp.TaskManager(s)
    tmgr.add_pilots(other)
    seen, cb = _recorder()
    tmgr.register_callback(cb)
    a, b, c = tmgr.submit_tasks([
        rp.TaskDescription({"executable": "/bin/true", "pilot": "unknown_pilot_id"}),
        rp.TaskDescription({"executable": "/bin/true"}),
        rp.TaskDescription({"executable": "/bin/true", "pilot": "unknown_pilot_id"})])
    assert tmgr.wait_tasks(b.uid, timeout=30) == rp.DONE
    assert tmgr.wait_tasks([a.uid, b.uid], timeout=0.2) == [rp.TMGR_SCHEDULING, rp.DONE]
    assert b.pilot == other.uid
    a.cancel()
    assert a.wait(timeout=5) == rp.CANCELED and "unknown_pilot_id" in a._pf.reason
    assert (a.uid, rp.CANCELED) in seen
    assert tmgr.wait_tasks(c.uid, timeout=0) == rp.TMGR_SCHEDULING


def test_session_close_cancels_tasks_waiting_for_a_pilot(tmp_path):
    s = rp.Session(path=str(tmp_path / "s"))
    tmgr = rp.TaskManager(s)
    t = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true", "pilot": "p.x"}))
    s.close()
    assert t.state == rp.CANCELED and t.wait(timeout=0) == rp.CANCELED
    with open(os.path.join(s.path, "client.log")) as f:  # (RP's client-side log: it says why)
        assert f"task {t.uid}: waits for pilot 'p.x'" in f.read()


def test_rp_sandbox_layout(rp_session):
    s, _, (pilot, _) = rp_session
    tmgr = rp.TaskManager(s)
    tmgr.add_pilots(pilot)
    ok, bad, named = tmgr.submit_tasks([
        rp.TaskDescription({"executable": "/bin/sh", "arguments": ["-c", "echo hi; echo oh >&2"]}),
        rp.TaskDescription({"executable": "no-such-program-here"}),
        rp.TaskDescription({"executable": "/bin/echo", "arguments": ["x"], "uid": "mine.1"})])
    tmgr.wait_tasks(timeout=60)
    psb = pilot.pilot_sandbox[len("file://localhost"):]
    assert (ok.state, bad.state, named.state) == (rp.DONE, rp.FAILED, rp.DONE)
    for t in (ok, bad, named):  # RP: <pilot sandbox>/<uid>/, its URL the task_sandbox
        assert t.sandbox == os.path.join(psb, t.uid), t.sandbox
        assert t.task_sandbox == f"file://localhost{t.sandbox}/"
        assert os.path.isdir(t.sandbox)
    assert sorted(os.listdir(ok.sandbox)) == [f"{ok.uid}.err", f"{ok.uid}.out"]
    with open(os.path.join(ok.sandbox, f"{ok.uid}.out")) as f:
        assert f.read() == "hi\n" == ok.stdout
    assert ok.stderr == "oh\n" and ok.output_files == []
    assert named.stdout == "x\n" and os.path.isfile(os.path.join(named.sandbox, "mine.1.out"))
    # a task whose program never ran: its <uid>.err says why (RP's, its shell's complaint)
    assert "no-such-program-here" in bad.stderr and bad.stdout == ""
    with open(os.path.join(bad.sandbox, f"{bad.uid}.err")) as f:
        assert "no-such-program-here" in f.read()
    # RP's client sandbox holds the session's directory (<it>/<sid> when the session is
    # named as RP names it); its client.log is there
    assert ok.client_sandbox == os.path.dirname(s.path) == pilot.client_sandbox
    assert os.path.isfile(os.path.join(s.path, "client.log"))


def test_prepare_env_on_an_existing_venv(rp_session, tmp_path):
    s, _, (pilot, _) = rp_session
    with pytest.raises(ValueError, match="does not exist.*python3 -m venv"):
        pilot.prepare_env("ve0", {"type": "venv", "path": str(tmp_path / "absent")})
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=f"{tmp_path / 'plain'}.*is not a venv"):
        pilot.prepare_env("ve1", {"type": "venv", "path": str(tmp_path / "plain")})
    with pytest.raises(ValueError, match="absolute"):
        pilot.prepare_env("ve2", {"type": "venv", "path": "rel/ve"})
    ve = tmp_path / "ve"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(ve)], check=True)
    pilot.prepare_env("ve3", {"type": "venv", "path": str(ve) + "/", "setup": ["not-made"],
                              "pre_exec": ["export FROM_SPEC=1"]})
    tmgr = rp.TaskManager(s)
    tmgr.add_pilots(pilot)
    t = tmgr.submit_tasks(rp.TaskDescription({
        "executable": "/bin/sh", "named_env": "ve3",
        "arguments": ["-c", 'echo "$VIRTUAL_ENV $FROM_SPEC $(command -v python)"']}))
    assert tmgr.wait_tasks(t.uid, timeout=60) == rp.DONE, t.exception_detail
    assert t.stdout.split() == [str(ve), "1", str(ve / "bin" / "python")]


def test_remove_pilots(rp_session):
    s, _, (p0, p1) = rp_session
    tmgr = rp.TaskManager(s)
    tmgr.add_pilots([p0, p1])
    with pytest.raises(ValueError, match="pilot.9999"):
        tmgr.remove_pilots([p0.uid, "pilot.9999"])
    assert tmgr.list_pilots() == [p0.uid, p1.uid]  # (nothing removed)
    busy = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/sleep",
                                                 "arguments": ["1"], "pilot": p0.uid}))
    tmgr.wait_tasks(busy.uid, state=rp.AGENT_EXECUTING, timeout=60)
    tmgr.remove_pilots(p0, drain=True)  # (a Pilot or its uid; drain: its tasks ended)
    assert busy.state == rp.DONE and tmgr.list_pilots() == [p1.uid]
    rest = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/true"})
                              for _ in range(4)])
    tmgr.wait_tasks([t.uid for t in rest], timeout=60)
    assert {t.pilot for t in rest} == {p1.uid} and {t.state for t in rest} == {rp.DONE}
    pinned = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true",
                                                   "pilot": p0.uid}))
    assert tmgr.wait_tasks(pinned.uid, timeout=0.2) == rp.TMGR_SCHEDULING
    tmgr.add_pilots(p0)  # (added again: the task waiting for it goes there)
    assert tmgr.wait_tasks(pinned.uid, timeout=60) == rp.DONE and pinned.pilot == p0.uid
