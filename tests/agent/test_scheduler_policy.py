"""The scheduling policy on synthetic queues, against the real Rust placer on a simulated
clock: which tasks start first, that nothing starves (a small task behind a stream of large
ones, and the reverse), and that backfill never delays a reservation's start."""

from __future__ import annotations

from pilotfish import _core
from pilotfish._wire import TaskSpec
from pilotfish.agent.tasks import WAITING, AgentTask
from pilotfish.agent.scheduler import Scheduler


class Sim:
    """A scheduler over one placer, tasks running for given durations on a simulated clock."""

    def __init__(self, nodes, **kw):
        """nodes: (cores, gpus) or (cores, gpus, memory MiB) each."""
        mem = [n[2] if len(n) > 2 else 0 for n in nodes]
        self.placer = _core.Placer([n[0] for n in nodes], [n[1] for n in nodes], mem)
        self.sched = Scheduler(self.placer, capacity=[(n[0], n[1], m) for n, m in zip(nodes, mem)],
                               **kw)
        self.now = 0.0
        self.seq = 0
        self.running: dict[int, tuple[AgentTask, float]] = {}
        self.run_s: dict[int, float] = {}  # key -> how long it runs
        self.started: dict[str, float] = {}
        self.order: list[str] = []

    def add(self, name, cores=1, gpus=0, run=1.0, priority=0, duration=None, mem=0):
        t = AgentTask(TaskSpec(uid=name, executable="x", cores_per_rank=cores,
                               gpus_per_rank=gpus, mem_per_rank=mem, priority=priority,
                               duration=duration), self.seq)
        self.run_s[t.key] = run
        self.seq += 1
        self.sched.add([t], self.now)
        return t

    def step(self, dt=0.1):
        for t, _ in self.sched.schedule(self.now):
            self.running[t.key] = (t, self.now + self.run_s[t.key])
            self.started[t.spec.uid] = self.now
            self.order.append(t.spec.uid)
        self.now += dt
        ended = [k for k, (_, end) in self.running.items() if end <= self.now]
        for k in ended:
            del self.running[k]
        self.sched.release(ended)


def test_hardest_to_place_first_then_longest():
    """One free 20-core node: GPU task first, then by cores, then by expected duration;
    arrival order only breaks ties. fifo keeps arrival order."""
    sim = Sim([(20, 1)])
    for name, cores, gpus, dur in (("small", 1, 0, None), ("mid", 4, 0, 5.0), ("mid_long", 4, 0, 50.0),
                                   ("big", 8, 0, None), ("gpu", 2, 1, None)):
        sim.add(name, cores, gpus, duration=dur)
    sim.step()
    assert sim.order == ["gpu", "big", "mid_long", "mid", "small"]
    sim = Sim([(16, 1)], policy="fifo")
    for name, cores, gpus in (("small", 1, 0), ("big", 8, 0), ("gpu", 2, 1)):
        sim.add(name, cores, gpus)
    sim.step()
    assert sim.order == ["small", "big", "gpu"]


def test_fillers_go_longest_first():
    """Tasks within 1/16 of a node (no GPU) fit anywhere: their size does not order them, their
    expected duration does (longest first; one without a duration counts as the longest);
    bigger tasks still go first, by size."""
    sim = Sim([(160, 0)])
    for name, cores, dur in (("f_short9", 9, 5.0), ("f_long1", 1, 60.0), ("f_mid4", 4, 20.0),
                             ("f_unknown8", 8, None), ("big", 40, 1.0)):
        sim.add(name, cores, duration=dur)
    sim.step()
    assert sim.order == ["big", "f_unknown8", "f_long1", "f_mid4", "f_short9"]


def test_a_task_that_needs_much_memory_is_no_filler():
    """1 core but most of a node's memory: hard to place, so it goes by size, before the
    fillers, however short it is."""
    sim = Sim([(160, 0, 160_000)])
    sim.add("f_long", 1, duration=60.0)
    sim.add("memhog", 1, duration=1.0, mem=100_000)
    sim.add("f_small_mem", 1, duration=30.0, mem=1_000)
    sim.step()
    assert sim.order == ["memhog", "f_long", "f_small_mem"]


def test_longest_fillers_first_shortens_the_tail():
    """32 short (1 s, 2 cores) then 16 long (3 s, 1 core) tasks on 64 cores, all fillers:
    largest (or first) first starts every short one at once and the long ones last, ending at
    4 s; longest first starts the long ones at once, the short ones in two waves beside them,
    ending at 3 s."""
    def makespan(with_duration):
        sim = Sim([(64, 0)])
        for i in range(32):
            sim.add(f"s{i}", 2, run=1.0, duration=1.0 if with_duration else None)
        for i in range(16):
            sim.add(f"l{i}", 1, run=3.0, duration=3.0 if with_duration else None)
        while sim.sched.waiting or sim.running:
            sim.step(0.5)
        return sim.now

    assert makespan(True) == 3.0 and makespan(False) == 4.0


def test_priority_wins_over_size():
    sim = Sim([(8, 0)])
    sim.add("big", 8)
    sim.add("urgent_small", 1, priority=5)
    sim.step()
    assert sim.order == ["urgent_small"]  # big no longer fits beside it this round


def test_big_first_fills_the_node_small_ones_backfill():
    """8 x 1-core tasks arrived before one 8-core task on a 12-core node: the big one starts
    at once and 4 small ones beside it (arrival order would start 8 small, then wait)."""
    sim = Sim([(12, 0)])
    for i in range(8):
        sim.add(f"s{i}", 1)
    sim.add("big", 8)
    sim.step()
    assert sim.order[0] == "big" and len(sim.order) == 5


def test_small_task_behind_a_stream_of_large_ones_waits_at_most_the_aging_bound():
    """A 10-core node, a stream of 10-core tasks that always has one waiting, one 1-core
    task: hardest-first alone would never start it; after aging_s it goes first."""
    sim = Sim([(10, 0)], aging_s=5.0, starvation_s=1e9)
    sim.add("L0", 10, run=1.0)
    sim.step()
    small = sim.add("small", 1, run=0.5)
    n = 1
    while "small" not in sim.started:
        while sum(1 for k in sim.sched._shapes.values() for e in k.heap
                  if e[2].state is WAITING) < 2:
            sim.add(f"L{n}", 10, run=1.0)
            n += 1
        sim.step()
        assert sim.now < 60, "the small task starved"
    assert sim.started["small"] - small.queued <= 5.0 + 1.0 + 0.2  # aging + one large run
    assert n > 3  # the stream did overtake it before it aged


def test_large_task_behind_a_stream_of_small_ones_gets_a_reservation():
    """A 10-core node kept full of 1-core tasks that end at different times: cores free one at
    a time and small ones would refill them forever; after starvation_s the large one
    reserves the node, it drains, and the large one starts."""
    sim = Sim([(10, 0)], starvation_s=2.0, aging_s=1e9)
    for i in range(10):
        sim.add(f"s{i}", 1, run=0.5 + 0.3 * i)
    sim.step()
    big = sim.add("big", 10, run=1.0)
    n = 10
    while "big" not in sim.started:
        while sim.sched.waiting < 4:
            sim.add(f"s{n}", 1, run=0.5 + 0.37 * (n % 7))
            n += 1
        sim.step()
        assert sim.now < 60, "the large task starved"
    waited = sim.started["big"] - big.queued
    assert 2.0 <= waited <= 2.0 + 0.5 + 0.37 * 6 + 0.5  # reservation + the longest small run


def test_backfill_never_delays_a_reservation_start():
    """Once the large task holds a reservation, nothing new starts on its node: it starts
    the moment what ran there at the reservation has ended."""
    sim = Sim([(10, 0)], starvation_s=1.0, aging_s=1e9)
    for i in range(10):
        sim.add(f"s{i}", 1, run=3.0 + 0.1 * i)
    sim.step()
    sim.add("big", 10, run=1.0)
    for i in range(10, 40):
        sim.add(f"s{i}", 1, run=0.2)
    while sim.sched._reserved is None:
        sim.step()
    reserved_at = sim.now
    running_then = max(end for _, end in sim.running.values())
    while "big" not in sim.started:
        sim.step()
        if "big" not in sim.started:
            assert all(sim.started[u] < reserved_at for u in sim.started if u != "big"), \
                "a task started on the reserved node"
    assert sim.started["big"] <= running_then + 0.11
