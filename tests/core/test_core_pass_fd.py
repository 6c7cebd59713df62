"""One descriptor handed to a task through the core (`spawn_batch`'s pass_fd): what an MPI
rank's PMI connection rides on (agent/pmi/). The child holds it as descriptor 3 (or the
number asked), talks over it, and holds no other descriptor above stdio; a child without the
option holds none. Both executors pass it on: the agent's TaskRunner (a ProcSpec's pmi_fd) and
a node executor (spawn's pmi_fds), each over the real core. A real MPICH world through this
path: tests/agent/test_pmi.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pilotfish._core import Executor

BASE_ENV = ["PATH=/usr/bin:/bin"]
PY = sys.executable

# prints the descriptors it holds above stdio, then answers one line over descriptor FD
CHILD = textwrap.dedent("""
    import os, sys
    fd = int(sys.argv[1])
    held = []
    for n in range(3, 1024):
        try:
            os.fstat(n)
            held.append(n)
        except OSError:
            pass
    print(" ".join(map(str, held)), flush=True)
    if fd >= 0:
        f = os.fdopen(fd, "r+b", buffering=0)
        line = f.readline()
        f.write(b"pong " + line)
""")


def collect(ex, n, timeout=60.0):
    """n exits of ex's own children (key -1: someone else's)."""
    end = time.monotonic() + timeout
    out = []
    while len(out) < n:
        assert time.monotonic() < end, f"only {len(out)} of {n} exits"
        out.extend(e for e in ex.wait(0.5) if e[0] != -1)
    return out


@pytest.fixture
def ex():
    ex = Executor(base_env=BASE_ENV)
    yield ex
    end = time.monotonic() + 30
    while ex.running and time.monotonic() < end:
        ex.wait(0.2)


def _talk(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    sock.sendall(b"ping\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(100)
        assert chunk, f"EOF after {data!r}"
        data += chunk
    return data


def test_the_child_talks_over_its_descriptor_3_and_holds_no_other(ex, tmp_path):
    ours, theirs = socket.socketpair()
    stray = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(stray, True)  # would reach a child that did not close it
    try:
        out = ex.spawn_batch([
            (1, [PY, "-c", CHILD, "3"], None, None, str(tmp_path / "with"), None, False,
             theirs.fileno()),
            (2, [PY, "-c", CHILD, "-1"], None, None, str(tmp_path / "without"), None),
            # the 8th field present and None: the same as absent
            (3, [PY, "-c", CHILD, "-1"], None, None, str(tmp_path / "none"), None, False, None),
        ])
        assert all(pid > 0 for pid, _ in out), out
        theirs.close()  # the child's copy is the only one left: EOF when it exits
        assert _talk(ours) == b"pong ping\n"
        assert ours.recv(10) == b""  # nobody else holds the other end (not the siblings)
        assert sorted((k, c) for k, _, c, *_ in collect(ex, 3)) == [(1, 0), (2, 0), (3, 0)]
    finally:
        os.close(stray)
        ours.close()
    assert (tmp_path / "with").read_text() == "3\n"
    assert (tmp_path / "without").read_text() == "\n"
    assert (tmp_path / "none").read_text() == "\n"


def test_another_number_and_a_descriptor_already_there(ex, tmp_path):
    """(fd, 5): the child's 5, nothing at 3 or 4. A descriptor whose number already is the
    target keeps it (only its close-on-exec flag is cleared)."""
    a_ours, a_theirs = socket.socketpair()
    b_ours, b_theirs = socket.socketpair()
    n = b_theirs.fileno()
    try:
        out = ex.spawn_batch([
            (1, [PY, "-c", CHILD, "5"], None, None, str(tmp_path / "five"), None, False,
             (a_theirs.fileno(), 5)),
            (2, [PY, "-c", CHILD, str(n)], None, None, str(tmp_path / "same"), None, False,
             (n, n)),
        ])
        assert all(pid > 0 for pid, _ in out), out
        a_theirs.close()
        b_theirs.close()
        assert _talk(a_ours) == b"pong ping\n"
        assert _talk(b_ours) == b"pong ping\n"
        assert sorted(e[2] for e in collect(ex, 2)) == [0, 0]
    finally:
        a_ours.close()
        b_ours.close()
    assert (tmp_path / "five").read_text() == "5\n"
    assert (tmp_path / "same").read_text() == f"{n}\n"


def test_bad_pass_fd_fails_its_spec_alone_naming_it(ex):
    r, w = os.pipe()
    os.close(w)
    closed = r
    os.close(r)  # a descriptor number that is not open here
    out = ex.spawn_batch([
        (1, ["true"], None, None, None, None, False, -1),
        (2, ["true"], None, None, None, None, False, (0, 1)),
        (3, ["true"], None, None, None, None, False, closed),
        (4, ["true"], None, None, None, None, False, None),
    ])
    (e1, m1), (e2, m2), (e3, m3), (pid, _) = out
    assert (e1, e2) == (-22, -22), out
    assert "pass_fd" in m1 and "-1" in m1, m1
    assert "pass_fd" in m2 and "target 1" in m2, m2
    assert e3 == -9 and f"pass_fd {closed} -> 3" in m3, m3  # EBADF, from the child's dup3
    assert pid > 0
    assert [e[0] for e in collect(ex, 1)] == [4]
    with pytest.raises(ValueError, match="pass_fd='3'"):
        ex.spawn_batch([(5, ["true"], None, None, None, None, False, "3")])
    with pytest.raises(ValueError, match="spec of 9 fields"):
        ex.spawn_batch([(5, ["true"], None, None, None, None, False, None, None)])


# -- the two executors pass it on ---------------------------------------------------------------

def test_task_runner_passes_a_procspecs_pmi_fd(tmp_path):
    """The agent's TaskRunner: a ProcSpec with pmi_fd (what a PMI launch method will build)
    becomes that process's descriptor 3; the task's other rank, without one, holds none."""
    from pilotfish._wire import RankSlot, TaskSpec
    from pilotfish.agent.task_runner import TaskRunner
    from pilotfish.agent.tasks import AgentTask
    from pilotfish.launch.base import LaunchMethod, ProcSpec

    ours, theirs = socket.socketpair()

    class OneFd(LaunchMethod):  # rank 0 gets the descriptor, rank 1 does not
        name = "onefd"

        def build(self, task, slots, sandbox):
            return [ProcSpec([PY, "-c", CHILD, "3"], {}, 0, pmi_fd=theirs.fileno()),
                    ProcSpec([PY, "-c", CHILD, "-1"], {}, 1)]

    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    runner = TaskRunner(Executor(base_env=BASE_ENV), str(tasks_dir),
                        spool_dir=str(tmp_path / "spool"))
    t = AgentTask(TaskSpec(uid="task.000000", executable=PY, ranks=2), 0)
    t.slots = [RankSlot("localhost", 0, (0,), ()), RankSlot("localhost", 0, (1,), ())]
    t.lm = OneFd(None)
    try:
        failed, _ = runner.launch([t])
        assert failed == [], t.reason
        theirs.close()
        assert _talk(ours) == b"pong ping\n"
        end = time.monotonic() + 60
        done = []
        while not done:
            assert time.monotonic() < end, "the task did not end"
            done, _, _ = runner.reap(0.5)
        assert t.exit_code == 0
        (out, _err), = runner.read_outputs([t])
        assert out.split("\n")[:2] == ["3", ""], out  # rank 0: 3; rank 1: nothing
    finally:
        ours.close()


def test_task_runner_refuses_a_pmi_fd_for_another_node(tmp_path):
    """A descriptor of the agent means nothing on another host: that node's executor passes
    its own. The task fails to launch, saying so."""
    from pilotfish._wire import RankSlot, TaskSpec
    from pilotfish.agent.task_runner import TaskRunner
    from pilotfish.agent.tasks import AgentTask
    from pilotfish.launch.base import LaunchMethod, ProcSpec

    class Away(LaunchMethod):
        name = "away"

        def build(self, task, slots, sandbox):
            return [ProcSpec(["true"], {}, 0, node="n2", pmi_fd=7)]

    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    runner = TaskRunner(Executor(base_env=BASE_ENV), str(tasks_dir),
                        spool_dir=str(tmp_path / "spool"))
    t = AgentTask(TaskSpec(uid="task.000001", executable="true"), 1)
    t.slots = [RankSlot("n2", 1, (0,), ())]
    t.lm = Away(None)
    failed, _ = runner.launch([t])
    assert failed == [t]
    assert "pmi_fd=7" in t.reason and "n2" in t.reason, t.reason


NODE_SCRIPT = textwrap.dedent("""
    # A node executor (agent/node_executor.py) and the agent's node link (agent/node_link.py) in one
    # process, over a real CURVE socket on loopback. The link sends the spawn; the executor
    # spawns it as it will once it serves PMI -- spawn() with pmi_fds (its own descriptors)
    # -- and its exits come back to the link with their captured stdout.
    import json, select, socket, sys, time
    import zmq
    from pilotfish.agent.clock import REAL
    from pilotfish._node_wire import read_node_config
    from pilotfish.agent.node_executor import NodeExecutor
    from pilotfish.agent.node_link import NodeLink

    class Events:
        def record(self, *a, **k):
            pass

    def pump(until):
        end = time.monotonic() + 60
        while not until():
            assert time.monotonic() < end, "timed out"
            select.select([ex.core.notify_fd], [], [], 0.1)  # (wait() would take the exits)
            ex.reap()
            link.on_readable()

    sandbox, child = sys.argv[1], sys.argv[2]
    ctx = zmq.Context()
    link = NodeLink(ctx, sandbox, REAL, Events(), "pilot.0000", [], time.time() + 600)
    secret = link.expect(["n7"])  # (its step secret: agent/node_keys.py)
    ex = NodeExecutor(read_node_config(link.config_path), secret)
    ex.hello()
    pump(lambda: link.nodes["n7"].up)
    py = sys.executable
    specs = [(11, [py, "-c", child, "3"], None, None, True, None),
             (12, [py, "-c", child, "-1"], None, None, True, None)]
    assert link.spawn("n7", specs) is None
    ours, theirs = socket.socketpair()
    ex.spawn(specs, pmi_fds={11: theirs.fileno()})  # (the Spawn frame is left unread)
    theirs.close()
    ours.settimeout(30)
    ours.sendall(b"ping\\n")
    answer = ours.makefile("rb").readline().decode()
    spawned, exits = [], []
    def both():
        s, e = link.take()
        spawned.extend(s)
        exits.extend(e)
        return len(exits) == 2
    pump(both)
    print(json.dumps({"answer": answer, "spawned": sorted(r[0] for r in spawned if r[1] > 0),
                      "exits": sorted((e[0], e[2]) for e in exits),
                      "outputs": {k: v[0] for k, v in sorted(link.outputs.items())}}))
    link.close()
    ex.sock.close(0)
    ctx.destroy(0)
""")


def test_node_executor_passes_pmi_fds_to_the_core(tmp_path):
    env = dict(os.environ, SLURMD_NODENAME="n7")
    r = subprocess.run([PY, "-c", NODE_SCRIPT, str(tmp_path), CHILD], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["answer"] == "pong ping\n"
    assert got["spawned"] == [11, 12]
    assert got["exits"] == [[11, 0], [12, 0]]
    assert got["outputs"] == {"11": "3\n", "12": "\n"}
