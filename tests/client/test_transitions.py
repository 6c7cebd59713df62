"""The client's state machines (client/_transitions.py): Task._move and Pilot._move refuse any
move their table lacks, and the managers drop the wire's late and repeated news before
anything moves -- a final state twice, EXECUTING after AGENT_SCHEDULING was skipped, an
older state after a newer one are what a client legitimately hears (re-attach, resume,
requeues), never an error."""

from __future__ import annotations

import time

import pytest

import pilotfish as pf
from pilotfish import _wire
from pilotfish import states as S
from pilotfish.client._transitions import PILOT_LEGAL, TASK_LEGAL, IllegalTransition
from pilotfish.client.pilot import Pilot
from pilotfish.client.task import Task


def test_the_tables_cover_every_state_and_only_go_forward():
    assert set(TASK_LEGAL) == set(S.TASK_STATES)
    assert set(PILOT_LEGAL) == set(S.PILOT_STATES)
    for frm, tos in TASK_LEGAL.items():
        assert all(S.TASK_RANK[to] > S.TASK_RANK[frm] for to in tos), frm
    for frm, tos in PILOT_LEGAL.items():
        assert all(S.pilot_state_rank(to) > S.pilot_state_rank(frm) or to == frm == S.NEW
                   for to in tos), frm
    for final in S.FINAL:  # a final state is never left
        assert TASK_LEGAL[final] == PILOT_LEGAL[final] == frozenset()
    for frm in set(S.TASK_STATES) - S.FINAL - {S.NEW}:  # anything alive can end, any way
        assert S.FINAL <= TASK_LEGAL[frm]
    assert TASK_LEGAL[S.NEW] == {S.SCHEDULING}  # born SCHEDULING
    # skips the client hears: EXECUTING with AGENT_SCHEDULING never seen, a final at once
    assert S.EXECUTING in TASK_LEGAL[S.STAGING_INPUT] and S.DONE in TASK_LEGAL[S.SCHEDULING]
    assert S.ACTIVE in PILOT_LEGAL[S.NEW] and S.FAILED in PILOT_LEGAL[S.NEW]


def _task(state: str) -> Task:
    t = Task(None, "task.000000", pf.TaskDescription(executable="/bin/true"), "pilot.0000")  # type: ignore[arg-type]  # no manager: _move() alone
    t.state = state  # (a test's shortcut to each state)
    return t


def _pilot(state: str) -> Pilot:
    p = Pilot(None, "pilot.0000", pf.PilotDescription(), "/nonexistent")  # type: ignore[arg-type]  # no manager: _move() alone
    p.state = state
    return p


@pytest.mark.parametrize("frm", S.TASK_STATES)
def test_task_move_follows_the_table(frm):
    for to in S.TASK_STATES:
        t = _task(frm)
        if to in TASK_LEGAL[frm]:
            assert t._move(to, 5.0) == frm
            assert t.state == to and t._hist[-2:] == [to, 5.0]
        else:
            with pytest.raises(IllegalTransition, match=f"task task.000000: {frm} -> {to}"):
                t._move(to, 5.0)
            assert t.state == frm and t._hist == []  # nothing changed


@pytest.mark.parametrize("frm", S.PILOT_STATES)
def test_pilot_move_follows_the_table(frm):
    for to in S.PILOT_STATES:
        p = _pilot(frm)
        if to in PILOT_LEGAL[frm]:
            p._move(to, 5.0, "why")
            assert p.state == to and p.history == [(to, 5.0)] and p.reason == "why"
        else:
            with pytest.raises(IllegalTransition, match=f"pilot pilot.0000: {frm} -> {to}"):
                p._move(to, 5.0, "why")
            assert p.state == frm and p.history == [] and p.reason is None


def test_late_and_repeated_news_is_history_not_an_error(session):
    """What the client hears out of order goes through the manager's books (the task
    registry's owner of the task: TaskBooks.apply_updates) without a raise:
    a skipped state, a final twice, an older state after a newer one."""
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    assert t.wait(timeout=60) == S.DONE
    counts = dict(tmgr.counts)
    now = time.time()
    books = session.plane.registry.entries[t.uid][1]  # (_ports.TaskOwner)
    books.apply_updates([(t, _wire.Update(t.uid, S.DONE, now)),
                 (t, _wire.Update(t.uid, S.FAILED, now)),
                 (t, _wire.Update(t.uid, S.EXECUTING, now))], journal=False)
    assert t.state == S.DONE and dict(tmgr.counts) == counts
    # a task the agent reports on before its frame's send is marked: EXECUTING, then
    # AGENT_SCHEDULING late (history only), then the final twice
    u = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"]))
    books.apply_updates([(u, _wire.Update(u.uid, S.EXECUTING, now)),
                 (u, _wire.Update(u.uid, S.AGENT_SCHEDULING, now)),
                 (u, _wire.Update(u.uid, S.CANCELED, now)),
                 (u, _wire.Update(u.uid, S.CANCELED, now))], journal=False)
    assert u.state == S.CANCELED
    assert [s for s, _ in u.history][-3:] == [S.EXECUTING, S.AGENT_SCHEDULING, S.CANCELED]
    pmgr.cancel_pilots()
    assert pilot.wait(timeout=30) == S.CANCELED
    assert [s for s, _ in pilot.history] == [S.NEW, S.LAUNCHING, S.ACTIVE, S.CANCELED]
