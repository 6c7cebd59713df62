"""A Slurm pilot's files are its owner's alone, all the way down (issue 42, row 11), on the
project's cluster of real hosts: PSI/J's submit and launcher scripts, the job's own files
(`<id>.out`, `.ec`, `.nodefile`, `agent.out`/`agent.err`, written by the batch script on the
first compute host), the agent's and the node executors' logs, spool files, task sandboxes,
the function pool's result files -- 0600 or stricter, in 0700 directories -- and no large
function result left once the session is closed. No mocks: real sbatch, real slurmstepd.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_sandbox_privacy.py
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import pytest

import pilotfish as pf
from cluster import hosts  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "client"))
from test_session_files import not_private  # noqa: E402 -- one walk for both tests

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def _big(n):
    return b"x" * n


def test_a_slurm_pilot_is_private_all_the_way_down(slurm, tmp_path):
    """umask 022 in the client; a 2-node Slurm pilot (agent on n1, a node executor on n2):
    tasks on both hosts that make files and directories of their own, a function call with a
    large result and one whose result nobody reads. Walked while the pilot runs and after
    the session closed: every file 0600 or stricter, every directory 0700; no
    functions/*.result after the close. (Before: agent.log, agent.out/err, psij/*, nodes/*.log,
    spool/*, tasks/* and functions/*.result 0644 in 0755 directories; the results stayed.)"""
    old = os.umask(0o022)
    try:
        path = tmp_path / "s"
        with pf.Session(path=path) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                resource="slurm", nodes=2, runtime="10m"))
            tmgr = pf.TaskManager(s)
            tmgr.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=180) == pf.ACTIVE, pilot.reason
            tasks = tmgr.submit_tasks([pf.TaskDescription(
                executable="/bin/sh",
                arguments=["-c", 'sleep 1; mkdir -p "made/$PILOTFISH_TASK_UID"; '
                                 'echo x > "made/$PILOTFISH_TASK_UID/f"; hostname; echo e >&2'])
                for _ in range(3 * slurm.cpus)])  # more than n1's cores: n2 gets some
            read, unread = tmgr.submit_tasks([
                pf.TaskDescription(function=_big, args=(1 << 20,)),
                pf.TaskDescription(function=_big, args=(2 << 20,))])
            every = tasks + [read, unread]
            states = tmgr.wait_tasks([t.uid for t in every], timeout=180)
            assert collections.Counter(states) == {pf.DONE: len(every)}, \
                [(t.uid, t.reason) for t in every if t.state != pf.DONE][:3]
            assert {t.stdout.strip() for t in tasks} == {"n1", "n2"}  # (n2: its executor)
            assert read.result == b"x" * (1 << 20)
            sandbox = Path(pilot.sandbox)
            assert len(list(sandbox.rglob("functions/*.result"))) == 2  # (they went by file)
            for must in ("agent.log", "agent.out", "agent.err", "nodes/n2.log", "psij/slurm"):
                assert (sandbox / must).exists(), must  # (what the walk must cover)
            assert list(sandbox.glob("psij/*/single_launch.sh")), "PSI/J's launcher script"
            bad = not_private(path)
            assert bad == [], "\n".join(bad)
            pilot.cancel()
            assert pilot.wait(timeout=60) == pf.CANCELED, pilot.reason
    finally:
        os.umask(old)
    bad = not_private(path)
    assert bad == [], "\n".join(bad)
    assert list(path.rglob("*.result")) == []
