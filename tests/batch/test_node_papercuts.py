"""Issue 41's papercuts on node executors, on the project's cluster of real hosts
(scripts/substrates/slurm.sh): what a task's failure says when it ran on another host than
the agent's, through that host's node executor (agent/node_executor.py).

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_node_papercuts.py
"""

from __future__ import annotations

import pytest

import pilotfish as pf
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def test_missing_output_directory_is_named_on_a_remote_host(slurm, tmp_path):
    """Papercut 2: a task whose stdout's directory is missing fails naming that path, not
    'cannot execute /bin/echo' -- on the agent's host and on the other one alike (one batch
    of 2 x cores tasks: placed in one round, half of them on the second node)."""
    out = str(tmp_path / "nodir" / "x.txt")
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, nodes=2)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/echo", arguments=["x"],
                                                      stdout=out)
                                   for _ in range(2 * slurm.cpus)])
        assert tmgr.wait_tasks([t.uid for t in tasks], timeout=60) == [pf.FAILED] * len(tasks)
        remote = [t for t in tasks if t.slots and t.slots[0].node_index == 1]  # (0: the agent's)
        assert remote, [(t.uid, t.slots) for t in tasks]  # (the case this test is for)
        for t in tasks:
            assert out in (t.reason or "") and "cannot execute" not in t.reason, \
                (t.slots and t.slots[0].node_index, t.reason)
            assert "does not exist" in t.reason, t.reason
        pilot.cancel()
