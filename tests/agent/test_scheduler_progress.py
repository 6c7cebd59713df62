"""The scheduler never stalls: adversarial mixes of shapes, priorities, colocation groups,
cancels and reservations, driven against the real Rust placer on a simulated clock. Every
task must end up placed (then released), canceled, or handed back as unplaceable with a
reason -- and no reservation may outlive its task."""

from __future__ import annotations

import random

import pytest

from pilotfish import _core
from pilotfish._wire import TaskSpec
from pilotfish.agent.tasks import AgentTask
from pilotfish.agent.scheduler import Scheduler

NODES = [(8, 2, 0)] * 4


def _task(seq, rng, groups):
    ranks = rng.choice([1, 1, 1, 2, 4])
    spec = TaskSpec(
        uid=f"t{seq}", executable="x", ranks=ranks,
        cores_per_rank=rng.choice([1, 1, 2, 4, 8]),
        gpus_per_rank=rng.choice([0, 0, 0, 1, 2]),
        priority=rng.choice([0, 0, 1, 5]),
        colocate=rng.choice([None, None, None] + groups))
    return AgentTask(spec, seq)


@pytest.mark.parametrize("seed", range(12))
def test_adversarial_mix_always_progresses(seed):
    rng = random.Random(seed)
    placer = _core.Placer([c for c, _, _ in NODES], [g for _, g, _ in NODES])
    sched = Scheduler(placer, starvation_s=0.5, capacity=NODES)
    groups = [f"g{i}" for i in range(3)]
    tasks = [_task(i, rng, groups) for i in range(400)]
    running: dict[int, tuple[AgentTask, float]] = {}  # key -> (task, ends at)
    done, canceled, unplaceable = set(), set(), {}
    now, pending = 0.0, list(tasks)
    while pending or sched.waiting or running:
        # arrivals in bursts (a stream of small tasks behind large ones, and the reverse)
        for _ in range(rng.randint(0, 25)):
            if pending:
                sched.add([pending.pop(0)])
        if rng.random() < 0.05:  # the user cancels something still waiting
            waiting = [t for t in tasks if t.state in ("new", "waiting") and t.seq not in done
                       and t.key not in running and t not in pending]
            if waiting:
                victim = rng.choice(waiting)
                sched.discard(victim)
                canceled.add(victim.seq)
        for t, raw in sched.schedule(now):
            assert t.key not in running
            running[t.key] = (t, now + rng.choice([0.1, 0.3, 1.0, 3.0]))
        for t, why in sched.take_unplaceable():
            assert "can never hold" in why
            unplaceable[t.seq] = why
        ended = [k for k, (_, end) in running.items() if end <= now]
        for k in ended:
            done.add(running.pop(k)[0].seq)
        sched.release(ended)
        placer._check()
        now += 0.1
        assert now < 10_000, f"stalled: {sched.waiting} waiting, {len(running)} running"
    everything = done | canceled | set(unplaceable)
    assert everything == {t.seq for t in tasks}
    assert not (done & canceled) and not (done & set(unplaceable))
    assert sched._reserved is None  # no reservation outlives its task
    assert placer.total_free() == (sum(c for c, _, _ in NODES), sum(g for _, g, _ in NODES))


def test_reserved_task_is_not_overtaken_by_a_newer_one_of_its_shape():
    """The stall of old: a newer, higher-priority task of the reserved task's shape took its
    turn at the reserved nodes, failed to place there (they are kept for the reserved key),
    and the reserved task was never tried again."""
    placer = _core.Placer([8, 8], [0, 0])
    sched = Scheduler(placer, starvation_s=0.0, capacity=[(8, 0, 0), (8, 0, 0)])
    small = [AgentTask(TaskSpec(uid=f"s{i}", executable="x"), i) for i in range(16)]
    sched.add(small)
    placed = sched.schedule(0.0)
    assert len(placed) == 16
    big = AgentTask(TaskSpec(uid="big", executable="x", cores_per_rank=8), 100)
    sched.add([big])
    sched.schedule(1.0)  # does not fit: blocked since 1.0
    sched.release([placed[0][0].key])  # something frees up, still not enough for it
    sched.schedule(2.0)  # tried again, still starving: gets a reservation
    assert sched._reserved is big
    newer = AgentTask(TaskSpec(uid="newer", executable="x", cores_per_rank=8, priority=9), 101)
    sched.add([newer])
    sched.release([t.key for t, _ in placed[1:]])  # everything frees up
    got = [t.spec.uid for t, _ in sched.schedule(3.0)]
    assert "big" in got and sched._reserved is None
