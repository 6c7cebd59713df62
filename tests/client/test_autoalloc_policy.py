"""The allocation policy's rules (client/_alloc_core.py), each on a simulated batch queue
(client/_alloc_sim.py: a virtual clock, a queue wait, nodes, tasks that last their
duration) or on the policy's own step: demand in, decisions out. No real time passes."""

from __future__ import annotations

from pilotfish.client._alloc_core import (
    CANCEL,
    END,
    FAIL,
    LIMIT,
    PAUSE,
    QUEUED,
    RUNNING,
    SUBMIT,
    Limits,
    Need,
    Policy,
    View,
)
from pilotfish.client._alloc_sim import Cluster, SimTask, simulate


def burst(at: float = 0.0, small: int = 600, big: int = 20, tag: str = "") -> list[SimTask]:
    return [SimTask(f"{tag}s{i}", duration=20, submit_at=at) for i in range(small)] + [
        SimTask(f"{tag}b{i}", ranks=2, cores_per_rank=16, duration=20, submit_at=at)
        for i in range(big)
    ]


LIM = Limits(max_pilots=3, idle_timeout=30, nodes=2, max_nodes=4, cores_per_node=16)


def test_a_burst_runs_on_at_most_max_pilots_each_ended_once_idle():
    """The issue's scenario on the model: 600 one-core tasks and 20 of 2 nodes, at most 3
    pilots, idle timeout 30 s -> at most 3 jobs, every task done, each job ends within
    idle timeout + 15 s of its last task, no allocation idle while a task waits that fits
    it; a second burst 2 minutes after the first ended starts new ones."""
    first = burst()
    r1 = simulate(first, LIM, Cluster(nodes=4, cores_per_node=16, queue_wait=10))
    assert r1.done == 620 and r1.killed == 0 and r1.waiting == 0
    assert 1 <= r1.max_jobs <= 3
    assert r1.idle_while_waiting_core_s == 0
    for j in r1.jobs:
        assert j.last_task_end is not None, j
        assert j.ended - j.last_task_end <= 30 + 15, j
        assert j.why.startswith("DONE: idle"), j
    t2 = r1.makespan + 120
    r2 = simulate(first + burst(at=t2, tag="2"), LIM, Cluster(nodes=4, cores_per_node=16))
    assert r2.done == 1240 and r2.max_jobs <= 3
    late = [j for j in r2.jobs if j.submitted >= t2]
    assert late and all(j.started is not None for j in late)  # the second burst: new ones
    assert all(j.ended <= t2 for j in r2.jobs if j.submitted < t2)  # the first ones ended


def test_a_request_is_sized_from_what_waits():
    """A task that needs 8 nodes gets an allocation of at least 8 (the template says 2);
    4 one-core tasks get one node, not the template's 4."""
    lim = Limits(max_pilots=2, nodes=2, cores_per_node=16, idle_timeout=5)
    r = simulate(
        [SimTask("wide", ranks=8, cores_per_rank=16, duration=5)],
        lim,
        Cluster(nodes=10, cores_per_node=16),
    )
    assert r.done == 1 and [j.nodes for j in r.jobs] == [8]
    lim = Limits(max_pilots=2, nodes=4, cores_per_node=16, idle_timeout=5)
    r = simulate([SimTask(f"t{i}", duration=5) for i in range(4)], lim, Cluster(nodes=10))
    assert r.done == 4 and [j.nodes for j in r.jobs] == [1]


def test_limits_hold_requests_back_and_say_which():
    lim = Limits(max_pilots=5, nodes=1, cores_per_node=16, max_nodes=2, idle_timeout=5)
    r = simulate([SimTask(f"t{i}", duration=30) for i in range(100)], lim, Cluster(nodes=8))
    assert r.done == 100
    assert (
        max(
            sum(
                j.nodes
                for j in r.jobs
                if j.started is not None and j.submitted <= t and (j.ended is None or j.ended > t)
            )
            for t in range(0, int(r.makespan))
        )
        <= 2
    )
    assert any(k == LIMIT and "max_nodes=2" in d for _, k, d in r.events)
    lim = Limits(max_pilots=5, max_queued=1, nodes=1, cores_per_node=16, idle_timeout=5)
    r = simulate(
        [SimTask(f"t{i}", duration=30) for i in range(100)], lim, Cluster(nodes=8, queue_wait=20)
    )
    assert [j.submitted for j in r.jobs][:2] == [0.0, 20.0]  # one queued at a time
    assert any(k == LIMIT and "max_queued=1" in d for _, k, d in r.events)


def test_a_rejected_submission_backs_off_then_pauses_and_loses_nothing():
    words = "sbatch: error: invalid partition specified: nope"
    lim = Limits(
        max_pilots=3, nodes=1, cores_per_node=16, max_failures=3, backoff=5, idle_timeout=5
    )
    r = simulate(
        [SimTask(f"t{i}", duration=5) for i in range(40)], lim, Cluster(reject=words), until=600
    )
    assert r.done == 0 and r.waiting == 40  # they wait, none is lost
    subs = [t for t, k, _ in r.events if k == SUBMIT]
    assert len(subs) == 3  # then paused: no storm, whatever the time
    assert subs[1] - subs[0] >= 5 and subs[2] - subs[1] >= 10  # back-off, doubling
    fails = [d for _, k, d in r.events if k == FAIL]
    assert len(fails) == 3 and all(words in d for d in fails)
    pauses = [d for _, k, d in r.events if k == PAUSE]
    assert len(pauses) == 1 and "3 submissions failed in a row" in pauses[0] and words in pauses[0]


def test_a_success_ends_the_series_of_failures():
    lim = Limits(
        max_pilots=2, nodes=1, cores_per_node=16, max_failures=3, backoff=1, idle_timeout=5
    )
    pol = Policy(lim)
    r = simulate(
        [SimTask(f"t{i}", duration=5) for i in range(40)],
        lim,
        Cluster(reject="no", reject_first=2),
        policy=pol,
    )
    assert r.done == 40 and not any(k == PAUSE for _, k, _ in r.events)
    assert pol.status.failures == 0 and pol.status.paused is None


def test_resume_after_a_pause():
    pol = Policy(Limits(max_failures=1, cores_per_node=4))
    step = pol.step(0.0, [Need("t")], [View("p0", "ended", 1, failed=True, why="FAILED: no")])
    assert pol.status.paused and not step.submit and [k for k, _ in step.events] == [FAIL, PAUSE]
    assert "paused" in pol.why_waiting("t")
    assert pol.resume()
    assert pol.step(100.0, [Need("t")], []).submit  # (the back-off has passed)


def test_an_idle_pilot_ends_but_never_the_last_while_tasks_wait():
    pol = Policy(Limits(idle_timeout=10, cores_per_node=4))
    wide = Need("w", ranks=2, cores_per_rank=4)  # fits no running pilot (1 node each)
    a, b = View("a", RUNNING, 1, 4, 0), View("b", RUNNING, 1, 4, 0)
    assert pol.step(0.0, [wide], [a, b]).end == []
    ends = pol.step(11.0, [wide], [a, b]).end
    assert [u for u, _ in ends] == ["a"] and "idle for 11 s" in ends[0][1]
    for t in (20.0, 100.0):  # b is the last one: it stays while the wide task waits
        assert pol.step(t, [wide], [a, b]).end == []
    pol2 = Policy(Limits(idle_timeout=10, cores_per_node=4))
    pol2.step(0.0, [], [b])
    assert [u for u, _ in pol2.step(10.0, [], [b]).end] == ["b"]  # nothing waits: it ends
    busy = View("c", RUNNING, 1, 4, 0, busy=1)
    assert pol2.step(50.0, [], [busy]).end == []  # a busy one is not idle


def test_a_queued_allocation_no_longer_needed_is_canceled():
    pol = Policy(Limits(idle_timeout=10, cores_per_node=4))
    q = View("q", QUEUED, 1)
    assert pol.step(0.0, [Need("t")], [q]).cancel == []  # it will take t
    assert pol.step(1.0, [], [q]).cancel == []
    step = pol.step(11.5, [], [q])
    assert [u for u, _ in step.cancel] == ["q"] and step.events[0][0] == CANCEL
    assert not any(k == FAIL for k, _ in pol.step(12.0, [], [q._replace(state="ended")]).events)


def test_walltime_tasks_go_where_they_fit_and_the_next_allocation_comes_early():
    pol = Policy(Limits(max_pilots=3, cores_per_node=4, runtime=3600, margin=10))
    ending = View("e", RUNNING, 1, 4, 0, busy=0, left=60.0)
    long_ = Need("long", duration=300)
    short = Need("short", duration=30)
    free = Need("free")  # no duration: walltime does not concern it
    step = pol.step(0.0, [long_, short, free], [ending])
    assert step.dispatch == {"e": ["short", "free"]}
    assert len(step.submit) == 1 and "1 tasks" in step.submit[0][1]  # for `long`, ahead
    assert "(1 would outlive the walltime the running pilots have left)" in step.submit[0][1]
    fresh = View("f", RUNNING, 1, 4, 0, busy=0, left=3000.0)
    assert pol.step(1.0, [long_], [ending, fresh]).dispatch == {"f": ["long"]}


def test_a_large_task_is_not_starved_by_small_ones():
    pol = Policy(Limits(cores_per_node=16, prefetch=0.0))
    p = View("p", RUNNING, 2, 16, 0, busy=30)
    small = [Need(f"s{i}") for i in range(5)]
    step = pol.step(0.0, [Need("big", ranks=2, cores_per_rank=16)] + small, [p])
    assert step.dispatch == {}  # p is held for the big one; the small ones wait behind it
    step = pol.step(1.0, [Need("big", ranks=2, cores_per_rank=16)] + small, [p._replace(busy=0)])
    assert step.dispatch == {"p": ["big"]}


def test_a_task_no_allocation_can_hold_is_said_once_and_not_requested_for():
    pol = Policy(Limits(cores_per_node=4, max_nodes=2))
    huge = Need("h", ranks=3, cores_per_rank=4)
    s1 = pol.step(0.0, [huge], [])
    s2 = pol.step(1.0, [huge], [])
    assert s1.submit == s2.submit == []
    assert [d for k, d in s1.events + s2.events if k == LIMIT] == [
        "h can never start: it needs 3 nodes, more than max_nodes=2"
    ]
    assert "more than max_nodes=2" in pol.why_waiting("h")


def test_the_demand_counts_queued_pilots():
    """Tasks a queued pilot will take are no demand; an allocation is requested only for
    the rest, and while nothing waits nothing is requested."""
    pol = Policy(Limits(max_pilots=5, nodes=1, cores_per_node=4))
    assert pol.step(0.0, [], []).submit == []
    q = View("q", QUEUED, 1)
    assert pol.step(0.0, [Need(f"t{i}") for i in range(4)], [q]).submit == []
    assert len(pol.step(0.0, [Need(f"t{i}") for i in range(6)], [q]).submit) == 1
    assert pol.why_waiting().startswith("waiting for an allocation (2 queued, 0 of 5 running)")


def test_simulated_choices_compare_limits():
    """What `pilotfish simulate --autoalloc` answers: fewer pilots, a longer makespan."""
    tasks = burst(small=300, big=0)
    one = simulate(
        tasks, Limits(max_pilots=1, nodes=1, cores_per_node=16, idle_timeout=30), Cluster(nodes=4)
    )
    four = simulate(
        tasks, Limits(max_pilots=4, nodes=1, cores_per_node=16, idle_timeout=30), Cluster(nodes=4)
    )
    assert one.done == four.done == 300
    assert one.max_jobs == 1 and four.max_jobs == 4
    assert four.makespan < one.makespan / 2
    assert any(k == END for _, k, _ in four.events)


def test_after_a_failure_one_request_at_a_time():
    pol = Policy(Limits(max_pilots=5, nodes=1, cores_per_node=4, backoff=1, max_failures=5))
    work = [Need(f"t{i}") for i in range(40)]
    assert len(pol.step(0.0, work, []).submit) == 5  # no failure yet: up to the limits
    pol2 = Policy(Limits(max_pilots=5, nodes=1, cores_per_node=4, backoff=1, max_failures=5))
    pol2.step(0.0, work, [View("x", "ended", 1, failed=True, why="FAILED: no")])
    assert len(pol2.step(2.0, work, []).submit) == 1  # a probe, not a storm


def test_a_pilot_idle_past_its_timeout_that_gets_a_task_now_is_not_ended():
    """(Ended in the same step that sent it a task, the task was lost with it.)"""
    pol = Policy(Limits(idle_timeout=10, cores_per_node=4))
    a = View("a", RUNNING, 1, 4, 0)
    pol.step(0.0, [], [a])
    step = pol.step(30.0, [Need("t")], [a])
    assert step.dispatch == {"a": ["t"]} and step.end == []
    tasks = [SimTask(f"s{i}", duration=20) for i in range(100)] + [
        SimTask("b", ranks=2, cores_per_rank=16, duration=20)
    ]
    r = simulate(
        tasks,
        Limits(max_pilots=1, nodes=4, cores_per_node=16, idle_timeout=0.0),
        Cluster(nodes=4, queue_wait=1.0),
        until=2000,
    )
    assert r.done == 101 and r.killed == 0


def test_min_and_init_pilots_as_parsl_blocks():
    """init_pilots are requested at once, whatever waits; min_pilots are kept when idle."""
    pol = Policy(
        Limits(max_pilots=4, nodes=2, cores_per_node=4, init_pilots=3, min_pilots=1, idle_timeout=5)
    )
    step = pol.step(0.0, [], [])
    assert [n for n, _ in step.submit] == [2, 2, 2] and "init_pilots=3" in step.submit[0][1]
    views = [View(f"p{i}", RUNNING, 2, 4, 0) for i in range(3)]
    assert pol.step(1.0, [], views).submit == []  # (init: the first step's only)
    ends = pol.step(10.0, [], views).end
    assert len(ends) == 2  # min_pilots=1 kept
    pol2 = Policy(Limits(max_pilots=4, nodes=2, cores_per_node=4, min_pilots=2))
    assert len(pol2.step(0.0, [], []).submit) == 2
    assert pol2.step(0.0, [], [View("q0", QUEUED, 2), View("q1", QUEUED, 2)]).submit == []
    assert pol2.step(99.0, [], [View("q0", QUEUED, 2), View("q1", QUEUED, 2)]).cancel == []


def test_the_users_own_pilots_are_fed_first_never_ended_nor_counted():
    """kept: a pilot of the user's own takes waiting tasks as the policy's do; its room
    counts against the demand; it is never ended (idle) nor counted in max_pilots."""
    pol = Policy(Limits(max_pilots=1, idle_timeout=5, cores_per_node=4, nodes=1, prefetch=0.0))
    mine = View("u", RUNNING, 1, 4, 0, busy=0, kept=True)
    step = pol.step(0.0, [Need(f"t{i}") for i in range(4)], [mine])
    assert step.dispatch == {"u": ["t0", "t1", "t2", "t3"]} and not step.submit
    # more than it holds: the rest asks for an allocation, max_pilots=1 not spent on "u"
    busy = mine._replace(busy=4)
    step = pol.step(1.0, [Need(f"t{i}") for i in range(4, 12)], [busy])
    assert len(step.submit) == 1 and not step.dispatch
    # idle long past idle_timeout: never ended; a queued one of the user's counts as room
    for t in (10.0, 100.0):
        assert pol.step(t, [], [mine]).end == []
    queued = View("q", QUEUED, 2, kept=True)
    assert not pol.step(101.0, [Need("x")], [busy, queued]).submit
    # its shape never becomes the template's
    unknown = Policy(Limits())
    unknown.step(0.0, [], [View("u", RUNNING, 1, 64, 0, kept=True)])
    assert unknown.node_cores is None
