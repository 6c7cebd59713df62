"""Sub-agents on the project's cluster of real hosts (scripts/substrates/slurm.sh: a login host
and compute hosts n1..n4, each its own network and UTS namespace): a Slurm pilot of the four
hosts in two partitions, a sub-agent each (both on n1, the pilot's first node, under the
root), each starting the node executors of its own partition's other hosts. Tasks report the
host they really ran on. No mocks.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_subagents_slurm.py
"""

from __future__ import annotations

import collections
import os
import signal
import time

import pytest
from mpi_programs import build_hello

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from pilotfish.launch.base import by_node
from cluster import hosts, WHERE, agent_events, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

PARTS = [["n1", "n2"], ["n3", "n4"]]


def sub_events(pilot, i, name):
    return [
        e
        for e in read_all_events(os.path.join(pilot.sandbox, "sub", f"p{i}", "agent.events"))
        if e[2] == name
    ]


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> str:
    return build_hello(tmp_path_factory)


def test_two_sub_agents_each_run_their_partitions_hosts(slurm, tmp_path, hello):
    """800 single-node tasks: each ran on the host it was placed on, in the partition it was
    routed to; each sub-agent started node executors on its own partition's other hosts only
    (p0: n2, its own host n1 spawned by its core; p1: n3 and n4). MPI worlds of a host per
    rank form across the two hosts of each partition through the pilot's own PMI (p1's
    sub-agent runs on n1, outside its partition: its executors serve every rank)."""
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, active_timeout=400, partitions=2, subagents=True)
        assert [n.name for n in pilot.nodes] == PARTS[0] + PARTS[1]
        ups = agent_events(pilot, E.SUBAGENT_UP)
        assert sorted(e[3].split()[0] for e in ups) == ["p0", "p1"]
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/sh", arguments=["-c", WHERE]) for _ in range(800)]
        )
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=400)
        assert collections.Counter(states) == {pf.DONE: 800}, [t.reason for t in tasks if t.reason][
            :3
        ]
        by_host = collections.Counter()
        for t in tasks:
            host, node = t.stdout.split()
            assert host == node == t.slots[0].node, (t.uid, t.stdout, t.slots)
            assert node in PARTS[t.partition], (t.uid, t.partition, node)
            by_host[host] += 1
        assert set(by_host) == {"n1", "n2", "n3", "n4"}, by_host
        worlds = tmgr.submit_tasks(
            [
                pf.TaskDescription(executable=hello, ranks=2, cores_per_rank=slurm.cpus)
                for _ in range(6)
            ]
        )
        tmgr.wait_tasks([t.uid for t in worlds], timeout=300)
        for t in worlds:
            assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
            placed = [x.node for x in by_node(t.slots)]
            assert sorted(placed) == PARTS[t.partition], (t.partition, placed)
            lines = sorted(t.stdout.splitlines(), key=lambda ln: int(ln.split()[1]))
            assert [ln.split() for ln in lines] == [
                ["rank", str(r), "size", "2", "host", placed[r], "sum", "1"] for r in (0, 1)
            ], t.stdout
        assert {t.partition for t in worlds} == {0, 1}
        pilot.cancel()
        assert pilot.wait(timeout=120) == pf.CANCELED
    up = {i: {e[3].split()[0] for e in sub_events(pilot, i, E.NODE_UP)} for i in (0, 1)}
    assert up == {0: {"n2"}, 1: {"n3", "n4"}}, up
    assert not os.path.exists(os.path.join(pilot.sandbox, "nodes"))  # the root starts none


def test_a_killed_sub_agent_costs_its_partition_alone(slurm, tmp_path):
    """SIGKILL to sub-agent p1 while every core of the pilot runs a task: p1's tasks without
    retries FAIL naming it, those with a retry run again on p0 (n1, n2) and end DONE; p0's
    tasks end DONE; the pilot stays ACTIVE; new tasks run on n1 and n2; nothing p1 started
    runs on (its node executors' step on n3, n4 went with it)."""
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, active_timeout=400, partitions=2, subagents=True)
        n = 4 * slurm.cpus  # one per core: every host busy
        tasks = tmgr.submit_tasks(
            [
                pf.TaskDescription(
                    executable="/bin/sh", arguments=["-c", f"sleep 6; {WHERE}"], retries=i % 2
                )
                for i in range(n)
            ]
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(t.state != pf.EXECUTING for t in tasks):
            time.sleep(0.2)
        assert all(t.state == pf.EXECUTING for t in tasks)
        on_p1 = {t.uid for t in tasks if t.partition == 1}
        assert len(on_p1) == n // 2
        pid = next(
            int(e[3].split()[1])
            for e in agent_events(pilot, E.SUBAGENT_UP)
            if e[3].startswith("p1 ")
        )
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
        print(f"all ended {time.monotonic() - t_kill:.0f}s after the kill")
        assert pilot.state == pf.ACTIVE
        by = dict(zip([t.uid for t in tasks], states))
        for t in tasks:
            if t.uid not in on_p1:
                assert by[t.uid] == pf.DONE, (t.uid, t.reason)
                assert t.stdout.split()[0] in PARTS[0]
            elif t.description.retries:
                assert by[t.uid] == pf.DONE, (t.uid, t.reason)  # ran again on p0
                assert t.partition == 0 and t.stdout.split()[0] in PARTS[0], t.stdout
            else:
                assert by[t.uid] == pf.FAILED, (t.uid, by[t.uid], t.reason)
                assert "sub-agent p1 (n3, n4) died (killed by SIGKILL)" in t.reason, t.reason
        lost = agent_events(pilot, E.SUBAGENT_LOST)
        assert [e[3].split()[0] for e in lost] == ["p1"], lost
        later = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/sh", arguments=["-c", WHERE]) for _ in range(200)]
        )
        assert collections.Counter(tmgr.wait_tasks([t.uid for t in later], timeout=120)) == {
            pf.DONE: 200
        }
        assert {t.stdout.split()[0] for t in later} == set(PARTS[0])
        from pilotfish.agent.containment import marked  # noqa: PLC0415 -- a look at /proc

        assert not marked(os.path.join(pilot.sandbox, "sub", "p1"))  # (every host's pids)
        pilot.cancel()
        assert pilot.wait(timeout=120) == pf.CANCELED
