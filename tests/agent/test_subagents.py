"""Sub-agents (agent/root.py, root_subs.py, routing.py, subagent.py): a pilot's partitions each
served by an agent process of its own under a root that routes whole submit batches. Real
local pilots (root, sub-agents and tasks are real processes over real ZeroMQ); the routing
rules on their own. The Slurm cluster's end-to-end test: tests/batch/test_subagents_slurm.py."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import zmq

import pilotfish as pf
from pilotfish import _events as E
from pilotfish import _wire
from pilotfish._events import read_all_events
from pilotfish._wire import NodeInfo, TaskSpec
from pilotfish.agent.routing import Routing, Share
from pilotfish.agent.subagent import AUTO_NODES, subagents_on

pytestmark = pytest.mark.timeout(120)


# -- the routing rules --------------------------------------------------------------------------


def shares(*sizes, cores=4):
    out, k = [], 0
    for i, n in enumerate(sizes):
        out.append(Share(i, [NodeInfo(f"n{k + j}", cores, 0, 0) for j in range(n)]))
        k += n
    return out


def specs(n, prefix="t", **kw):
    return [TaskSpec(f"{prefix}{i}", "/bin/true", **kw) for i in range(n)]


def test_a_batch_that_fits_goes_whole_to_the_freest_sub_agent():
    r = Routing(shares(2, 2))
    out, refused, whole = r.route(specs(3))
    assert whole and not refused and [(s.index, len(ts)) for s, ts in out] == [(0, 3)]
    out, refused, whole = r.route(specs(3, "u"))  # p0 holds 3 of 8 cores: p1 is freer
    assert whole and [(s.index, len(ts)) for s, ts in out] == [(1, 3)]
    for uid in ("t0", "t1", "t2"):
        r.seen(uid, pf.DONE)
    assert [s.load for s in r.shares] == [0, 3]


def test_a_batch_larger_than_free_cores_is_cut_to_even_load_per_core():
    r = Routing(shares(3, 1))  # 12 and 4 cores
    out, _, whole = r.route(specs(32))
    assert not whole
    assert sorted((s.index, len(ts)) for s, ts in out) == [(0, 24), (1, 8)]
    got = [t.uid for _, ts in sorted(out, key=lambda x: x[0].index) for t in ts]
    assert sorted(got) == sorted(f"t{i}" for i in range(32))  # each task once, slices whole


def test_a_task_goes_only_where_it_fits_and_one_that_fits_nowhere_is_refused():
    r = Routing(shares(3, 1))
    out, refused, _ = r.route(
        specs(2, "big", ranks=2, cores_per_rank=4) + specs(1, "huge", ranks=5, cores_per_rank=4)
    )
    assert [(s.index, [t.uid for t in ts]) for s, ts in out] == [(0, ["big0", "big1"])]
    assert [u for u, _ in refused] == ["huge0"]
    assert "no partition of the pilot holds it" in refused[0][1]


def test_a_lost_sub_agent_gets_nothing_more_and_hands_back_what_it_held():
    r = Routing(shares(1, 1))
    r.route(specs(1, "a"))  # p0
    r.route(specs(1, "b"))  # p1
    r.seen("b0", pf.EXECUTING)
    lost = r.lost(r.shares[1], "killed by SIGKILL")
    assert [(t.uid, started) for t, started in lost] == [("b0", True)]
    out, _, _ = r.route(specs(6, "c"))
    assert {s.index for s, _ in out} == {0}
    _, refused, _ = r.route(specs(1, "d", cores_per_rank=4, ranks=1))
    assert not refused  # p0 still holds it
    r2 = Routing(shares(2, 1))
    r2.lost(r2.shares[0], "killed by SIGKILL")
    _, refused, _ = r2.route(specs(1, "e", ranks=2, cores_per_rank=4))
    assert "lost their sub-agent" in refused[0][1] and "p0" in refused[0][1]


def test_a_sub_agent_gets_a_callable_it_never_saw_with_its_call():
    r = Routing(shares(1, 1))
    first = TaskSpec("f0", "", function=b"BODY", fn_ref=b"REF", call=b"A")
    out, _, _ = r.route([first])
    ((s0, _),) = out
    later = [TaskSpec(f"f{i}", "", fn_ref=b"REF", call=b"A") for i in range(1, 4)]
    out, _, whole = r.route(later)  # goes to the other (freer) sub-agent: it needs the body
    ((s1, ts),) = out
    assert s1 is not s0 and not whole
    assert ts[0].function == b"BODY" and all(t.function is None for t in ts[1:])


def test_a_duplicate_uid_goes_to_the_sub_agent_that_holds_it():
    r = Routing(shares(1, 1))
    r.route(specs(1))
    out, _, _ = r.route(specs(1))
    assert [(s.index, len(ts)) for s, ts in out] == [(0, 1)] and r.shares[0].tasks == 1


def test_when_a_pilot_has_sub_agents(monkeypatch):
    monkeypatch.delenv("PILOTFISH_SUBAGENTS", raising=False)
    d = dict(resource="slurm", nodes=AUTO_NODES, partitions=2)
    assert subagents_on(d)
    assert not subagents_on(dict(d, nodes=AUTO_NODES - 1))
    assert subagents_on(dict(d, nodes=4, subagents=True))
    assert not subagents_on(dict(d, subagents=False))
    assert not subagents_on(dict(d, partitions=1, subagents=True))
    assert not subagents_on(dict(d, resource="simulated", subagents=True))
    monkeypatch.setenv("PILOTFISH_SUBAGENTS", "0")
    assert not subagents_on(dict(d, subagents=True))


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(subagents=True), "give the pilot several"),
        (dict(subagents=True, partitions=[{"nodes": 4}]), "give the pilot several"),
        (dict(subagents=True, partitions=2, resource="simulated"), "cpu.subagents"),
        (dict(subagents="yes", partitions=2), "must be True or False"),
    ],
)
def test_bad_subagents_are_rejected_naming_the_field(kw, why):
    with pytest.raises(pf.DescriptionError) as e:
        pf.PilotDescription(nodes=4, cores_per_node=2, **kw)
    assert e.value.field == "subagents" and why in str(e.value)


# -- real pilots --------------------------------------------------------------------------------


def start(session, **kw):
    desc = dict(
        resource="local", nodes=4, cores_per_node=2, runtime="10m", partitions=2, subagents=True
    )
    desc.update(kw)
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(**desc))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def root_events(pilot, name):
    return [e for e in read_all_events(os.path.join(pilot.sandbox, "agent.events")) if e[2] == name]


def sub_pids(pilot):
    return {
        int(e[3].split()[0][1:]): int(e[3].split()[1]) for e in root_events(pilot, E.SUBAGENT_UP)
    }


def wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_two_sub_agents_run_a_pilots_tasks_each_on_its_own_nodes(session):
    pilot, tmgr = start(session)
    # (the root's events reach agent.events in batches: ACTIVE can be seen before they are)
    wait_for(lambda: sorted(sub_pids(pilot)) == [0, 1])
    assert sorted(sub_pids(pilot)) == [0, 1]
    names = [n.name for n in pilot.nodes]
    assert len(names) == 4
    tasks = tmgr.submit_tasks(
        [
            pf.TaskDescription(executable="/bin/sh", arguments=["-c", "echo $PILOTFISH_NODE"])
            for _ in range(60)
        ]
    )
    tmgr.wait_tasks(timeout=60)
    assert collections.Counter(t.state for t in tasks) == {pf.DONE: 60}, [
        t.reason for t in tasks if t.reason
    ][:3]
    for t in tasks:  # each ran on a node of the partition it was placed in
        assert t.stdout.strip() == t.slots[0].node in names[2 * t.partition : 2 * t.partition + 2]
    assert {t.partition for t in tasks} == {0, 1}
    # a task's directory is where the client says it is, whichever sub-agent ran it
    files = tmgr.submit_tasks(
        [
            pf.TaskDescription(
                executable="/bin/sh", pre_exec=["true"], arguments=["-c", "echo hi > made.txt"]
            )
            for _ in range(8)
        ]
    )
    assert set(tmgr.wait_tasks([t.uid for t in files], timeout=60)) == {pf.DONE}
    assert {t.partition for t in files} == {0, 1}
    for t in files:
        assert t.sandbox == os.path.join(pilot.sandbox, "tasks", t.uid)
        assert open(os.path.join(t.sandbox, "made.txt")).read() == "hi\n"
    # explain and cancel reach the sub-agent that holds the task
    slow = tmgr.submit_tasks(
        [pf.TaskDescription(executable="/bin/sleep", arguments=["30"]) for _ in range(6)]
    )
    assert wait_for(lambda: all(t.state == pf.EXECUTING for t in slow))
    told = slow[5].explain()
    assert told["where"] == "running" and told["partition_index"] == slow[5].partition, told
    tmgr.cancel_tasks([t.uid for t in slow])
    assert set(tmgr.wait_tasks([t.uid for t in slow], timeout=30)) == {pf.CANCELED}
    pilot.cancel()
    assert pilot.wait(timeout=60) == pf.CANCELED
    for i in (0, 1):  # each sub-agent's own files, private; its events, its tasks'
        d = os.path.join(pilot.sandbox, "sub", f"p{i}")
        assert os.stat(d).st_mode & 0o777 == 0o700
        assert os.stat(os.path.join(d, "agent.json")).st_mode & 0o777 == 0o600
        ran = {e[1] for e in read_all_events(os.path.join(d, "agent.events")) if e[2] == pf.DONE}
        assert ran == {t.uid for t in tasks + files if t.partition == i}


def test_pilotfish_explain_reaches_the_sub_agent_that_holds_the_task(session):
    """`pilotfish explain` from another process (a request file in the pilot's sandbox): the
    root asks the sub-agent holding each task and writes their answers."""
    pilot, tmgr = start(session)
    slow = tmgr.submit_tasks(
        [pf.TaskDescription(executable="/bin/sleep", arguments=["30"]) for _ in range(8)]
    )
    assert wait_for(lambda: all(t.state == pf.EXECUTING for t in slow))
    waiting = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", cores_per_rank=2))
    assert wait_for(lambda: waiting.state == pf.AGENT_SCHEDULING)
    on_p1 = next(t for t in slow if t.partition == 1)
    for _ in range(10):  # (until the session's events name the tasks)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pilotfish.cli",
                "explain",
                str(session.path),
                on_p1.uid,
                waiting.uid,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if "no such task" not in r.stderr:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got[0]["where"] == "running" and got[0]["partition_index"] == 1, got[0]
    assert got[1]["where"] == "queued", got[1]
    tmgr.cancel_tasks([t.uid for t in slow])
    pilot.cancel()
    assert pilot.wait(timeout=60) == pf.CANCELED


def test_a_pilot_of_partitions_has_no_sub_agents_unless_asked(session):
    pilot, tmgr = start(session, subagents=None)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    assert t.wait(timeout=30) == pf.DONE
    assert not os.path.exists(os.path.join(pilot.sandbox, "sub"))
    assert not root_events(pilot, E.SUBAGENT_UP)


def test_a_task_goes_to_the_partition_that_holds_it(session):
    pilot, tmgr = start(session, partitions=[{"nodes": 3}, {"nodes": 1}])
    tasks = tmgr.submit_tasks(
        [pf.TaskDescription(executable="/bin/true", ranks=2, cores_per_rank=2) for _ in range(4)]
    )
    assert set(tmgr.wait_tasks(timeout=60)) == {pf.DONE}, [t.reason for t in tasks]
    assert {t.partition for t in tasks} == {0}


def _square_where(x):
    return x * x, os.environ.get("PILOTFISH_SANDBOX")


def test_function_calls_run_on_every_sub_agent(session):
    """Calls of one callable spread over both sub-agents: the callable travels with the
    first call, and the root gives it to the other sub-agent with its first call there."""
    pilot, tmgr = start(session)
    calls = tmgr.submit_tasks(
        [pf.TaskDescription(function=_square_where, args=(i,)) for i in range(24)]
    )
    tmgr.wait_tasks(timeout=90)
    assert [c.state for c in calls] == [pf.DONE] * 24, [c.reason for c in calls if c.reason][:3]
    assert [c.result[0] for c in calls] == [i * i for i in range(24)]
    subs = {os.path.join(pilot.sandbox, "sub", f"p{i}") for i in (0, 1)}
    assert {c.result[1] for c in calls} == subs


def test_a_killed_sub_agent_costs_its_partition_alone(session):
    """SIGKILL to sub-agent p1 while every core runs a task: its tasks without retries FAIL
    naming it, those with a retry run again on p0 and end DONE, p0's tasks end DONE, the
    pilot stays ACTIVE and new tasks run on p0; nothing p1 started is left running."""
    pilot, tmgr = start(session)
    tasks = tmgr.submit_tasks(
        [
            pf.TaskDescription(executable="/bin/sleep", arguments=["3"], retries=i % 2)
            for i in range(8)
        ]
    )
    assert wait_for(lambda: all(t.state == pf.EXECUTING for t in tasks))
    on_p1 = [t for t in tasks if t.partition == 1]
    assert len(on_p1) == 4
    os.kill(sub_pids(pilot)[1], signal.SIGKILL)
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    for t in tasks:
        if t.partition == 0 and t not in on_p1:
            assert t.state == pf.DONE, (t.uid, t.reason)
    for t in on_p1:
        if t.description.retries:
            assert t.state == pf.DONE and t.partition == 0, (t.uid, t.state, t.reason)
        else:
            assert t.state == pf.FAILED, (t.uid, t.state)
            assert "sub-agent p1 (node0002, node0003) died (killed by SIGKILL)" in t.reason
    assert pilot.state == pf.ACTIVE
    lost = root_events(pilot, E.SUBAGENT_LOST)
    assert [e[3].split()[0] for e in lost] == ["p1"]
    more = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(10)])
    assert set(tmgr.wait_tasks([t.uid for t in more], timeout=60)) == {pf.DONE}
    assert {t.partition for t in more} == {0}
    from pilotfish.agent.containment import marked  # noqa: PLC0415 -- the test's look at /proc

    assert not marked(os.path.join(pilot.sandbox, "sub", "p1"))
    pilot.cancel()
    assert pilot.wait(timeout=60) == pf.CANCELED


def _forge(address, server_key, keys, payload):
    """Connect to a root's ROUTER with these keys and send payload; (the socket, ctx)."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode())
    s.setsockopt(zmq.CURVE_PUBLICKEY, keys[0])
    s.setsockopt(zmq.CURVE_SECRETKEY, keys[1])
    s.setsockopt(zmq.ROUTING_ID, b"intruder")
    s.connect(address)
    s.send(payload)
    return s, ctx


def test_nobody_but_a_sub_agent_speaks_as_it(session):
    """An attacker who learns sub-agent p0's address and its server's public key (p0's
    config) cannot speak to the root with a key of its own, nor with sub-agent p1's real
    key: a forged DONE for a running task never reaches the client."""
    pilot, tmgr = start(session)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"]))
    assert wait_for(lambda: t.state == pf.EXECUTING)
    cfg0 = json.loads(open(os.path.join(pilot.sandbox, "sub", "p0", "agent.json")).read())
    cfg1 = json.loads(open(os.path.join(pilot.sandbox, "sub", "p1", "agent.json")).read())
    forged = _wire.encode(_wire.Updates([_wire.Update(t.uid, pf.DONE, time.time(), exit_code=0)]))
    socks = []
    for cfg in (cfg0, cfg1):  # a task of either partition: the forgery names this one
        socks.append(_forge(cfg["address"], cfg["curve"]["server"], zmq.curve_keypair(), forged))
    other = cfg1 if t.partition == 0 else cfg0  # the other sub-agent's key, on this ROUTER
    mine = cfg0 if t.partition == 0 else cfg1
    socks.append(
        _forge(
            mine["address"],
            mine["curve"]["server"],
            (other["curve"]["public"].encode(), other["curve"]["secret"].encode()),
            forged,
        )
    )
    time.sleep(2.0)
    assert t.state == pf.EXECUTING
    assert wait_for(
        lambda: any(
            " connections refused (a key not" in e[3] for e in root_events(pilot, E.REFUSED)
        ),
        timeout=15,
    )
    for s, ctx in socks:
        s.close()
        ctx.term()
    t.cancel()
    assert t.wait(timeout=30) == pf.CANCELED
    pilot.cancel()
    assert pilot.wait(timeout=60) == pf.CANCELED


def test_a_pilot_whose_sub_agents_all_die_fails_naming_them(session):
    pilot, tmgr = start(session)
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"]))
    assert wait_for(lambda: t.state == pf.EXECUTING)
    for pid in sub_pids(pilot).values():
        os.kill(pid, signal.SIGKILL)
    assert pilot.wait(timeout=60) == pf.FAILED
    assert (
        "every sub-agent ended" in pilot.reason and "p0:" in pilot.reason and "p1:" in pilot.reason
    ), pilot.reason
    assert t.wait(timeout=30) == pf.FAILED and "died (killed by SIGKILL)" in t.reason, t.reason


def test_a_killed_root_takes_its_sub_agents_with_it(session):
    """SIGKILL to the root: the pilot FAILS naming its agent's end (its keeper says so), and
    its sub-agents and their tasks end too (the keeper stops the children the root left;
    PR_SET_PDEATHSIG tells a sub-agent even where no keeper is)."""
    pilot, tmgr = start(session)
    slow = tmgr.submit_tasks(
        [pf.TaskDescription(executable="/bin/sleep", arguments=["30"]) for _ in range(4)]
    )
    assert wait_for(lambda: all(t.state == pf.EXECUTING for t in slow))
    subs = sub_pids(pilot)
    with open(os.path.join(pilot.sandbox, "pilot.json")) as f:
        os.kill(json.load(f)["agent_pid"], signal.SIGKILL)
    assert pilot.wait(timeout=60) == pf.FAILED
    assert "killed by signal 9" in pilot.reason, pilot.reason
    assert set(tmgr.wait_tasks([t.uid for t in slow], timeout=30)) == {pf.FAILED}

    def gone(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return b"--subagent" not in f.read()
        except OSError:
            return True

    assert wait_for(lambda: all(gone(p) for p in subs.values()), timeout=30)
    from pilotfish.agent.containment import marked  # noqa: PLC0415 -- a look at /proc

    assert wait_for(
        lambda: not any(marked(os.path.join(pilot.sandbox, "sub", f"p{i}")) for i in (0, 1)),
        timeout=30,
    )
