"""MPI without a launcher on the cluster of real hosts (issue 39): the ranks of a multi-rank
task of the MPICH ABI are spawned by the node executors (and the agent on its own host, n1),
each rank's PMI connection served by its node's executor, fences gathered by the agent once per
node -- no srun, mpiexec or prterun per task. The tests name no launcher: the pilot routes the
programs itself (launch/mpi_abi.py).

- one world on 2 and on 4 hosts, in C and with mpi4py: every rank prints its rank, the size and
  MPI_Get_processor_name, which is the host the placer chose for that rank (ranks are numbered
  by node in the order of first appearance), and an allreduce (and a bcast) is right;
- each fault of the issue's item 4 in its own test, each failing the task alone, naming the rank
  and its node, with no rank process left on any host: a rank exits non-zero; MPI_Abort; a rank
  that does not reach PMI init in time; a node lost mid-task; cancel; timeout; a malformed PMI
  line (the executor and the other tasks go on); a program that never speaks PMI routed here
  by `launcher="pmi"` (never N singletons ending DONE).

The C program: tests/agent/pmi_progs/mpi_hello.c (the mpich wheel's mpicc); the file system is
shared by the hosts (they are namespaces of this machine), so one build serves them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mpi_programs import build_hello

import pilotfish as pf
from pilotfish.launch.base import by_node
from cluster import hosts, netns, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

PROGS = Path(__file__).resolve().parents[1] / "agent" / "pmi_progs"
CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)
LOST_S = 2  # a node unheard for 2 s is lost (fence after 6 s, verdict 10 s after the loss)


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> str:
    return build_hello(tmp_path_factory)


@pytest.fixture(scope="module")
def pilot(slurm, tmp_path_factory):
    """One pilot on the four hosts for the module's tests (each task its own world)."""
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        yield slurm_pilot(s, launcher_options={"nodes": {"lost_after_s": LOST_S},
                                               "pmi": {"init_timeout": 5}})


def _run(tmgr, td, timeout=120):
    (t,) = tmgr.submit_tasks([td])
    tmgr.wait_tasks([t.uid], timeout=timeout)
    return t


def _processes_of(uid: str) -> list[int]:
    """Processes anywhere on this machine (every host's) whose environment marks them as
    the task's."""
    mark = f"PILOTFISH_TASK_UID={uid}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in env:
            found.append(int(d))
    return found


def _none_left(uid: str, within: float = 15.0) -> None:
    end = time.monotonic() + within
    while _processes_of(uid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _processes_of(uid), f"ranks of {uid} still run: {_processes_of(uid)}"


def _check_world(t, n: int, mpi4py: bool = False) -> None:
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
    placed = [s.node for s in by_node(t.slots)]  # rank r's host, as the placer chose it
    assert len(set(placed)) == n, placed  # (a host per rank: one core short of two)
    lines = sorted(t.stdout.splitlines(), key=lambda ln: int(ln.split()[1]))
    assert len(lines) == n, t.stdout
    for r, line in enumerate(lines):
        words = line.split()
        want = ["rank", str(r), "size", str(n), "host", placed[r], "sum", str(n * (n - 1) // 2)]
        assert words == want + (["bcast", "ok"] if mpi4py else []), (line, placed)


@pytest.mark.parametrize("n", [2, 4])
def test_a_c_world_forms_across_hosts(pilot, hello, n):
    _, tmgr = pilot
    _check_world(_run(tmgr, pf.TaskDescription(executable=hello, ranks=n,
                                               cores_per_rank=CORES)), n)


@pytest.mark.parametrize("n", [2, 4])
def test_an_mpi4py_world_forms_across_hosts(pilot, n):
    _, tmgr = pilot
    t = _run(tmgr, pf.TaskDescription(executable=sys.executable,
                                      arguments=[str(PROGS / "mpi4py_hello.py")], ranks=n,
                                      cores_per_rank=CORES))
    _check_world(t, n, mpi4py=True)


def test_many_small_worlds_wherever_the_placer_puts_them(pilot, hello):
    """60 tasks of 2 ranks x 1 core at once: each its own world (some on one host, some
    across two), all right."""
    _, tmgr = pilot
    ts = tmgr.submit_tasks([pf.TaskDescription(executable=hello, ranks=2)
                            for _ in range(60)])
    tmgr.wait_tasks([t.uid for t in ts], timeout=180)
    for t in ts:
        _check_world_small(t)


def _check_world_small(t) -> None:
    assert t.state == pf.DONE, (t.state, t.reason)
    placed = [s.node for s in by_node(t.slots)]
    lines = sorted(t.stdout.splitlines(), key=lambda ln: int(ln.split()[1]))
    assert [ln.split() for ln in lines] == [
        ["rank", str(r), "size", "2", "host", placed[r], "sum", "1"] for r in range(2)]


def test_a_rank_that_exits_non_zero_fails_the_task_naming_it(pilot, hello):
    _, tmgr = pilot
    t = _run(tmgr, pf.TaskDescription(executable=hello, arguments=["exit", "1", "7"],
                                      ranks=2, cores_per_rank=CORES, retries=1))
    node = by_node(t.slots)[1].node
    assert t.state == pf.FAILED and t.exit_code == 7, (t.state, t.exit_code, t.reason)
    assert t.reason.startswith(f"rank 1 on {node} exited with code 7"), t.reason
    _none_left(t.uid)


def test_mpi_abort_fails_the_task_with_its_message(pilot, hello):
    _, tmgr = pilot
    t = _run(tmgr, pf.TaskDescription(executable=hello, arguments=["abort", "1"], ranks=2,
                                      cores_per_rank=CORES))
    node = by_node(t.slots)[1].node
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert t.reason.startswith(f"rank 1 on {node} called MPI_Abort (exit code 5)"), t.reason
    _none_left(t.uid)


def test_a_rank_that_never_reaches_pmi_init_fails_the_task(pilot, hello):
    _, tmgr = pilot
    t0 = time.monotonic()
    t = _run(tmgr, pf.TaskDescription(executable=hello, arguments=["presleep", "60"], ranks=2,
                                      cores_per_rank=CORES))
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert "did not reach PMI init (MPI_Init) within 5 s" in t.reason, t.reason
    assert any(f"rank {r} on {s.node}" in t.reason for r, s in enumerate(by_node(t.slots)))
    assert time.monotonic() - t0 < 30
    _none_left(t.uid)


def test_cancel_kills_every_rank_on_every_host(pilot, hello):
    _, tmgr = pilot
    (t,) = tmgr.submit_tasks([pf.TaskDescription(executable=hello, arguments=["sleep", "120"],
                                                 ranks=4, cores_per_rank=CORES)])
    assert t.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
    end = time.monotonic() + 30
    while len(_processes_of(t.uid)) < 4 and time.monotonic() < end:
        time.sleep(0.1)
    assert len(_processes_of(t.uid)) >= 4
    tmgr.cancel_tasks([t.uid])
    assert t.wait(pf.CANCELED, timeout=60) == pf.CANCELED, (t.state, t.reason)
    _none_left(t.uid)


def test_a_timeout_kills_every_rank_on_every_host(pilot, hello):
    _, tmgr = pilot
    t = _run(tmgr, pf.TaskDescription(executable=hello, arguments=["sleep", "120"], ranks=4,
                                      cores_per_rank=CORES, timeout=3))
    assert t.state == pf.FAILED and "timed out" in t.reason, (t.state, t.reason)
    _none_left(t.uid)


def test_a_malformed_pmi_line_fails_that_task_only(pilot, hello):
    _, tmgr = pilot
    bad, good = tmgr.submit_tasks([
        pf.TaskDescription(executable=sys.executable, launcher="pmi", ranks=2,
                           cores_per_rank=CORES, arguments=[str(PROGS / "raw_pmi.py"),
                                                            "malformed"]),
        pf.TaskDescription(executable=hello, ranks=2, cores_per_rank=CORES)])
    tmgr.wait_tasks([bad.uid, good.uid], timeout=120)
    assert bad.state == pf.FAILED, (bad.state, bad.reason)
    assert "PMI error" in bad.reason and "neither a PMI-1 line" in bad.reason, bad.reason
    _check_world(good, 2)
    _check_world(_run(tmgr, pf.TaskDescription(executable=hello, ranks=4,
                                               cores_per_rank=CORES)), 4)


def test_a_program_that_never_speaks_pmi_never_ends_done(pilot):
    _, tmgr = pilot
    t = _run(tmgr, pf.TaskDescription(executable="/bin/true", launcher="pmi", ranks=2,
                                      cores_per_rank=CORES))
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert "ended without speaking PMI" in t.reason, t.reason


def test_a_node_lost_mid_task_fails_it_naming_the_node(pilot, hello):
    """n3's link goes down while a 4-host world runs: the node is lost after LOST_S, the other
    ranks are killed at once, and the task FAILS naming n3 once n3's rank is accounted for
    (its executor's fence kills it; the link comes back and its exit arrives)."""
    _, tmgr = pilot
    (t,) = tmgr.submit_tasks([pf.TaskDescription(executable=hello, arguments=["sleep", "120"],
                                                 ranks=4, cores_per_rank=CORES)])
    assert t.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
    assert "n3" in {s.node for s in t.slots}
    end = time.monotonic() + 30
    while len(_processes_of(t.uid)) < 4 and time.monotonic() < end:
        time.sleep(0.1)
    link = ["ip", "netns", "exec", netns("n3"), "ip", "link", "set", "eth0"]
    subprocess.run(link + ["down"], check=True, timeout=30)
    try:
        time.sleep(LOST_S * 4)  # lost at 2 s; its executor fences at 6 s
    finally:
        subprocess.run(link + ["up"], check=True, timeout=30)
    tmgr.wait_tasks([t.uid], timeout=120)
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert t.reason.startswith("node n3 lost mid-task"), t.reason
    _none_left(t.uid)
    # the node rejoined: worlds form across all four hosts again
    _check_world(_run(tmgr, pf.TaskDescription(executable=hello, ranks=4,
                                               cores_per_rank=CORES)), 4)
