"""The agent's node link (agent/node_link.py) as one piece, over a real CURVE socket on this host:
what a node executor may send, and what it may not. (End to end, on the cluster of hosts:
tests/batch/test_node_executors.py.)"""

from __future__ import annotations

import time

import pytest
import zmq

from pilotfish import _events as E
from pilotfish import _node_wire as W
from pilotfish._sockets import curve_dealer
from pilotfish.agent.clock import REAL
from pilotfish.agent.node_keys import TOKEN_BYTES, derive
from pilotfish.agent.node_link import NodeLink

TOKEN = b"t" * TOKEN_BYTES  # (a node executor draws its own: node_keys.py)


class Events:
    def __init__(self):
        self.rows = []

    def record(self, uid, name, detail=None, t=None):
        self.rows.append((name, detail))

    def named(self, name):
        return [d for n, d in self.rows if n == name]


def _link(tmp_path, **kw):
    ctx = zmq.Context()
    ev = Events()
    link = NodeLink(ctx, str(tmp_path), REAL, ev, "pilot.0000", [], time.time() + 600, **kw)
    return ctx, ev, link


def _expect(link, name="n2"):
    """A node the link expects an executor of, and that executor's key pair (public, secret),
    derived from the step secret as the executor derives it (node_keys.py)."""
    return derive(link.expect([name]), name)


def _dealer(ctx, link, keys):
    """A connection to the node port with this key pair (no routing id: the ROUTER's own)."""
    return curve_dealer(ctx, link.key_file, link.address, keys=keys)


def _hello(name="n2", pid=1, running=(), exits=(), token=TOKEN):
    return W.encode(W.NodeHello(name, pid, name, list(running), list(exits), token))


def _pump(link, until, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        link.on_readable()
        if until():
            return True
        time.sleep(0.01)
    return False


def test_bad_frames_are_dropped_and_the_node_goes_on(tmp_path):
    ctx, ev, link = _link(tmp_path)
    try:
        sock = _dealer(ctx, link, _expect(link))
        sock.send(_hello(pid=123))
        assert _pump(link, lambda: link.nodes["n2"].up)
        assert ev.named(E.NODE_UP) == ["n2 n2 123"]
        # a spawn the agent sent, then garbage, then the exit of that spawn and of a key
        # the node never had
        assert link.spawn("n2", [(7, ["/bin/true"], None, None, None, None)]) is None
        sock.send(b"\x93garbage")
        sock.send(
            W.encode(
                W.Exits(
                    [
                        (7, 4242, 0, 0, 1.0, 0.0, 0.0, 0, "out", None),
                        (99, 4243, 0, 0, 1.0, 0.0, 0.0, 0, None, None),
                    ]
                )
            )
        )
        assert _pump(link, lambda: link.exits)
        assert len(ev.named(E.BAD_FRAME)) == 1 and "node n2" in ev.named(E.BAD_FRAME)[0]
        _, exits = link.take()
        assert [e[0] for e in exits] == [7]  # not 99: no task of this agent's
        assert link.outputs == {7: ("out", None)}
        assert link.nodes["n2"].lost is None and link.nodes["n2"].up
        # a peer with the server key (nodes.key) but no node's key: refused at its handshake
        # (ZAP, node_keys.py), whatever routing id it claims -- nothing of it reaches the link
        other = curve_dealer(ctx, link.key_file, link.address, identity=b"n2")
        other.send(W.encode(W.Beat(1.0)))
        other.send(_hello())
        assert _pump(link, lambda: link.keys.strangers > 0)
        assert _pump(link, lambda: link.door.counts["handshakes"] > 0)
        _pump(link, lambda: False, 0.3)
        assert len(ev.named(E.BAD_FRAME)) == 1 and link.bad_frames == 1
        assert link.nodes["n2"].up and ev.named(E.NODE_UP) == ["n2 n2 123"]
        sock.close(0)
        other.close(0)
    finally:
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


def test_wrong_key_is_refused_and_counted(tmp_path):
    ctx, ev, link = _link(tmp_path)
    try:
        forged = tmp_path / "forged.key"
        forged.write_bytes(zmq.curve_keypair()[0])
        sock = curve_dealer(ctx, str(forged), link.address, keys=_expect(link))
        sock.send(_hello())
        assert _pump(link, lambda: link.door.counts["handshakes"] > 0)  # (refused: _door.py)
        assert not link.nodes["n2"].up and ev.named(E.NODE_UP) == []
        sock.close(0)
    finally:
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


@pytest.mark.slow
def test_silent_node_is_lost_and_its_processes_end_with_why(tmp_path):
    """Lost after lost_after_s of silence: nothing more goes there at once, its processes are
    held (they may be running to their end: the module docstring) until its verdict,
    verdict_after_s later, which ends them with why."""
    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.3)
    try:
        sock = _dealer(ctx, link, _expect(link))
        sock.send(_hello())
        assert _pump(link, lambda: link.nodes["n2"].up)
        link.spawn("n2", [(1, ["x"], None, None, None, None), (2, ["y"], None, None, None, None)])
        time.sleep(0.5)
        link.tick()
        assert link.nodes["n2"].lost and "no heartbeat" in link.nodes["n2"].lost
        assert link.take() == ([], [])  # held: their end is not known
        assert [d.split()[0] for d in ev.named(E.NODE_LOST)] == ["n2"]
        assert "2 processes held" in ev.named(E.NODE_LOST)[0]
        assert link.spawn("n2", [(3, ["z"], None, None, None, None)]).startswith("node n2 lost")
        time.sleep(link.verdict_after_s)
        link.tick()
        _, exits = link.take()
        assert sorted(e[0] for e in exits) == [1, 2]
        assert all(e[8].startswith("node n2 lost: no heartbeat") for e in exits)
        sock.close(0)
    finally:
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


# -- a holder of the node key (any task of the owner can read nodes.key) -------------------------


def _raw(*fields) -> bytes:
    """A frame as a forger builds it: any msgpack at all."""
    import msgspec

    return msgspec.msgpack.encode(list(fields))


MALFORMED = [
    ("short spawned row", _raw("spawned", [[1]])),
    ("spawned row of wrong types", _raw("spawned", [["x", "y", "z"]])),
    ("spawned rows not a list", _raw("spawned", 7)),
    ("short exit row", _raw("exits", [[7, 1, 0]])),
    ("exit row of wrong types", _raw("exits", [["k", 1, 0, 0, 1.0, 0.0, 0.0, 0, None, None]])),
    ("huge key", _raw("exits", [[(1 << 64) - 1, 1, 0, 0, 1.0, 0.0, 0.0, 0, None, None]])),
    ("huge pid", _raw("spawned", [[7, 1 << 62, 1.0]])),
    ("negative key", _raw("exits", [[-7, 1, 0, 0, 1.0, 0.0, 0.0, 0, None, None]])),
    ("huge signal", _raw("exits", [[7, 1, 0, 1 << 40, 1.0, 0.0, 0.0, 0, None, None]])),
    ("NaN time", _raw("exits", [[7, 1, 0, 0, float("nan"), 0.0, 0.0, 0, None, None]])),
    ("hello of wrong types", _raw("hello", "n2", "pid", "host")),
    ("hello with short exit rows", _raw("hello", "n2", 1, "n2", [], [[1]])),
    ("hello running not keys", _raw("hello", "n2", 1, "n2", ["a"], [])),
    ("hello for another node", _raw("hello", "n3", 1, "n3")),
    ("unknown kind", _raw("nonsense", 1, 2)),
    ("no kind", _raw()),
    ("a map", b"\x81\xa4kind\xa5exits"),
    ("agent's kind from a node", _raw("spawn", [[1, ["/bin/true"], None, None, None, None]])),
    ("deep nesting", b"\x91" * 5000 + b"\xc0"),
    ("not msgpack", b"\xc1\xc1\xc1"),
]


def test_malformed_frames_with_the_real_key_are_dropped_counted_and_the_link_goes_on(tmp_path):
    """Row 10 of issue 42: `["spawned", [[1]]]` from a holder of the node key raised ValueError
    out of on_readable and killed the agent. Every node frame is validated: a malformed one
    is dropped, counted and logged; the node's real frames before and after still count."""
    ctx, ev, link = _link(tmp_path)
    try:
        sock = _dealer(ctx, link, _expect(link))
        sock.send(_hello(pid=123))
        assert _pump(link, lambda: link.nodes["n2"].up)
        assert (
            link.spawn(
                "n2",
                [
                    (7, ["/bin/true"], None, None, None, None),
                    (8, ["/bin/true"], None, None, None, None),
                ],
            )
            is None
        )
        for _why, frame in MALFORMED:
            sock.send(frame)
        sock.send(W.encode(W.Spawned([(7, 4242, 1.0)])))
        sock.send(W.encode(W.Exits([(7, 4242, 0, 0, 1.0, 0.0, 0.0, 0, "out", None)])))
        assert _pump(link, lambda: link.exits)
        assert link.bad_frames == len(MALFORMED), (link.bad_frames, len(MALFORMED))
        bad = ev.named(E.BAD_FRAME)
        assert bad and all("node n2" in d for d in bad), bad
        spawned, exits = link.take()
        assert [(k, p) for k, p, _ in spawned] == [(7, 4242)]
        assert [e[0] for e in exits] == [7] and link.outputs == {7: ("out", None)}
        # a well-formed frame about a key that is not this node's touches nothing
        _expect(link, "n3")
        link.nodes["n3"].up = True
        link.nodes["n3"].last_heard = time.monotonic()
        assert link.spawn("n3", [(9, ["/bin/true"], None, None, None, None)]) is None
        sock.send(W.encode(W.Spawned([(9, -2, "forged failure")])))
        sock.send(W.encode(W.Exits([(9, 1, 0, 0, 1.0, 0.0, 0.0, 0, None, None)])))
        sock.send(W.encode(W.Exits([(8, 4243, 0, 0, 1.0, 0.0, 0.0, 0, None, None)])))
        assert _pump(link, lambda: link.exits)
        spawned, exits = link.take()
        assert spawned == [] and [e[0] for e in exits] == [8]
        assert link.owner.get(9) == "n3" and 9 in link.nodes["n3"].keys
        assert link.nodes["n2"].up and link.nodes["n2"].lost is None
        sock.close(0)
    finally:
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


# -- a node that is lost and comes back ---------------------------------------------------------


def _tick(link, seconds, until=None):
    """The agent's loop for a while: read, tick (heartbeats, losses, verdicts)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        link.on_readable()
        link.tick()
        if until is not None and until():
            return True
        time.sleep(0.02)
    return until is None


class _Partition:
    """What NodeLink needs of a partition: its node names and placer (a real one), and a
    scheduler to give fences back through."""

    def __init__(self, names, cores):
        from pilotfish import _core

        self.names = names
        self.placer = _core.Placer([cores] * len(names), [0] * len(names), [0] * len(names))
        self.scheduler = self

    def release(self, keys, now=None):
        self.placer.release_batch(keys)


def _executor(tmp_path, link, node="n2"):
    """A real node executor (python -m pilotfish.agent.node_executor) on this host, for `node`, which
    the link expects: the step secret on its stdin, as the launcher step gives it."""
    import os
    import subprocess
    import sys

    secret = link.expect([node], None, 30.0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilotfish.agent.node_executor", link.config_path],
        env=dict(os.environ, SLURMD_NODENAME=node),
        stdin=subprocess.PIPE,
    )
    proc.stdin.write(secret.hex().encode() + b"\n")
    proc.stdin.close()
    return proc


@pytest.mark.slow
def test_a_stopped_executor_fences_itself_and_its_node_rejoins_reconciled(tmp_path):
    """Row 6 of issue 42 on one host: the node executor SIGSTOPped for longer than lost_after
    while its tasks run. The agent declares the node lost but holds its tasks' verdict; on
    SIGCONT the executor, having heard nothing for fence_after_s, kills what still runs
    before anything else, and reports what ended while it was stopped. The task that
    completed ends with its real exit (not "node lost"), the killed one says it was killed
    by the fence; the node rejoins, its fences are lifted and it runs tasks again."""
    import os
    import signal

    side = tmp_path / "side"
    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.5)
    link.partitions.append(_Partition(["n2"], 4))
    proc = _executor(tmp_path, link)
    try:
        assert _tick(link, 20, lambda: link.nodes["n2"].up), "the executor never said hello"
        assert (
            link.spawn(
                "n2",
                [
                    (
                        1,
                        ["/bin/sh", "-c", f"sleep 0.3; echo 1 >> {side}"],
                        None,
                        str(tmp_path),
                        None,
                        None,
                    ),
                    (
                        2,
                        ["/bin/sh", "-c", f"sleep 30; echo 2 >> {side}"],
                        None,
                        str(tmp_path),
                        None,
                        None,
                    ),
                ],
            )
            is None
        )
        assert _tick(link, 10, lambda: len([s for s in link.spawned if s[1] > 0]) == 2)
        link.take()
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert _tick(link, 10, lambda: link.nodes["n2"].lost is not None)
            assert _tick(link, 1.0, lambda: side.exists()) and side.read_text() == "1\n"
            # stopped for longer than fence_after_s, well before the verdict (5 x lost_after_s
            # after the loss)
            _tick(link, stopped + link.fence_after_s + 0.5 - time.monotonic())
            spawned, exits = link.take()
            assert exits == [], ("decided while the node's fate was unknown", exits)
            assert [d.split()[0] for d in ev.named(E.NODE_LOST)] == ["n2"]
            assert link.partitions[0].placer.free(0)[0] == 0  # its free cores fenced
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        got = {}

        def reconciled():
            for e in link.take()[1]:
                got[e[0]] = e
            return len(got) == 2 and link.nodes["n2"].lost is None

        assert _tick(link, 15, reconciled), (got, link.nodes["n2"].lost)
        assert got[1][2:4] == (0, 0) and got[1][8] is None, got[1]  # completed: its real end
        assert got[2][3] == signal.SIGKILL and "fence" in got[2][8], got[2]
        assert side.read_text() == "1\n"  # the killed one never ran to its end
        up = ev.named(E.NODE_UP)
        assert len(up) == 2 and "rejoined" in up[1], up
        assert link.partitions[0].placer.free(0)[0] == 4  # fences lifted
        assert link.spawn("n2", [(3, ["/bin/true"], None, None, None, None)]) is None
        assert _tick(link, 10, lambda: any(e[0] == 3 for e in link.exits))
    finally:
        proc.kill()
        proc.wait()
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


@pytest.mark.slow
def test_a_lost_node_that_never_returns_gets_its_verdict_from_its_journal(tmp_path):
    """The node stays silent past the verdict time (5 x lost_after_s after its loss): each of
    its tasks ends as its journal on the shared file system says (its executor writes every
    exit there as it reaps), or, with no word of it, as lost. When the node comes back, exits
    for tasks already decided are late: dropped and counted; a task the agent decided that
    still runs there is killed, and the node rejoins only once it runs none of them."""
    from pilotfish._exit_log import exit_record

    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.2)
    try:
        sock = _dealer(ctx, link, _expect(link))
        sock.send(_hello())
        assert _tick(link, 5, lambda: link.nodes["n2"].up)
        assert link.spawn("n2", [(k, ["x"], None, None, None, None) for k in (1, 2, 3, 4)]) is None
        assert _tick(link, 5, lambda: link.nodes["n2"].lost is not None)
        assert link.take() == ([], [])  # held
        journal = tmp_path / "nodes" / "n2"
        journal.mkdir(parents=True)
        (journal / "exits").write_bytes(exit_record(1, 0, 0, 5.0) + exit_record(2, 0, 9, 6.0))
        got = {}

        def decided():
            for e in link.take()[1]:
                got[e[0]] = e
            return len(got) == 4

        assert _tick(link, 5, decided), got
        assert got[1][2:5] == (0, 0, 5.0) and got[1][8] is None  # completed, says its journal
        assert got[2][3] == 9 and "killed by signal 9" in got[2][8], got[2]
        for k in (3, 4):
            assert (
                got[k][2] != 0 and got[k][8].startswith("node n2 lost") and "no word" in got[k][8]
            ), got[k]
        # it comes back: key 3 ran to its end after all (late, counted), key 4 still runs
        while sock.poll(0):
            sock.recv()
        sock.send(_hello(running=[4], exits=[(3, 11, 0, 0, 7.0, 0.0, 0.0, 0, None, None)]))
        assert _tick(link, 5, lambda: link.late == 1)
        kinds = []
        while sock.poll(300):
            kinds.append(W.decode(sock.recv()))
        kills = [m for m in kinds if isinstance(m, W.Kill)]
        assert kills and kills[0].keys == [4] and kills[0].signal == 9, kinds
        assert link.nodes["n2"].lost is not None  # not before it proves key 4 stopped
        sock.send(_hello(exits=[(4, 12, 0, 9, 8.0, 0.0, 0.0, 0, None, None)]))
        assert _tick(link, 5, lambda: link.nodes["n2"].lost is None)
        assert link.late == 2
        up = ev.named(E.NODE_UP)
        assert "rejoined" in up[-1] and "1 ran to its end after its verdict" in up[-1], up
        assert link.take() == ([], [])  # nothing decided twice
        sock.close(0)
    finally:
        link.close()
        ctx.destroy(0)  # (sockets an assertion left open too)


@pytest.mark.slow
def test_a_slow_agent_has_its_node_fence_itself_then_take_spawns_again(tmp_path):
    """The agent (not the node) falls silent for longer than fence_after_s but less than its
    own lost_after_s would catch (it was not running its loop at all): the executor fences
    itself -- kills what it runs, refuses a spawn that reaches it meanwhile (it never
    started: queued again) -- and once the agent hears its fenced heartbeat and answers, takes
    spawns again. The killed task's end says it was the fence."""
    import signal

    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.5)
    proc = _executor(tmp_path, link)
    try:
        assert _tick(link, 20, lambda: link.nodes["n2"].up), "the executor never said hello"
        assert link.spawn("n2", [(1, ["/bin/sleep", "30"], None, None, None, None)]) is None
        assert _tick(link, 10, lambda: any(s[0] == 1 and s[1] > 0 for s in link.spawned))
        link.take()
        time.sleep(link.fence_after_s + 0.5)  # the agent's loop does not run
        assert link.spawn("n2", [(2, ["/bin/true"], None, None, None, None)]) is None
        got, spawned = {}, {}

        def seen():
            s, e = link.take()
            spawned.update((k, (p, i)) for k, p, i in s)
            got.update((r[0], r) for r in e)
            return 1 in got and 2 in spawned

        assert _tick(link, 10, seen), (got, spawned)
        assert got[1][3] == signal.SIGKILL and "fence" in got[1][8], got[1]
        assert spawned[2][0] == -113 and "never started" in spawned[2][1], spawned[2]
        assert link.nodes["n2"].lost is None  # it never was: the agent was the slow one
        _tick(link, 0.5)  # (the refusal asked for a Resync: it is answered by now)
        assert link.spawn("n2", [(3, ["/bin/true"], None, None, None, None)]) is None
        assert _tick(link, 10, lambda: any(r[0] == 3 and r[2] == 0 for r in link.exits)), (
            "no spawn taken after the agent answered"
        )
    finally:
        proc.kill()
        proc.wait()
        link.close()
        ctx.destroy(0)


def test_a_node_back_before_its_fence_rejoins_with_its_tasks_running(tmp_path):
    """Stopped for longer than lost_after_s but less than fence_after_s: lost, then back. Its
    executor never fenced, so what it runs runs on: the node rejoins with it, and that task is
    the agent's again (killed on demand like any other)."""
    import os
    import signal

    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.5)
    proc = _executor(tmp_path, link)
    try:
        assert _tick(link, 20, lambda: link.nodes["n2"].up), "the executor never said hello"
        assert link.spawn("n2", [(1, ["/bin/sleep", "30"], None, None, None, None)]) is None
        assert _tick(link, 10, lambda: any(s[0] == 1 and s[1] > 0 for s in link.spawned))
        link.take()
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert _tick(link, 10, lambda: link.nodes["n2"].lost is not None)
            _tick(link, stopped + 0.6 * link.fence_after_s - time.monotonic())
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert _tick(link, 10, lambda: link.nodes["n2"].lost is None)
        up = ev.named(E.NODE_UP)[-1]
        assert "rejoined" in up and "1 running" in up, up
        assert link.take() == ([], [])  # nothing ended
        link.kill([1], signal.SIGTERM)
        assert _tick(link, 10, lambda: link.exits)
        _, exits = link.take()
        assert [(e[0], e[3], e[8]) for e in exits] == [(1, signal.SIGTERM, None)], exits
    finally:
        proc.kill()
        proc.wait()
        link.close()
        ctx.destroy(0)


@pytest.mark.slow
def test_an_executor_whose_agent_died_finishes_its_tasks_unfenced(tmp_path):
    """The agent died and its keeper holds the pilot's tasks (keeper.json, agent/keeper.py):
    the executor does not fence -- its tasks run to their end, and the keeper records them --
    however long the agent stays silent."""
    import json

    side = tmp_path / "side"
    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.2)
    proc = _executor(tmp_path, link)
    try:
        assert _tick(link, 20, lambda: link.nodes["n2"].up), "the executor never said hello"
        (tmp_path / "keeper.json").write_text(json.dumps({"pid": 1, "adopted": None}))
        assert (
            link.spawn(
                "n2",
                [
                    (
                        1,
                        ["/bin/sh", "-c", f"sleep {3 * link.fence_after_s}; echo 1 > {side}"],
                        None,
                        None,
                        None,
                        None,
                    )
                ],
            )
            is None
        )
        assert _tick(link, 10, lambda: any(s[0] == 1 and s[1] > 0 for s in link.spawned))
        time.sleep(3 * link.fence_after_s + 1.0)  # the agent is silent (dead)
        assert side.exists(), "the task was killed"
        assert _tick(link, 10, lambda: any(r[0] == 1 for r in link.exits))
        assert [r[2:4] for r in link.exits if r[0] == 1] == [(0, 0)]
        log = (tmp_path / "nodes" / "n2.log").read_text()
        assert "keeper holds" in log and "fencing" not in log, log
    finally:
        proc.kill()
        proc.wait()
        link.close()
        ctx.destroy(0)


# -- a node is who its key says it is (issue 47, row 2) -----------------------------------------


def _handshakes(sock):
    """A monitor of this DEALER's handshakes: () -> (succeeded, failed) so far."""
    import struct

    mon = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )
    seen = [0, 0]

    def read():
        while mon.poll(0):
            event = struct.unpack("=hi", mon.recv_multipart()[0][:6])[0]
            seen[event != zmq.EVENT_HANDSHAKE_SUCCEEDED] += 1
        return tuple(seen)

    return read


def _frames(sock, wait_ms=300):
    got = []
    while sock.poll(wait_ms):
        got.append(type(W.decode(sock.recv())).__name__)
    return got


def test_a_second_connection_as_a_live_node_is_refused_counted_and_gets_nothing(tmp_path):
    """Before: ROUTER_HANDOVER gave a newcomer under a node's routing id that node's route --
    the node was lost, its spawns went to the newcomer. Now a connection is its key's node's
    (ZAP), and while that node is connected a second connection with its key is refused at
    the handshake (300: it may retry, and gets in only once the node is lost), counted, an
    event; every frame for the node goes to its first connection."""
    ctx, ev, link = _link(tmp_path)
    try:
        keys = _expect(link)
        first = _dealer(ctx, link, keys)
        first.send(_hello(pid=11))
        assert _pump(link, lambda: link.nodes["n2"].up)
        second = _dealer(ctx, link, keys)
        seen = _handshakes(second)
        second.send(_hello(pid=12, token=b"x" * TOKEN_BYTES))
        assert _pump(link, lambda: link.keys.second["n2"] >= 1)
        assert link.second >= 1
        refused = ev.named(E.REFUSED)
        assert refused and "second connection as node n2" in refused[0], refused
        assert link.spawn("n2", [(7, ["/bin/true"], None, None, None, None)]) is None
        link.tick()  # (a heartbeat, acks: all to the first)
        assert "Spawn" in _frames(first)
        _pump(link, lambda: False, 0.5)
        assert _frames(second, 100) == [] and seen()[0] == 0, seen()
        assert link.nodes["n2"].pid == 11 and link.nodes["n2"].lost is None
        assert ev.named(E.NODE_UP) == ["n2 n2 11"]
        first.close(0)
        second.close(0)
    finally:
        link.close()
        ctx.destroy(0)


def test_two_connections_before_the_hello_the_first_hello_is_the_node(tmp_path):
    """Both connected while the node had no route (its key leaked before its executor's
    hello, say): the first hello makes its connection the node's route; the other one's frames
    are refused, counted, and nothing is sent to it."""
    ctx, ev, link = _link(tmp_path)
    try:
        keys = _expect(link)
        a, b = _dealer(ctx, link, keys), _dealer(ctx, link, keys)
        seen_a, seen_b = _handshakes(a), _handshakes(b)
        end = time.monotonic() + 5
        while time.monotonic() < end and (seen_a()[0] == 0 or seen_b()[0] == 0):
            link.on_readable()  # (ZAP: both get in, the node has no route yet)
            time.sleep(0.01)
        assert seen_a()[0] == seen_b()[0] == 1
        a.send(_hello(pid=21))
        assert _pump(link, lambda: link.nodes["n2"].up)
        b.send(_hello(pid=22, token=b"y" * TOKEN_BYTES))
        b.send(W.encode(W.Exits([(7, 1, 0, 0, 1.0, 0.0, 0.0, 0, None, None)])))
        assert _pump(link, lambda: link.second >= 2)
        assert link.spawn("n2", [(7, ["/bin/true"], None, None, None, None)]) is None
        assert "Spawn" in _frames(a) and _frames(b, 100) == []
        assert link.nodes["n2"].pid == 21 and link.take() == ([], [])
        a.close(0)
        b.close(0)
    finally:
        link.close()
        ctx.destroy(0)


def test_a_lost_node_is_taken_back_only_with_its_executors_token(tmp_path):
    """The node is lost (silent): its key gets in again (its executor may have reconnected),
    but that connection becomes the node's only with a hello carrying the token of the
    executor's first hello; one without is refused and counted, and gets nothing but the ask
    for a hello. The real executor, on a new connection, rejoins."""
    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=0.2)
    try:
        keys = _expect(link)
        old = _dealer(ctx, link, keys)
        old.send(_hello(pid=31))
        assert _tick(link, 5, lambda: link.nodes["n2"].up)
        assert link.spawn("n2", [(7, ["x"], None, None, None, None)]) is None
        old.close(0)  # (its link broke)
        assert _tick(link, 5, lambda: link.nodes["n2"].lost is not None)
        thief = _dealer(ctx, link, keys)
        thief.send(W.encode(W.Beat(1.0)))  # (asked for a hello)
        assert _tick(link, 5, lambda: "Resync" in _frames(thief, 50))
        thief.send(_hello(pid=32, token=b"z" * TOKEN_BYTES))
        assert _tick(link, 5, lambda: link.second >= 1)
        assert link.nodes["n2"].lost is not None and link.take() == ([], [])
        back = _dealer(ctx, link, keys)
        back.send(_hello(pid=31, running=[7]))
        assert _tick(link, 5, lambda: link.nodes["n2"].lost is None)
        assert "rejoined" in ev.named(E.NODE_UP)[-1] and link.nodes["n2"].keys == {7}
        link.kill([7], 15)
        assert "Kill" in _frames(back) and "Kill" not in _frames(thief, 100)
        thief.close(0)
        back.close(0)
    finally:
        link.close()
        ctx.destroy(0)


@pytest.mark.slow
def test_a_lost_nodes_never_started_tasks_are_queued_again_not_failed(tmp_path):
    """Spawns sent to a node whose executor is stopped (SIGSTOP) reach it only after it fenced
    itself: it never starts them, and what it says of them never reaches the agent (here: the
    agent does not read). At the verdict, the executor's journal and its fence mark say they
    were never tried: they are queued again (NEVER_STARTED), not FAILED "taken as ended" as
    before; the task it was running ends as its journal says (killed by the fence)."""
    import os
    import signal

    from pilotfish.agent.node_link import NEVER_STARTED

    ctx, ev, link = _link(tmp_path, beat_s=0.05, lost_after_s=1.0)
    proc = _executor(tmp_path, link)
    try:
        assert _tick(link, 20, lambda: link.nodes["n2"].up), "the executor never said hello"
        assert link.spawn("n2", [(1, ["/bin/sleep", "30"], None, None, None, None)]) is None
        assert _tick(link, 10, lambda: any(s[0] == 1 and s[1] > 0 for s in link.spawned))
        link.take()
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert (
                link.spawn(
                    "n2",
                    [
                        (2, ["/bin/true"], None, None, None, None),
                        (3, ["/bin/true"], None, None, None, None),
                    ],
                )
                is None
            )
            while time.monotonic() - stopped < link.fence_after_s + 0.3:
                link.tick()  # (the agent's clock runs; it reads nothing from now on)
                time.sleep(0.02)
            assert link.nodes["n2"].lost is not None
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        end = time.monotonic() + 10
        while time.monotonic() < end and link.nodes["n2"].keys:
            link.tick()  # (its verdict, verdict_after_s after the loss)
            time.sleep(0.02)
        spawned, exits = link.take()
        assert sorted((k, p) for k, p, _ in spawned) == [(2, NEVER_STARTED), (3, NEVER_STARTED)]
        assert all("never started there" in why for _, _, why in spawned), spawned
        assert [(e[0], e[3]) for e in exits] == [(1, signal.SIGKILL)], exits
        assert "killed by signal 9 there (its journal)" in exits[0][8], exits[0]
        assert (tmp_path / "nodes" / "n2" / "fenced").exists()
    finally:
        proc.kill()
        proc.wait()
        link.close()
        ctx.destroy(0)
