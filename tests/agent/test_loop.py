"""The agent's loop (agent/loop.py) as one piece: the parts a pollable declares are called,
in the list's order, a round's ticks only when it did not stop; the poll waits for the
nearest deadline; descriptors are watched from their pollable's add. And the environment
knobs (agent/knobs.py), read once: defaults, values, a bad one named."""

from __future__ import annotations

import math

import zmq

from pilotfish.agent.clock import REAL
from pilotfish.agent.knobs import read_knobs
from pilotfish.agent.loop import WAIT_MS, Loop, Pollable, Step


class Rec(Pollable):
    def __init__(self, name: str, log: list, due: float = math.inf):
        self.name, self.log, self.due = name, log, due

    def due_in(self) -> float:
        return self.due

    def on_ready(self, ready) -> None:
        self.log.append(("ready", self.name))

    def tick(self) -> None:
        self.log.append(("tick", self.name))


class ReadyOnly(Pollable):
    def __init__(self, log: list):
        self.log = log

    def on_ready(self, ready) -> None:
        self.log.append(("ready", "only"))


def test_a_round_serves_the_declared_parts_in_order_and_ticks_only_if_not_stopped():
    log: list = []
    loop = Loop(zmq.Poller(), REAL)
    a, b = Rec("a", log, due=0), Rec("b", log, due=0)
    loop.add(a)
    loop.add(b)
    loop.add(ReadyOnly(log), after=a)  # (inserted: the function pool's way)
    loop.add(Step(lambda: log.append(("tick", "step"))))
    assert loop.readers == [a, loop.pollables[1], b] and len(loop.tickers) == 3
    assert loop.timed == [a, b]  # (Step and ReadyOnly declare no deadline: never asked)
    loop.round(lambda: False)
    assert log == [
        ("ready", "a"),
        ("ready", "only"),
        ("ready", "b"),
        ("tick", "a"),
        ("tick", "b"),
        ("tick", "step"),
    ]
    log.clear()
    loop.round(lambda: True)
    assert log == [("ready", "a"), ("ready", "only"), ("ready", "b")]


def test_the_poll_waits_for_the_nearest_deadline():
    loop = Loop(zmq.Poller(), REAL)
    assert loop.timeout_ms() == WAIT_MS  # nothing due: the longest wait
    p = Rec("p", [])
    loop.add(p)
    for due, ms in [
        (math.inf, WAIT_MS),
        (5.0, WAIT_MS),
        (0.0095, 10),
        (0.0999, 100),
        (0.0, 0),
        (-3.0, 0),
    ]:
        p.due = due
        assert loop.timeout_ms() == ms, due
    q = Rec("q", [], due=0.25)
    loop.add(q)
    p.due = 0.5
    assert loop.timeout_ms() == 251  # the nearer of the two


def test_a_pollables_descriptors_are_watched_from_its_add():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://loop-test")
        b.connect("inproc://loop-test")
        seen: list = []

        class Sock(Pollable):
            fds = (b,)

            def due_in(self) -> float:
                return 0.0  # (never a wait: the test cannot hang)

            def on_ready(self, ready) -> None:
                seen.append(b in ready)

        loop = Loop(zmq.Poller(), REAL)
        loop.add(Sock())
        a.send(b"x")
        for _ in range(200):  # (inproc delivery: at once, or very nearly)
            loop.round(lambda: False)
            if seen[-1]:
                break
        assert seen[-1] and b.recv() == b"x"
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_a_simulated_pilot_looks_at_its_sockets_only_now_and_then_while_time_runs():
    loop = Loop(zmq.Poller(), REAL, sim_poll_s=3600.0)
    loop.add(Rec("p", [], due=0.0))
    loop.last_poll = REAL.real_mono()  # polled just now
    assert loop.wait() == {}  # (no poll: virtual time runs on)


def test_the_knobs_are_read_once_with_their_defaults_and_a_bad_one_named():
    k = read_knobs({})
    assert (k.scheduler, k.rebalance, k.fn_park_s, k.keep_results, k.fn_park_problem) == (
        "utilization",
        True,
        300.0,
        False,
        None,
    )
    k = read_knobs(
        {
            "PILOTFISH_SCHEDULER": "plan",
            "PILOTFISH_REBALANCE": "0",
            "PILOTFISH_FN_PARK_S": "1.5",
            "PILOTFISH_KEEP_RESULTS": "1",
        }
    )
    assert (k.scheduler, k.rebalance, k.fn_park_s, k.keep_results) == ("plan", False, 1.5, True)
    k = read_knobs({"PILOTFISH_FN_PARK_S": "soon"})
    assert k.fn_park_problem == "PILOTFISH_FN_PARK_S='soon': not a number of seconds"
    assert k.fn_park_s == 300.0


def test_the_node_executors_knob_is_read_once_and_turns_them_off():
    from pilotfish.agent.knobs import read_knobs
    from pilotfish.agent.node_link import wanted

    assert read_knobs({}).node_executors is True
    for off in ("0", "false", "no", " off "):
        assert read_knobs({"PILOTFISH_NODE_EXECUTORS": off}).node_executors is False
    desc = {"resource": "slurm"}
    assert wanted(desc, "slurm") is True
    assert (
        wanted(desc, "slurm", read_knobs({"PILOTFISH_NODE_EXECUTORS": "0"}).node_executors) is False
    )
    assert wanted({"resource": "simulated"}, "simulated") is False  # (only when asked)
