"""Emulated node executors (agent/node_emulated.py) on a local pilot, and the node port's door
at a machine's worth of them (issue 48 items 1 and 4).

- 300 executors connecting at once (more than the door's old 64 pending connections, each
  counted pending for 5.5 s): before, the door shut the oldest -- authenticated ones too --
  and the evict-reconnect churn never settled (2,546 hellos and 2,299 nodes lost for 300
  nodes; refusals by the thousand). Now each node says hello once, none is lost, the door
  closes nothing, and the tasks run on every node.
- a stranger (user nobody) holding half-open connections at the node port while they connect
  locks none out: every node comes up, once.
- an emulated process runs for its task's `duration`; a task canceled while it runs ends
  CANCELED, its node's executor told to kill it.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events

pytestmark = pytest.mark.timeout(300)

N = 300


def _pilot(s, n: int, **kw):
    pilot = pf.PilotManager(s).submit_pilots(
        pf.PilotDescription(
            resource="local",
            nodes=n,
            cores_per_node=2,
            runtime="10m",
            subagents=False,
            launcher_options={"nodes": {"emulate": True}},
            **kw,
        )
    )
    tmgr = pf.TaskManager(s)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def _events(pilot) -> list:
    return read_all_events(os.path.join(pilot.sandbox, "agent.events"))


def _all_up(pilot, n: int, timeout: float = 120) -> list:
    """The NODE_UP events once n nodes said hello (or the timeout passed)."""
    end = time.monotonic() + timeout
    while True:
        evs = _events(pilot)
        names = {e[3].split()[0] for e in evs if e[2] == E.NODE_UP}
        if len(names) >= n or time.monotonic() > end:
            return evs
        time.sleep(0.5)


def _evictions(evs: list) -> int:
    """Connections the node port's door closed over its caps (its REFUSED summaries)."""
    out = 0
    for e in evs:
        if e[2] == E.REFUSED and (e[3] or "").startswith("node executor port:"):
            m = re.search(r"(\d+) unproven connections closed", e[3])
            out += int(m.group(1)) if m else 0
    return out


def _healthy(evs: list, n: int) -> None:
    ups = collections.Counter(e[3].split()[0] for e in evs if e[2] == E.NODE_UP)
    lost = [e[3] for e in evs if e[2] == E.NODE_LOST]
    refused = [e[3] for e in evs if e[2] == E.REFUSED and "second connection" in (e[3] or "")]
    assert len(ups) == n and set(ups.values()) == {1}, (len(ups), sum(ups.values()))
    assert not lost, (len(lost), lost[:3])
    assert not refused, (len(refused), refused[:3])


def test_300_executors_connect_at_once_without_eviction(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = _pilot(s, N)
        evs = _all_up(pilot, N)
        _healthy(evs, N)
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/true", stdout=False) for _ in range(2 * N)]
        )
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
        assert collections.Counter(states) == {pf.DONE: 2 * N}, collections.Counter(
            t.reason for t in tasks if t.reason
        ).most_common(3)
        assert len({s.node for t in tasks for s in t.slots}) == N  # every node ran some
        pilot.cancel()
        pilot.wait(timeout=60)
    evs = _events(pilot)
    _healthy(evs, N)
    assert _evictions(evs) == 0, [e[3] for e in evs if e[2] == E.REFUSED][:3]


def test_durations_and_a_kill(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = _pilot(s, 4)
        _all_up(pilot, 4)
        t0 = time.monotonic()
        short = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/true", duration=1.5) for _ in range(8)]
        )
        long = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", duration=600))
        assert tmgr.wait_tasks([t.uid for t in short], timeout=60) == [pf.DONE] * 8
        assert time.monotonic() - t0 >= 1.5  # (they "ran" for their duration)
        assert long.wait(pf.EXECUTING, timeout=30) == pf.EXECUTING
        tmgr.cancel_tasks(long.uid)
        assert long.wait(timeout=30) == pf.CANCELED, long.reason
        bad = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/false"))
        assert bad.wait(timeout=30) == pf.FAILED and bad.exit_code == 1, bad.reason
        pilot.cancel()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as user nobody")
def test_a_stranger_holding_connections_locks_no_executor_out(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_floods import attack, finished

    os.chmod(tmp_path, 0o755)  # (nobody may look; the session directory itself stays 0700)
    with pf.Session(path=tmp_path / "s") as s:
        pilot = pf.PilotManager(s).submit_pilots(
            pf.PilotDescription(
                resource="local",
                nodes=N,
                cores_per_node=2,
                runtime="10m",
                subagents=False,
                launcher_options={"nodes": {"emulate": True, "emulate_procs": 2}},
            )
        )
        cfg = Path(pilot.sandbox, "nodes.json")
        end = time.monotonic() + 60
        while not cfg.exists() and time.monotonic() < end:
            time.sleep(0.01)
        address = json.loads(cfg.read_text())["address"]
        flood = attack("hold:2000", 8, [address])  # while the executors connect
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        evs = _all_up(pilot, N)
        got = finished(flood)
        assert got["opened"] >= 2000, got  # it really tried
        _healthy(evs, N)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(N)])
        assert tmgr.wait_tasks([t.uid for t in tasks], timeout=120) == [pf.DONE] * N
        pilot.cancel()
    _healthy(_events(pilot), N)


def test_bad_emulation_options_and_specs_are_refused_naming_why():
    from pilotfish.agent.node_emulated import duration_of
    from pilotfish.agent.resources import discover
    from pilotfish.launch.base import LaunchError
    from pilotfish.launch.nodes import NodesLaunch

    declared = discover("local", nodes=4, cores_per_node=2)
    assert NodesLaunch(declared, {"emulate": True}).remote == [n.name for n in declared.nodes]
    slurm = discover(
        "slurm", env={"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)"}
    )
    with pytest.raises(LaunchError, match="emulate=True .* slurm"):
        NodesLaunch(slurm, {"emulate": True})
    for bad in (0, "2", 1.5):
        with pytest.raises(LaunchError, match=f"emulate_procs = {re.escape(repr(bad))}"):
            NodesLaunch(declared, {"emulate": True, "emulate_procs": bad})
    assert duration_of((1, ["/bin/sleep", "2.5"], None, None, None, None)) == (2.5, 0)
    env = ["A=1", "PILOTFISH_EMULATED_DURATION=0.25"]
    assert duration_of((2, ["/bin/false"], env, None, None, None)) == (0.25, 1)
    for spec in ((-1, ["x"], None, None, None, None), (3, [], None, None, None, None), (4,)):
        with pytest.raises((ValueError, TypeError)):
            duration_of(spec)
