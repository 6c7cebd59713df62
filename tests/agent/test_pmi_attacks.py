"""Attacks on the PMI worlds of MPI tasks (issue 47, rows 1, 3, 4 and 6), on this host: a local
pilot, and the agent's side of a world (agent/pmi/worlds.PmiWorlds) wired to node servers
(agent/pmi/node.NodePmi) through the real node wire (_node_wire encode/decode) in this process.

- another user (nobody) who lists /dev/shm, recovers the pilot's naming from two MPICH worlds
  and plants the shared memory names of the next tasks stops none of them: a world's KVS name
  carries 128 random bits (one name on all its nodes), a name already taken gets a new one on
  a world's only node and refuses a world across nodes there;
- a rank that exits 0 without ever speaking PMI while a child keeps its descriptor fails its
  task (the connection's state when the rank is reaped decides, not its descriptor's EOF);
- a remote node's 70,000 keys complete one fence (bounded parts, both ways); a world whose
  keys, all nodes together, would pass its cap fails as the contribution arrives, naming the
  cap, the size and the node, before anything is merged or sent back; a fence frame that
  cannot be accepted fails its world at once.
"""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from mpi_programs import build_hello

import pilotfish as pf
from pilotfish import _node_wire as W
from pilotfish.agent import pmi
from pilotfish.agent.pmi.node import NodePmi
from pilotfish.agent.pmi.worlds import PmiWorlds
from pilotfish.agent.tasks import AgentTask
from pilotfish.launch.pmi import world_name

PROGS = Path(__file__).resolve().parent / "pmi_progs"
RAW = str(PROGS / "raw_pmi.py")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> str:
    return build_hello(tmp_path_factory)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        pilot = pf.PilotManager(s).submit_pilots(
            pf.PilotDescription(resource="local", cores_per_node=4, runtime="10m")
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        yield tmgr


# -- another user's planted names ----------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as user nobody")
def test_nobody_cannot_stop_mpi_tasks_by_planting_shared_memory_names(local, hello):
    """nobody watches /dev/shm while two MPI tasks run, works out the names of the next ones
    (tests/agent/pmi_progs/shm_planter.py) and creates their shared memory files: before,
    it found the pilot's tag and 10 of the next 10 tasks FAILED ("cannot serve its PMI world
    ... exists"); now no name of that form explains what it saw, and none fails."""
    nobody = pwd.getpwnam("nobody").pw_uid
    planter = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={nobody}",
            f"--regid={nobody}",
            "--clear-groups",
            sys.executable,
            str(PROGS / "shm_planter.py"),
            "60",
            "12",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    planted: list[str] = []
    try:
        # its first look at /dev/shm comes before the tasks: a planter slow to start (a loaded
        # machine) would take their worlds for old ones and see nothing
        assert planter.stdout.readline().strip() == "watching"
        first = local.submit_tasks(
            [
                pf.TaskDescription(executable=hello, ranks=2, arguments=["sleep", "2"])
                for _ in range(2)
            ]
        )
        local.wait_tasks([t.uid for t in first], timeout=120)
        out, _ = planter.communicate(timeout=120)
        got = json.loads(out)
        planted = got["planted"]
        print(
            f"nobody saw worlds {got['seen']}, found tags {got['tags']}, "
            f"planted {len(planted)} names"
        )
        assert len(got["seen"]) == 2, got  # (it saw both worlds: the attack ran)
        assert got["tags"] == [], got  # the names are not of a form it can work out
        nxt = local.submit_tasks([pf.TaskDescription(executable=hello, ranks=2) for _ in range(10)])
        local.wait_tasks([t.uid for t in nxt], timeout=120)
        failed = [(t.uid, t.reason) for t in first + nxt if t.state != pf.DONE]
        assert not failed, (f"{len(failed)} of {len(first + nxt)} failed", failed[:2])
    finally:
        if planter.poll() is None:
            planter.kill()
        for p in planted:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def test_a_world_has_one_unpredictable_name_on_every_node():
    """Every node's server tells a world's ranks the world's own name -- 128 random bits drawn
    per task attempt (launch/pmi.py) --, never one of its own: MPICH knows a rank's world by
    it, and ranks told different names took each other for another world's (issue 51: each
    node drew a fresh name, and MPI_Intercomm_create_from_groups aborted across hosts)."""
    a, b = NodePmi("n1", _no_fence, _no_fail), NodePmi("n2", _no_fence, _no_fail)
    try:
        w1, w2 = world_name("task.000001", 1), world_name("task.000001", 2)
        a.start(w1, 2, ["n1", "n2"], [(0, 10)], 5)
        b.start(w1, 2, ["n1", "n2"], [(1, 11)], 5)
        a.start(w2, 1, ["n1"], [(0, 12)], 5)
        assert a.jobs[w1].job.name == b.jobs[w1].job.name == w1
        assert a.jobs[w1].job.env(0)["PMI_JOBID"] == b.jobs[w1].job.env(1)["PMI_JOBID"] == w1
        for n in (w1, w2):
            token = n.split(".")[1]
            assert len(token) == 32 and int(token, 16) >= 0, n  # 128 bits, hex
        assert pmi.mpich_world_id(w1) != pmi.mpich_world_id(w2)
    finally:
        a.close()
        b.close()


def test_a_world_across_nodes_whose_name_is_taken_on_one_is_refused_there():
    """Shared memory of a world's name exists on one of its nodes (planted, or a hash collision
    with a killed run's): that node refuses the world, naming why, rather than telling its
    ranks another name than the other nodes' (one world, two names)."""
    name = f"pf.taken.{os.getpid()}.{'2' * 32}"
    paths = [f"{pmi.SHM_DIR}/mpich_shm_{pmi.mpich_world_id(name):x}_{n}" for n in (0, 1)]
    for path in paths:  # (node id 1: its second node's; 0: a world's only node)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    b = NodePmi("n2", _no_fence, _no_fail)
    try:
        with pytest.raises(ValueError, match="shared memory name on n2 is taken"):
            b.start(name, 2, ["n1", "n2"], [(1, 11)], 5)
        assert name not in b.jobs and b.server.jobs() == []
        alone = b.start(name, 1, ["n2"], [(0, 12)], 5)  # all its ranks here: a fresh name
        assert b.jobs[name].job.name != name and len(alone) == 1
    finally:
        b.close()
        for path in paths:
            os.unlink(path)


def test_a_name_already_taken_gets_a_new_one(monkeypatch):
    """Shared memory of the name a job would get exists (planted, or left by a killed run):
    the job is served under a fresh name instead of failing; so are its ranks' PMI answers."""
    real, tokens = pmi.secrets.token_hex, iter(["0" * 32, "1" * 32])
    monkeypatch.setattr(pmi.secrets, "token_hex", lambda n: next(tokens, None) or real(n))
    taken = f"pf.taken.{os.getpid()}.{'0' * 32}"
    path = f"{pmi.SHM_DIR}/mpich_shm_{pmi.mpich_world_id(taken):x}_0"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    os.close(fd)
    srv = pmi.PmiServer()
    try:
        job = srv.add_job(f"pf.taken.{os.getpid()}", 1, [0], fresh_name=True)
        assert job.name == f"pf.taken.{os.getpid()}.{'1' * 32}", job.name
        assert job.env(0)["PMI_JOBID"] == job.name
        plain = srv.add_job(taken, 1, [0])  # a name the owner chose, taken: a new one too
        assert plain.name != taken and plain.kvsname == taken
        assert not any(os.path.lexists(p) for p in plain.shm_paths())
    finally:
        srv.close()
        os.unlink(path)


# -- a rank that exits without PMI ----------------------------------------------------------------


def test_a_rank_that_exits_without_pmi_while_a_child_holds_its_descriptor(local):
    """Before: DONE (2 singletons) -- the child kept descriptor 3 open, so its EOF never came."""
    (t,) = local.submit_tasks(
        [
            pf.TaskDescription(
                executable="/bin/sh", launcher="pmi", ranks=2, arguments=["-c", "sleep 20 & exit 0"]
            )
        ]
    )
    local.wait_tasks([t.uid], timeout=60)
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert "ended without speaking PMI" in t.reason, t.reason


def test_node_pmi_decides_at_the_ranks_exit():
    """A node server's view: rank 0 exits 0 without PMI (its child holds the descriptor) ->
    noinit at its reap; rank 1 inited and exited without finalize -> lost at its reap."""
    from pilotfish._core import Executor

    fails: list[tuple] = []
    node = NodePmi("n1", _no_fence, lambda *a: fails.append(a))
    core = Executor(base_env=[f"{k}={v}" for k, v in pmi.clean_environment(os.environ).items()])
    try:
        got = node.start("pf.exit.1", 1, ["n1"], [(0, 0)], 30)
        specs = [
            (
                0,
                ["/bin/sh", "-c", "sleep 5 & exit 0"],
                _env(got[0][1]),
                None,
                None,
                None,
                False,
                got[0][0],
            )
        ]
        pids = [pid for pid, _ in core.spawn_batch(specs)]
        node.spawned("pf.exit.1")
        _reap_all(core, node, pids)
        assert fails and fails[0][:2] == ("pf.exit.1", 0) and fails[0][3] == "noinit", fails
        assert "ended without speaking PMI" in fails[0][2]
        fails.clear()
        got = node.start("pf.exit.2", 1, ["n1"], [(0, 2)], 30)
        specs = [
            (2, [sys.executable, RAW, "lost"], _env(got[2][1]), None, None, None, False, got[2][0])
        ]
        pids = [pid for pid, _ in core.spawn_batch(specs)]
        node.spawned("pf.exit.2")
        _reap_all(core, node, pids)
        assert fails and fails[0][3] == "lost", fails
    finally:
        node.close()


# -- fences: bounded parts, the world's cap where it is merged ------------------------------------


class Wire:
    """An agent (PmiWorlds) and node servers (NodePmi) in this process, every message between
    them through the node wire's encoder and decoder, delivered in order by pump()."""

    def __init__(self, nodes: list[str], max_kvs_bytes: int = pmi.MAX_KVS_BYTES):
        self.queue: list[tuple[str, str, bytes]] = []  # (to, from, frame)
        self.killed: list[str] = []
        self.node_fails: list[tuple] = []
        self.worlds = PmiWorlds(
            "n1", lambda t: self.killed.append(t.spec.uid), link=self, max_kvs_bytes=max_kvs_bytes
        )
        self.nodes = {n: NodePmi(n, self._fence_from(n), self._fail_from(n)) for n in nodes}
        self.sizes: list[int] = []  # the agent's frames' sizes

    def _fence_from(self, n):
        return lambda k, e, keys: self.queue.append(("agent", n, W.encode(W.PmiFence(k, e, keys))))

    def _fail_from(self, n):
        def fail(k, rank, why, kind):
            self.node_fails.append((n, k, rank, why, kind))
            self.queue.append(("agent", n, W.encode(W.PmiFail(k, rank, why, kind))))

        return fail

    def send_to(self, node, msg):  # (the agent's link)
        frame = W.encode(msg)
        self.sizes.append(len(frame))
        self.queue.append((node, "agent", frame))

    def pump(self) -> None:
        while self.queue:
            to, frm, frame = self.queue.pop(0)
            msg = W.decode(frame)
            if to == "agent":
                if isinstance(msg, W.PmiFence):
                    self.worlds.on_fence(frm, msg.kvsname, msg.epoch, msg.keys)
                else:
                    self.worlds.on_fail(frm, msg.kvsname, msg.rank, msg.why, msg.kind)
            else:
                self.nodes[to].fence_done(msg.kvsname, msg.epoch, msg.merged)

    def close(self):
        for n in self.nodes.values():
            n.close()
        self.worlds.close()


def _task(uid: str) -> AgentTask:
    t = AgentTask(SimpleNamespace(uid=uid), 1)
    t.running = 2
    return t


def _env(env: dict) -> list[str]:
    return [f"{k}={v}" for k, v in {**pmi.clean_environment(os.environ), **env}.items()]


def _reap_all(core, node, pids, timeout=60.0, wire=None) -> dict[int, int]:
    """Serve node (and the wire) until the core reaped every pid: {spawn key: exit code}."""
    codes: dict[int, int] = {}
    servers = [node] if not isinstance(node, list) else node
    killed = False
    end = time.monotonic() + timeout
    while len(codes) < len(pids):
        if time.monotonic() > end:
            core.kill(pids, signal.SIGKILL)
            pytest.fail(f"ranks still running after {timeout} s: {codes}")
        select.select([s.fileno() for s in servers] + [core.notify_fd], [], [], 0.05)
        for s in servers:
            s.poll()
        if wire is not None:
            wire.pump()
            if wire.killed and not killed:  # (the agent's kill: SIGKILL every rank)
                killed = core.kill(pids, signal.SIGKILL) or True
        for key, pid, code, *_ in core.reap():
            codes[key] = code
            for s in servers:
                s.reaped(key)
    return codes


def _world(wire: Wire, uid: str, argv: list[str], nodes: list[str], init_timeout: float = 30):
    """Start a world of len(nodes) ranks (rank r on nodes[r]; "n1": the agent's own node):
    PmiWorlds.prepare, each node's NodePmi.start with its PmiStart (through the wire's codec),
    the ranks spawned by the Rust core. (task, core, pids)."""
    from pilotfish._core import Executor

    t = _task(uid)
    world = SimpleNamespace(kvsname=f"pf.{uid}", size=len(nodes), nodes=tuple(nodes))
    ranks = [(r, 100 + r, None if n == "n1" else n) for r, n in enumerate(nodes)]
    fds, starts = wire.worlds.prepare(t, world, ranks, init_timeout)
    core = Executor(base_env=[f"{k}={v}" for k, v in pmi.clean_environment(os.environ).items()])
    specs = []
    for key, fd in fds.items():  # (the agent's own ranks)
        env = wire.worlds.local.jobs[world.kvsname].job.env(key - 100, pmi.RANK_FD)
        specs.append((key, argv, _env(env), None, None, None, False, fd))
    for n, st in starts.items():
        st = msgspec.msgpack.decode(msgspec.msgpack.encode(st), type=W.PmiStart)
        got = wire.nodes[n].start(st.kvsname, st.size, st.nodes, st.ranks, st.init_timeout)
        for key, (fd, env) in got.items():
            specs.append((key, argv, _env(env), None, None, None, False, fd))
    pids = [pid for pid, _ in core.spawn_batch(specs)]
    assert all(p > 0 for p in pids), pids
    for n in starts:
        wire.nodes[n].spawned(world.kvsname)
    wire.worlds.spawned([world.kvsname])
    t.running = len(pids)
    return t, core, pids


@pytest.mark.parametrize("nodes", [["n2", "n3"], ["n1", "n2"]], ids=["remote", "with-agent"])
def test_70000_keys_from_a_remote_node_complete_one_fence(nodes):
    """Before: the node's one fence frame held 70,000 keys, over the wire's 65,536 entries --
    the agent dropped it and the world waited for its task's timeout. (With a rank on the
    agent's node, its whole contribution goes to the remote node in parts too.)"""
    wire = Wire(["n2", "n3"])
    try:
        t, core, pids = _world(wire, "many", [sys.executable, RAW, "manykeys", "70000"], nodes)
        codes = _reap_all(core, [wire.worlds.local, *wire.nodes.values()], pids, wire=wire)
        assert codes == {100: 0, 101: 0}, (codes, t.reason, wire.node_fails)
        assert t.reason is None and not wire.killed
        assert max(wire.sizes) <= 2 * W.PMI_PART_BYTES, max(wire.sizes)  # bounded parts
    finally:
        wire.close()


@pytest.mark.parametrize("nodes", [["n2", "n3"], ["n1", "n2"]], ids=["remote", "with-agent"])
def test_a_world_over_its_cap_fails_as_the_contribution_arrives(nodes):
    """Two nodes each put 0.6 x the cap (each node under it, the world over): the second
    contribution fails the world as it arrives, naming the cap, the size and the node;
    nothing merged was sent back, and the agent held at most the cap + one part -- its own
    ranks' puts counted with what it gathered (with-agent: whichever comes first)."""
    cap = 1 << 20
    wire = Wire(["n2", "n3"], max_kvs_bytes=cap)
    try:
        t, core, pids = _world(wire, "big", [sys.executable, RAW, "bigput", "0.6"], nodes)
        held = []
        orig = wire.worlds.on_fence

        def on_fence(*a):
            orig(*a)
            w = wire.worlds.worlds.get("pf.big")
            if w is not None:
                held.append(w.gather.held_bytes() + wire.worlds.local.pending(w.kvsname))

        wire.worlds.on_fence = on_fence
        _reap_all(core, [wire.worlds.local, *wire.nodes.values()], pids, wire=wire)
        assert t.reason is not None and f"max_kvs_bytes={cap}" in t.reason, t.reason
        assert "key-value space" in t.reason and ("node n" in t.reason or " n1:" in t.reason), (
            t.reason
        )
        assert wire.killed == ["big"]
        assert not [s for s in wire.sizes if s > 64], "nothing merged was sent back"
        assert held and max(held) <= cap + W.PMI_PART_BYTES, max(held)
    finally:
        wire.close()


def test_a_fence_frame_that_cannot_be_accepted_fails_its_world_at_once():
    wire = Wire(["n2"])
    try:
        t = _task("bad")
        world = SimpleNamespace(kvsname="pf.bad", size=2, nodes=("n1", "n2"))
        wire.worlds.prepare(t, world, [(0, 1, None), (1, 2, "n2")], 30)
        too_long = msgspec.msgpack.encode(W.PmiPart({"k": "v" * 5000}))
        wire.worlds.on_fence("n2", "pf.bad", 0, msgspec.Raw(too_long))
        assert t.reason is not None and "cannot be accepted" in t.reason, t.reason
        assert "n2" in t.reason and "1024" in t.reason, t.reason
        assert wire.killed == ["bad"]
    finally:
        wire.close()


def _no_fence(*a):
    raise AssertionError(f"no fence expected: {a}")


def _no_fail(*a):
    raise AssertionError(f"no failure expected: {a}")
