"""Floods before login at the agent's node port and its TCP endpoints on the test cluster
(issue 42 rows 1-2, tests/agent/test_floods.py for the local sockets): a Slurm pilot of 2
hosts, its agent on n1; the attacker is user nobody on the login host, speaking raw bytes
(tests/agent/flood_attacker.py) to every port the agent listens on, found as any user finds
them (ss in n1's namespace lists them). The agent's memory stays within BOUND_MB under 8 GiB
frames; half-open connections held meanwhile fail no task, and the node executor on n2 stays
up (its connection proved itself: the door never closes it).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from cluster import hosts, netns  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from test_floods import BOUND_MB, _rss_mb, attack, finished  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as user nobody")]


HOLD_S = 12  # how long the half-open connections are held: the 500 tasks run inside it


def _ports(pid: int, host: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", netns(host), "ss", "-ltnpH"], capture_output=True,
                         text=True, check=True).stdout
    return [f"tcp://{line.split()[3]}" for line in out.splitlines() if f"pid={pid}," in line]


def _fn(x):
    return x + 1


def test_floods_at_the_agents_ports_on_another_host(slurm, tmp_path):
    os.chmod(tmp_path, 0o755)
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=2,
                                                       runtime="15m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        assert tmgr.submit_tasks(pf.TaskDescription(function=_fn, args=(1,))).wait(
            timeout=60) == pf.DONE
        info = json.loads(Path(pilot.sandbox, "pilot.json").read_text())
        agent, host = info["agent_pid"], info["agent_host"]
        node_port = json.loads(Path(pilot.sandbox, "nodes.json").read_text())["address"]
        targets = _ports(agent, host)
        assert node_port in targets, (node_port, targets)
        assert len(targets) >= 3, targets  # node port, service registry, function pool
        before = _rss_mb(agent)
        big = finished(attack("big", 3, targets))
        assert big["cut_off"] == big["connections"] == 4 * len(targets), big
        assert _rss_mb(agent) - before < BOUND_MB, (before, _rss_mb(agent), big)
        floods = [attack("hold:1000", HOLD_S, targets) for _ in range(4)]
        time.sleep(2)
        t0 = time.monotonic()
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sh",
                                                      arguments=["-c", "hostname"])
                                   for _ in range(500)])
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=300)
        ran_s = time.monotonic() - t0
        # every task ran under the flood: the attackers were still holding when the last ended
        assert all(f.poll() is None for f in floods), ("the flood ended before the tasks", ran_s)
        print(f"500 tasks in {ran_s:.1f}s under a flood of {HOLD_S:g}s")
        got = [finished(f) for f in floods]
        assert collections.Counter(states) == {pf.DONE: 500}, \
            collections.Counter(t.reason for t in tasks if t.reason).most_common(3)
        assert {t.stdout.strip() for t in tasks} == {"n1", "n2"}  # n2's executor served
        assert sum(g["opened"] for g in got) >= 4000, got
        pilot.cancel()
    evs = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    assert not [e for e in evs if e[2] == E.NODE_LOST], "the flood cost a node"
    refused = [e for e in evs if e[2] == E.REFUSED and "node executor port" in (e[3] or "")]
    assert refused and len(refused) < 12, refused  # summed up, not one each
