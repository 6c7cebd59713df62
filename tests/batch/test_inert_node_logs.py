"""The node executors' logs on the cluster of real hosts (issue 47, row 5): two ranks, one on
the agent's host and one on a node executor's, flood their PMI servers with unknown PMI-1
commands of 60 KB for 10 s. Before (_inert.py's guard) agent.log and nodes/n2.log grew ~180 MB
each in 4.4 s (the issue's figure); now each grows by at most 1 MB, and says how many lines it
dropped."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import pilotfish as pf
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300)]

NOISE = str(Path(__file__).resolve().parents[1] / "agent" / "pmi_progs" / "pmi_noise.py")
FLOOD_S = 10
LOG_BOUND = 1024 * 1024


def _sizes(sandbox: str) -> dict[Path, int]:
    """agent.log and each node executor's log (nodes/<host>.log, once it started), bytes."""
    logs = [Path(sandbox, "agent.log"), *Path(sandbox, "nodes").glob("*.log")]
    return {p: p.stat().st_size for p in logs}


def test_ranks_flooding_unknown_pmi_commands_cannot_flood_any_log(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, nodes=2)
        before = _sizes(pilot.sandbox)
        (t,) = tmgr.submit_tasks(
            [
                pf.TaskDescription(
                    executable=sys.executable,
                    arguments=[NOISE, "unknown", str(FLOOD_S)],
                    ranks=2,
                    cores_per_rank=16,  # (a whole host each: the agent's and the other)
                    launcher="pmi",
                )
            ]
        )
        assert t.wait(timeout=FLOOD_S + 90) == pf.DONE, (t.state, t.reason, t.stderr)
        sent = [int(n) for n in t.stdout.split()]
        pilot.cancel()
    grown = {p.name: n - before.get(p, 0) for p, n in _sizes(pilot.sandbox).items()}
    print(f"{FLOOD_S} s, {sent} unknown commands of 60 KB: log growth in bytes {grown}")
    assert len(sent) == 2 and min(sent) > 100, sent  # (each rank flooded: each log was hit)
    assert len(grown) == 2 and max(grown.values()) <= LOG_BOUND, grown
    for p in _sizes(pilot.sandbox):
        assert re.search(r"\d+ lines like .*unknown PMI-1 command.* dropped", p.read_text()), p
