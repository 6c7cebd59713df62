"""The scheduler's counts of what waits (waiting, waiting_cores, waiting_gpus): kept exact,
task by task, through every way a task joins or leaves the queue -- add, place (a round, a
reservation), discard (cancel), take (moved to another partition), drain, and found
unplaceable -- against the real Rust placer. The function pool's idle workers give way by
these counts (agent/functions.py, through ports.Host.waiting_for)."""

from __future__ import annotations

import random

import pytest

from pilotfish import _core
from pilotfish._wire import TaskSpec
from pilotfish.agent.scheduler import POLICIES, Scheduler
from pilotfish.agent.tasks import WAITING, AgentTask

NODES = [(8, 2, 0), (8, 2, 0), (4, 0, 0)]  # (cores, gpus, memory MiB: 0 untracked)


def _queue(policy: str) -> tuple[Scheduler, object]:
    placer = _core.Placer([n[0] for n in NODES], [n[1] for n in NODES], [n[2] for n in NODES])
    return Scheduler(placer, capacity=NODES, policy=policy, starvation_s=0.0,
                     plan_sync=True, plan_budget_s=0.01), placer


def _task(seq: int, ranks=1, cores=1, gpus=0, colocate=None) -> AgentTask:
    return AgentTask(TaskSpec(uid=f"t{seq}", executable="x", ranks=ranks, cores_per_rank=cores,
                              gpus_per_rank=gpus, colocate=colocate, duration=1.0), seq)


def _check(s: Scheduler, queued: set) -> None:
    """The counts equal a scan of the tasks in the queue."""
    assert all(t.state is WAITING for t in queued)
    assert s.waiting == len(queued)
    assert s.waiting_cores == sum(t.spec.ranks * t.spec.cores_per_rank for t in queued)
    assert s.waiting_gpus == sum(t.spec.ranks * t.spec.gpus_per_rank for t in queued)


def test_counts_of_a_task_of_each_shape():
    """Add, place, discard by hand: the counts follow each step."""
    s, _ = _queue("utilization")
    a, b, c = _task(0, ranks=2, cores=3), _task(1, cores=2, gpus=1), _task(2, cores=20)
    s.add([a, b, c], 0.0)
    assert (s.waiting, s.waiting_cores, s.waiting_gpus) == (3, 28, 1)
    placed = {t for t, _ in s.schedule(0.0)}
    assert placed == {a, b}  # c (20 cores on one rank) fits no node: waits
    assert (s.waiting, s.waiting_cores, s.waiting_gpus) == (1, 20, 0)
    s.discard(c)
    assert (s.waiting, s.waiting_cores, s.waiting_gpus) == (0, 0, 0)
    s.discard(c)  # (twice: counted once)
    assert (s.waiting, s.waiting_cores, s.waiting_gpus) == (0, 0, 0)


@pytest.mark.parametrize("policy", POLICIES)
def test_counts_stay_exact_through_every_way_out(policy):
    """A seeded random run of adds, rounds, releases, cancels, takes, drains and colocated
    tasks found unplaceable: after each step the counts equal a scan of the queue."""
    rng = random.Random(7)
    s, _ = _queue(policy)
    queued: set = set()
    running: list = []
    seq = 0
    kinds = {"add": 0, "place": 0, "discard": 0, "take": 0, "drain": 0, "unplaceable": 0}
    for step in range(600):
        op = rng.random()
        if op < 0.4:
            batch = []
            for _ in range(rng.randint(1, 6)):
                shape = rng.choice([(1, 1, 0), (1, 2, 0), (2, 3, 0), (1, 1, 1), (2, 2, 1),
                                    (1, 6, 0), (1, 9, 0)])
                colocate = None
                if rng.random() < 0.1:  # a group on the 4-core node: 6 cores never fit there
                    colocate = f"g{rng.randint(0, 2)}"
                    shape = rng.choice([(1, 1, 0), (1, 6, 0)])
                batch.append(_task(seq, *shape, colocate=colocate))
                seq += 1
            s.add(batch, step * 0.1)
            queued.update(batch)
            kinds["add"] += len(batch)
        elif op < 0.65:
            for t, _ in s.schedule(step * 0.1):
                queued.discard(t)
                running.append(t)
                kinds["place"] += 1
        elif op < 0.8 and running:
            rng.shuffle(running)
            done, running = running[: rng.randint(1, len(running))], running
            running = running[len(done):]
            s.release([t.key for t in done], step * 0.1)
        elif op < 0.9 and queued:
            t = rng.choice(sorted(queued, key=lambda t: t.seq))
            s.discard(t)
            queued.discard(t)
            kinds["discard"] += 1
        elif op < 0.97:
            for t in s.take(rng.randint(1, 12), lambda key: True):
                queued.discard(t)
                kinds["take"] += 1
        else:
            for t in s.drain_waiting():
                queued.discard(t)
                kinds["drain"] += 1
        for t, _ in s.take_unplaceable():
            queued.discard(t)
            kinds["unplaceable"] += 1
        _check(s, queued)
    assert all(kinds.values()), kinds  # every way in and out was taken
