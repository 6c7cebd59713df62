"""A node is who its key says it is (issue 47, row 2), on the project's cluster of real hosts
(scripts/substrates/slurm.sh: a login host and compute hosts n1..n4, each its own network
namespace): a real Slurm pilot from the login host, its agent on n1, a node executor on each
other host.

The attack: a task of the pilot's owner (tests/batch/node_intruder.py) reads the node port's
address and key from the pilot sandbox (a task's view of the pilot's files) and connects as n4
while n4's executor is up, silent for longer than lost_after_s, then sends one heartbeat.
Before: ROUTER_HANDOVER gave it n4's route -- n4 was declared lost, the tasks whose spawns went
to the intruder never started and were reported FAILED "taken as ended" at the verdict, and the
intruder received the Spawn frames meant for n4. Now each executor proves itself with its own
key (agent/node_link.py): the intruder's handshake is refused and counted, it receives no frame, n4
is never lost, every task runs DONE, n4 included.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_node_identity.py
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish import _events as E
from cluster import hosts, WHERE, agent_events, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

TARGET = "n4"  # the node whose name the intruder takes (the agent runs on n1)
LOST = {"nodes": {"lost_after_s": 3}}  # lost after 3 s of silence; a verdict 15 s after
HOLD_S, LISTEN_S = 4.0, 4.0  # silent past the loss, then one heartbeat (< the 9 s fence)
INTRUDER = Path(__file__).resolve().parent / "node_intruder.py"


def test_a_task_with_the_pilots_files_cannot_take_a_nodes_name(slurm, tmp_path):
    report = tmp_path / "intruder.json"
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, launcher_options=LOST)
        warm = tmgr.submit_tasks(
            [
                pf.TaskDescription(executable="/bin/sh", arguments=["-c", WHERE])
                for _ in range(4 * slurm.cpus)
            ]
        )
        assert set(tmgr.wait_tasks([t.uid for t in warm], timeout=120)) == {pf.DONE}
        assert TARGET in {t.stdout.split()[0] for t in warm}  # its executor is up and serves
        intruder = tmgr.submit_tasks(
            pf.TaskDescription(
                executable=sys.executable,
                arguments=[str(INTRUDER), str(report), TARGET, str(HOLD_S), str(LISTEN_S)],
            )
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not report.exists():
            time.sleep(0.1)
        assert report.exists(), (intruder.state, intruder.reason)
        time.sleep(0.5)  # (connected: its handshake is done or refused by now)
        # every core busy, twice over, while it holds on: spawns go to every node
        tasks = tmgr.submit_tasks(
            [
                pf.TaskDescription(executable="/bin/sh", arguments=["-c", f"sleep 1; {WHERE}"])
                for _ in range(8 * slurm.cpus)
            ]
        )
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=180)
        assert intruder.wait(timeout=60) == pf.DONE, (intruder.state, intruder.reason)
        seen = json.loads(report.read_text())
        print(f"intruder on {seen['host']}: {seen}; tasks {collections.Counter(states)}")
        failed = [
            (t.uid, t.slots[0].node if t.slots else None, t.reason)
            for t, st in zip(tasks, states)
            if st != pf.DONE
        ]
        assert failed == [], (len(failed), failed[:3])
        assert agent_events(pilot, E.NODE_LOST) == [], "a node was lost to the intruder"
        assert seen["frames"] == [], ("frames meant for a node reached the intruder", seen)
        assert seen["succeeded"] == 0 and seen["failed"] >= 1, seen  # refused at its handshake
        assert TARGET in {t.stdout.split()[0] for t in tasks}  # n4 served all along
        refused = [
            e[3] for e in agent_events(pilot, E.REFUSED) if "node executor port" in (e[3] or "")
        ]
        assert refused, agent_events(pilot, E.REFUSED)  # counted, summed up
        assert pilot.state == pf.ACTIVE, (pilot.state, pilot.reason)
        pilot.cancel()
