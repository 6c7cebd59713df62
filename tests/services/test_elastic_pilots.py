"""Elastic pilots: grow and shrink at run time, on a local pilot and on the project's Slurm
(an extra batch job whose node joins the pilot's agent, launched into with srun)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import pilotfish as pf

from substrate_helpers import start_pilot  # tests/substrates (on the path: conftest)

pytestmark = pytest.mark.timeout(300)

ECHO = str(Path(__file__).with_name("echo_service.py"))


@pytest.mark.slow
def test_local_pilot_grows_runs_there_and_shrinks_back(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = start_pilot(s, nodes=1, cores_per_node=2, runtime="10m")
        own = pilot.nodes[0].name
        # the pilot is full: the second task waits ...
        busy = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"],
                                                    cores_per_rank=2, restartable=True))
        busy.wait(pf.EXECUTING, timeout=30)
        waiting = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo",
                                                       arguments=["hi"], cores_per_rank=2))
        time.sleep(0.5)
        assert waiting.state != pf.DONE
        # ... until a node joins: it runs there at once
        names = pilot.grow(nodes=1)
        assert len(pilot.nodes) == 2 and names == [pilot.nodes[1].name]
        assert waiting.wait(timeout=30) == pf.DONE
        assert waiting.slots[0].node == names[0]
        # a restartable task on the grown node is queued again when it is drained; one that
        # is not restartable is waited for
        late = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["1"],
                                                    cores_per_rank=1, pilot=pilot.uid))
        mover = tmgr.submit_tasks(pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", "echo $PILOTFISH_NODE; sleep 5"],
            cores_per_rank=1, restartable=True))
        mover.wait(pf.EXECUTING, timeout=30)
        late.wait(pf.EXECUTING, timeout=30)
        assert {mover.slots[0].node, late.slots[0].node} == {names[0]}
        busy.cancel()
        t0 = time.monotonic()
        assert pilot.shrink(nodes=1) == names
        assert late.state == pf.DONE  # finished before its node went
        assert len(pilot.nodes) == 1 and pilot.nodes[0].name == own
        assert mover.wait(timeout=30) == pf.DONE, mover.reason
        assert mover.slots[0].node == own and mover.stdout.strip() == own
        assert any(h == "retry" for h, _ in mover.history) or mover.stdout.strip() == own
        assert time.monotonic() - t0 < 20
        # bad input: nothing is shrunk, nothing lost
        with pytest.raises(pf.DescriptionError) as e:
            pilot.shrink(nodes=1)
        assert e.value.field == "nodes" and "no grown nodes" in str(e.value)
        with pytest.raises(pf.DescriptionError) as e:
            pilot.shrink(nodes=[own])
        assert "own nodes" in str(e.value)
        with pytest.raises(pf.DescriptionError) as e:
            pilot.shrink(nodes=["nowhere"])
        assert "no such node" in str(e.value)
        for bad in (0, -2, "1"):
            with pytest.raises(pf.DescriptionError):
                pilot.grow(nodes=bad)
        ok = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        assert ok.wait(timeout=30) == pf.DONE


@pytest.mark.slow
def test_service_group_resized_onto_grown_nodes_and_drained_off_them(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=2, runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        group = tmgr.submit_service_group(pf.ServiceDescription(
            name="echo", executable=sys.executable, arguments=[ECHO]), replicas=2)
        group.wait_ready(timeout=60)
        with pytest.raises(pf.DescriptionError):
            group.resize(4)  # 2 cores: no grow allowed
        group.resize(4, grow=True)
        group.wait_ready(timeout=60)
        grown = pilot.nodes[1].name
        assert sorted(m.node for m in group.members).count(grown) == 2
        # shrinking the pilot: members on the grown node leave; the group is short of room
        group.resize(2)
        group.wait(lambda v: len(v.members) == 2, timeout=60)
        pilot.shrink(nodes=1)
        assert len(pilot.nodes) == 1
        view = group.wait(lambda v: len(v.members) == 2 and all(m.node == pilot.nodes[0].name
                                                                 for m in v.members), timeout=60)
        assert view.epoch == group.epoch
    # the report's elasticity series: the pilot went 1 -> 2 -> 1 nodes, the group 2 -> 4 -> 2
    from pilotfish.analytics import load_session
    from pilotfish.analytics.elastic import elastic_series

    nodes, members = elastic_series(load_session(str(tmp_path / "s")))
    assert [n for _, n in nodes[pilot.uid]] == [1, 2, 1]
    counts = [n for _, n in members["echo"]]
    assert counts[:4] == [1, 2, 3, 4] and 2 in counts[4:] and max(counts) == 4
    times = [t for t, _ in members["echo"]]
    assert times == sorted(times)


@pytest.mark.slurm
def test_slurm_pilot_grows_by_a_node_runs_there_and_shrinks_back(slurm, tmp_path):
    from substrate_helpers import slurm_job_state

    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = start_pilot(s, timeout=120, resource="slurm", nodes=1, runtime="10m")
        t0 = time.monotonic()
        names = pilot.grow(nodes=1, timeout=120)
        job = pilot._grown.job_of("grow0").native_id
        assert len(names) == 1 and names[0] != pilot.nodes[0].name
        # the pilot's own node is taken first (equal load: the lower partition) ...
        hold = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"],
                                                    cores_per_rank=slurm.cpus))
        # ... so this one runs on the grown node, as a step of the grown unit's own job
        t = tmgr.submit_tasks(pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", 'echo "$SLURM_JOB_ID $SLURMD_NODENAME"'],
            cores_per_rank=slurm.cpus))
        assert t.wait(timeout=120) == pf.DONE, (t.reason, t.stderr)
        first = time.monotonic() - t0
        assert t.slots[0].node == names[0]
        assert t.stdout.split() == [job, names[0]]
        assert hold.state == pf.EXECUTING and hold.slots[0].node == pilot.nodes[0].name
        if os.environ.get("PILOTFISH_CLUSTER") == "hosts":  # another host: its executor ran it
            from pilotfish import _events as E
            from pilotfish._events import read_all_events

            deadline = time.monotonic() + 15
            while True:  # (the agent writes its events in batches)
                ups = [e for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
                       if e[2] == E.NODE_UP]
                if ups or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert [e[3].split()[0] for e in ups] == names, ups
        hold.cancel()
        assert pilot.shrink(nodes=1, timeout=120) == names
        assert [n.name for n in pilot.nodes] != names and len(pilot.nodes) == 1
        deadline = time.monotonic() + 60
        while slurm_job_state(job, slurm.env) not in ("CANCELLED", "COMPLETED", "UNKNOWN") \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm_job_state(job, slurm.env) in ("CANCELLED", "COMPLETED", "UNKNOWN")
        print(f"grow to first task on the new node: {first:.1f}s")


def node_of(i):
    return i, os.environ.get("PILOTFISH_NODE")


@pytest.mark.slurm
def test_function_workers_reach_a_grown_slurm_pilot_over_tcp(slurm, tmp_path, monkeypatch):
    """A batch pilot may grow onto other hosts, so its function pool listens on TCP as well as
    ipc, and a worker on another host than the agent connects over TCP (forced here: every
    node is this host, PILOTFISH_FN_INLINE=1 takes the other-host path): calls run by workers
    on the grown node come back right, and the agent's log shows the workers came over TCP."""
    monkeypatch.setenv("PILOTFISH_FN_INLINE", "1")
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = start_pilot(s, timeout=120, resource="slurm", nodes=1, runtime="10m")
        names = pilot.grow(nodes=1, timeout=120)
        hold = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"],
                                                    cores_per_rank=slurm.cpus))
        assert hold.wait(pf.EXECUTING, timeout=60) == pf.EXECUTING
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=node_of, args=(i,))
                                   for i in range(200)])
        assert tmgr.wait_tasks([t.uid for t in tasks], timeout=120) == [pf.DONE] * 200, \
            [t.reason for t in tasks if t.state != pf.DONE][:3]
        assert [t.result for t in tasks] == [(i, names[0]) for i in range(200)]
        hold.cancel()
        with open(os.path.join(pilot.sandbox, "agent.log")) as f:
            ready = [line for line in f if "function worker" in line and " ready " in line]
        assert ready and all("via tcp://" in line for line in ready), ready


def nap(i):
    import time

    time.sleep(0.05)
    return i


@pytest.mark.slow
def test_function_workers_on_a_drained_node_finish_their_calls(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = start_pilot(s, nodes=1, cores_per_node=1, runtime="10m")
        pilot.grow(nodes=1)
        tasks = tmgr.submit_tasks([pf.TaskDescription(function=nap, args=(i,))
                                   for i in range(60)])
        time.sleep(0.5)
        pilot.shrink(nodes=1, timeout=60)
        tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
        assert [t.state for t in tasks] == [pf.DONE] * 60, [t.reason for t in tasks
                                                            if t.state != pf.DONE][:3]
        assert [t.result for t in tasks] == list(range(60))
