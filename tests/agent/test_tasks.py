"""The agent task's state table (agent/tasks.py): every legal move is made, every other is
refused loudly, and FINAL is the end."""

from __future__ import annotations

import itertools

import pytest

from pilotfish._wire import TaskSpec
from pilotfish.agent.tasks import (FINAL, LEGAL, NEW, AgentTask, IllegalTransition, TaskState,
                                   move)

# the moves the agent makes, each with where in the agent it is made
EXPECTED = {
    (TaskState.NEW, TaskState.WAITING): "scheduler.add: queued",
    (TaskState.NEW, TaskState.FINAL): "refused on arrival, or no partition holds it",
    (TaskState.NEW, TaskState.BACKOFF): "a failed task's retry waits out its backoff",
    (TaskState.WAITING, TaskState.PLACED): "the placer gave it slots",
    (TaskState.WAITING, TaskState.WAITING): "moved to another partition's queue",
    (TaskState.WAITING, TaskState.DROPPED): "canceled in the queue, or unplaceable",
    (TaskState.WAITING, TaskState.FINAL): "failed or canceled where it waited",
    (TaskState.PLACED, TaskState.RUNNING): "launched",
    (TaskState.PLACED, TaskState.HELD): "its launcher is still starting",
    (TaskState.PLACED, TaskState.FINAL): "it could not be launched",
    (TaskState.HELD, TaskState.RUNNING): "its launcher became ready",
    (TaskState.HELD, TaskState.HELD): "its launcher still starts",
    (TaskState.HELD, TaskState.FINAL): "canceled, or its launcher failed for good",
    (TaskState.HELD, TaskState.NEW): "its partition closed: queued elsewhere",
    (TaskState.RUNNING, TaskState.FINAL): "it ended",
    (TaskState.RUNNING, TaskState.RUNNING): "relaunched by its supervisor",
    (TaskState.RUNNING, TaskState.HELD): "relaunched while its launcher restarts",
    (TaskState.RUNNING, TaskState.NEW): "a retry, or a requeue",
    (TaskState.BACKOFF, TaskState.WAITING): "its backoff ended",
    (TaskState.BACKOFF, TaskState.FINAL): "canceled in its backoff, or the pilot's end",
    (TaskState.DROPPED, TaskState.FINAL): "reported",
}


def _task(state: TaskState) -> AgentTask:
    t = AgentTask(TaskSpec(uid="task.000001", executable="x"), 0)
    t.state = state  # (placing the task for the test; the agent only ever uses move())
    return t


@pytest.mark.parametrize("frm,to", list(itertools.product(TaskState, TaskState)),
                         ids=lambda s: s.name)
def test_every_pair_of_states(frm, to):
    t = _task(frm)
    if (frm, to) in EXPECTED:
        move(t, to)
        assert t.state is to
    else:
        with pytest.raises(IllegalTransition, match=f"{frm.name} -> {to.name}"):
            move(t, to)
        assert t.state is frm  # nothing changed


def test_the_table_is_exactly_the_moves_the_agent_makes():
    assert {(a, b) for a, bs in LEGAL.items() for b in bs} == set(EXPECTED)
    assert LEGAL[FINAL] == frozenset()
    assert AgentTask(TaskSpec(uid="t", executable="x"), 0).state is NEW


def test_a_retry_goes_back_to_new_and_forgets_its_run():
    t = _task(TaskState.RUNNING)
    t.slots, t.procs, t.exit_code, t.reason = [object()], [42], 3, "exit code 3"
    gen = t.gen
    t.reset_for_retry()
    assert (t.state, t.slots, t.procs, t.exit_code, t.reason) == (NEW, None, [], None, None)
    assert t.gen == gen + 1
    final = _task(FINAL)
    with pytest.raises(IllegalTransition):
        final.reset_for_retry()
