"""TaskManager.remove_pilots (issue 41: RADICAL-Pilot's API) on real local pilots: a removed
pilot gets none of the manager's new tasks, what it already runs runs on (followed, canceled,
explained), a submit naming it is refused naming the field, and bad uids are named."""

from __future__ import annotations

import os
import time

import pytest

import pilotfish as pf
from pilotfish._errors import DescriptionError


def _two_pilots(session):
    pmgr = pf.PilotManager(session)
    a, b = pmgr.submit_pilots([pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m")
                               for _ in range(2)])
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots([a, b])
    for p in (a, b):
        assert p.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, p.reason
    return pmgr, tmgr, a, b


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_removed_pilot_gets_no_new_task_and_runs_its_own_on(session, tmp_path):
    pmgr, tmgr, a, b = _two_pilots(session)
    pidfile = tmp_path / "pid"
    long = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"echo $$ > {pidfile}; exec sleep 30"],
        pilot=a.uid))
    short = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh",
                                                 arguments=["-c", "sleep 1; echo ran"],
                                                 pilot=a.uid))
    assert long.wait(pf.EXECUTING, timeout=30) == pf.EXECUTING
    tmgr.remove_pilots(a.uid)
    assert tmgr.list_pilots() == [b.uid]
    assert a.state == pf.ACTIVE  # the pilot itself goes on
    assert tmgr.get_pilot(a.uid) is a and tmgr.get_pilot("pilot.9999") is None

    # new tasks go to the pilots left, however many
    new = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(6)])
    assert {t.pilot for t in new} == {b.uid}
    # naming the removed pilot: refused, naming the field, the value and why
    with pytest.raises(DescriptionError) as e:
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", pilot=a.uid))
    assert e.value.field == "pilot" and e.value.value == a.uid
    assert "removed from this TaskManager" in str(e.value)

    # what it had runs on there, followed as before: ends DONE, is explained, is canceled
    assert short.wait(timeout=30) == pf.DONE and short.stdout.strip() == "ran"
    assert long.explain(timeout=10)["state"] == pf.EXECUTING
    assert long.sandbox is not None and long.sandbox.startswith(a.sandbox)
    pid = int(pidfile.read_text())
    long.cancel()
    assert long.wait(timeout=30) == pf.CANCELED
    assert _gone(pid)  # its agent stopped it (not only the client's record of it)
    assert tmgr.wait_tasks([t.uid for t in new], timeout=30) == [pf.DONE] * 6

    # added again: it takes tasks again
    tmgr.add_pilots(a)
    again = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", pilot=a.uid))
    assert again.wait(timeout=30) == pf.DONE and again.pilot == a.uid
    pmgr.cancel_pilots([a.uid, b.uid])


def test_drain_waits_for_the_removed_pilots_tasks(session):
    pmgr, tmgr, a, b = _two_pilots(session)
    ts = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["1"],
                                               pilot=a.uid) for _ in range(2)])
    other = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"],
                                                 pilot=b.uid))
    tmgr.remove_pilots([a.uid], drain=True)
    assert [t.state for t in ts] == [pf.DONE, pf.DONE]  # they ended before it returned
    assert other.state not in pf.FINAL  # the other pilot's are not waited for
    pmgr.cancel_pilots([a.uid, b.uid])
    assert other.wait(timeout=30) == pf.CANCELED


def test_bad_pilot_ids_are_named_and_nothing_is_removed(session):
    pmgr, tmgr, a, b = _two_pilots(session)
    with pytest.raises(ValueError, match=r"pilot_ids 'pilot\.9999' is not a pilot of this"):
        tmgr.remove_pilots([a.uid, "pilot.9999"])
    assert tmgr.list_pilots() == [a.uid, b.uid]  # all or nothing
    with pytest.raises(ValueError, match="names no pilot"):
        tmgr.remove_pilots([])
    with pytest.raises(ValueError, match="drain 'yes' must be True or False"):
        tmgr.remove_pilots(a.uid, drain="yes")
    with pytest.raises(ValueError, match="must be a pilot uid or a list"):
        tmgr.remove_pilots(7)
    tmgr.remove_pilots(a.uid)
    with pytest.raises(ValueError, match="was removed from this TaskManager already"):
        tmgr.remove_pilots(a.uid)
    tmgr.remove_pilots(b.uid)
    with pytest.raises(pf.PilotfishError, match="no live pilot.*taken off by remove_pilots"):
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    pmgr.cancel_pilots([a.uid, b.uid])
