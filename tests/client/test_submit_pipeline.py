"""The submit pipeline's stages alone (client/submit.py: plan, encode, write_journal, register,
send) on real local pilots: what each stage promises, and that nothing of a submit is
registered or sent when a stage before register fails."""

from __future__ import annotations

import os

import pytest

import pilotfish as pf
from pilotfish.client import submit


def _pilots(session, *cores):
    pilots = pf.PilotManager(session).submit_pilots(
        [pf.PilotDescription(nodes=1, cores_per_node=c, runtime="5m") for c in cores])
    for p in pilots:
        assert p.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, p.reason
    return pilots


def _true(n, **values):
    return [pf.TaskDescription(executable="/bin/true", **values) for _ in range(n)]


def test_plan_routes_a_bulk_submit_over_two_pilots_by_capacity(session):
    """60 one-core tasks over a 4-core and a 2-core pilot: planned 40 and 20 (each task sees
    the cores planned before it), with fresh uids, counting no load and registering nothing:
    a plan is only a decision until register."""
    big, small = _pilots(session, 4, 2)
    pilots = {big.uid: big, small.uid: small}
    routing = submit.Routing("backfilling", pilots, dict(pilots))
    plan = submit.plan(_true(60), routing, session.plane)
    assert {u: len(ix) for u, ix in plan.by_pilot.items()} == {big.uid: 40, small.uid: 20}
    assert plan.to_send == list(range(60)) and not plan.resumed
    assert [plan.pilot_uids[i] for i in plan.by_pilot[small.uid]] == [small.uid] * 20
    assert len(set(plan.uids)) == 60 and all(u.startswith("task.") for u in plan.uids)
    assert plan.pilots == pilots
    assert not any(routing.load.values())
    assert len(session.tasks) == 0
    # the uids a plan took are not given again
    again = submit.plan(_true(1), routing, session.plane)
    assert again.uids[0] not in plan.uids

    # a task that fits neither: the plan fails naming it (index, field, why, which pilot)
    with pytest.raises(pf.DescriptionError) as info:
        submit.plan(_true(2) + _true(1, cores_per_rank=8), routing, session.plane)
    e = info.value
    assert (e.index, e.field) == (2, "cores_per_rank") and "8" in str(e), str(e)


def test_encode_fails_naming_the_culprit_and_nothing_is_registered(session):
    """A description that cannot cross the wire (a name that is no string, in a description
    made with from_checked, as pf.Executor and pilotfish.workload make theirs, so no field
    check saw it): encode raises a DescriptionError naming
    its index and field; through TaskManager.submit_tasks, no task of the call is registered,
    counted, journaled or sent, and the same pilot then runs the good ones."""
    (pilot,) = _pilots(session, 2)
    bad = pf.TaskDescription.from_checked({"executable": "/bin/true", "name": object()})
    descs = [*_true(3), bad, *_true(1)]
    routing = submit.Routing("backfilling", {pilot.uid: pilot}, {pilot.uid: pilot})
    plan = submit.plan(descs, routing, session.plane)
    with pytest.raises(pf.DescriptionError) as info:
        submit.encode(plan, None, True)
    assert (info.value.index, info.value.field) == (3, "name")
    assert "cannot be sent to the agent" in str(info.value)

    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    journal = session.journal.path
    size = os.path.getsize(journal)
    with pytest.raises(pf.DescriptionError) as info:
        tmgr.submit_tasks(descs)
    assert (info.value.index, info.value.field) == (3, "name")
    assert len(tmgr) == 0 and len(session.tasks) == 0
    assert not +tmgr.counts
    assert os.path.getsize(journal) == size  # (nothing journaled)
    good = tmgr.submit_tasks(descs[:3] + descs[4:])
    assert tmgr.wait_tasks(timeout=60) == [pf.DONE] * 4
    assert [t.state for t in good] == [pf.DONE] * 4
    assert os.path.getsize(journal) > size


def test_the_stages_by_hand_run_tasks_and_give_their_load_back(session):
    """plan -> encode -> write_journal -> register -> send, called one by one with a
    TaskManager's books as the owner (_ports.SubmitOwner): the frames carry the tasks to the agent
    (SUBMIT_BATCH a frame), register counts their cores on the pilot until they end, the
    journal holds them, and the manager follows them to DONE."""
    from pilotfish._journal import read_journal

    (pilot,) = _pilots(session, 2)
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    routing = tmgr._routing  # (the manager's own: its load is what its tasks give back)
    books = tmgr._books  # (task_books.TaskBooks: the owner of its tasks)
    plane = session.plane
    plan = submit.plan(_true(5, cores_per_rank=2), routing, plane)
    encoded = submit.encode(plan, tmgr.spec_extra, plane.journal.enabled)
    assert [(u, part) for u, _, part in encoded.frames] == [(pilot.uid, [0, 1, 2, 3, 4])]
    assert len(encoded.journal) == 1 and encoded.n_send == 5 and not encoded.fn_sent
    submit.write_journal(encoded, plane)
    tasks = submit.register(plan, books, plane, session.events, routing)
    assert [t.uid for t in tasks] == plan.uids and all(t.pilot == pilot.uid for t in tasks)
    assert [t.state for t in tasks] == [pf.SCHEDULING] * 5
    assert routing.load[pilot.uid] == 10  # 5 tasks x 2 cores, outstanding
    assert all(session.tasks[t.uid] is t for t in tasks)
    submit.send(encoded, tasks, plane, books)
    assert tmgr.wait_tasks(timeout=60) == [pf.DONE] * 5
    assert routing.load[pilot.uid] == 0
    journaled = {r[1] for r in read_journal(plane.journal.path) if r[0] == "task"}
    assert set(plan.uids) <= journaled
