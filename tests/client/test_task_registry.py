"""The session's task registry on a real local pilot: each task's updates reach the manager
that submitted it (the registry's entry made at submit), session.tasks is a read-only view of
every task, and a manager refuses another's task by uid."""

from __future__ import annotations

import pytest

import pilotfish as pf


def test_two_managers_on_one_pilot_each_follow_their_own(session):
    pilot = pf.PilotManager(session).submit_pilots(
        pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    one, two = pf.TaskManager(session), pf.TaskManager(session)
    one.add_pilots(pilot)
    two.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
    seen = {"one": [], "two": []}
    one.register_callback(lambda t, s: seen["one"].append(t.uid))
    two.register_callback(lambda t, s: seen["two"].append(t.uid))
    a = one.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(3)])
    b = two.submit_tasks([pf.TaskDescription(executable="/bin/false") for _ in range(2)])
    assert one.wait_tasks(timeout=30) == [pf.DONE] * 3
    assert two.wait_tasks(timeout=30) == [pf.FAILED] * 2
    assert one.counts[pf.DONE] == 3 and one.counts[pf.FAILED] == 0
    assert two.counts[pf.FAILED] == 2 and two.counts[pf.DONE] == 0
    assert set(seen["one"]) == {t.uid for t in a} and set(seen["two"]) == {t.uid for t in b}

    tasks = session.tasks
    assert len(tasks) == 5 and set(tasks) == {t.uid for t in a + b}
    assert all(tasks[t.uid] is t for t in a + b) and a[0].uid in tasks
    assert tasks.get("task.999999") is None
    with pytest.raises(TypeError):
        tasks["task.999999"] = a[0]  # read-only: only a submit registers a task
    with pytest.raises(pf.PilotfishError, match="belongs to another TaskManager"):
        one.get_tasks([b[0].uid])
    with pytest.raises(pf.PilotfishError, match="no task 'task.999999' in this session"):
        two.wait_tasks(["task.999999"])
