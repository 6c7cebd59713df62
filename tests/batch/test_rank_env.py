"""Ranks see only their own truth (issue 51, row 5; agent/pmi/env.py STEP_ENV): on the test
cluster, every path a task can take. Before: of 4 ranks on 4 hosts on the default path, rank 1
read SLURM_PROCID=0 SLURM_NTASKS=3 (its node executors' srun step), rank 3 SLURM_PROCID=2; the
ranks on the agent's host read the agent's own step; a plain task too.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_rank_env.py
"""

from __future__ import annotations

import json
import sys

import pytest

import pilotfish as pf
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.timeout(300)]

CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)
IDENTITY = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID",
            "SLURM_STEPID", "SLURM_NPROCS", "SLURM_GTIDS", "SLURM_TASK_PID")
SHOW = (
    "import json, os, sys\n"
    "{mpi}"
    "keep = {names!r}\n"
    "env = {{k: v for k, v in os.environ.items() if k in keep or k.startswith('PMI_')}}\n"
    "env['_rank'] = {rank}\n"
    "print(json.dumps(env), flush=True)\n"
)


def _program(tmp_path, mpi: bool) -> str:
    p = tmp_path / ("ranks.py" if mpi else "plain.py")
    p.write_text(SHOW.format(
        mpi="from mpi4py import MPI\nc = MPI.COMM_WORLD\n" if mpi else "",
        names=IDENTITY + ("SLURM_JOB_ID",), rank="c.rank" if mpi else "None"))
    return str(p)


def _envs(t) -> list[dict]:
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
    return [json.loads(line) for line in t.stdout.splitlines()]


def test_ranks_and_tasks_see_no_step_but_their_own(slurm, tmp_path):
    ranks, plain = _program(tmp_path, True), _program(tmp_path, False)
    with pf.Session(path=tmp_path / "s") as s:
        _, tmgr = slurm_pilot(s)
        world, single, through_srun = tmgr.submit_tasks([
            # the default path (the pilot's own PMI: agent and node executors), 4 hosts
            pf.TaskDescription(executable=sys.executable, arguments=[ranks], ranks=4,
                               cores_per_rank=CORES),
            pf.TaskDescription(executable=sys.executable, arguments=[plain]),
            # srun sets them right itself: the step of this task
            pf.TaskDescription(executable=sys.executable, arguments=[ranks], ranks=2,
                               cores_per_rank=CORES, launcher="srun"),
        ])
        tmgr.wait_tasks(timeout=120)
        envs = _envs(world)
        assert sorted(e["_rank"] for e in envs) == [0, 1, 2, 3]
        for e in envs:
            stale = {k: e[k] for k in IDENTITY if k in e}
            assert not stale, (e["_rank"], stale)  # (before: SLURM_PROCID=0 SLURM_NTASKS=3)
            assert e["PMI_RANK"] == str(e["_rank"]) and e["PMI_SIZE"] == "4", e
            assert e["SLURM_JOB_ID"]  # the job's own variables stay
        (e,) = _envs(single)
        stale = {k: e[k] for k in IDENTITY if k in e or k.startswith("PMI_")}
        assert not stale and not any(k.startswith("PMI_") for k in e), e
        assert e["SLURM_JOB_ID"]
        for e in _envs(through_srun):
            assert e["SLURM_PROCID"] == str(e["_rank"]) and e["SLURM_NTASKS"] == "2", e
        # and each says which path it took (issue 51, row 6)
        assert (world.launcher, through_srun.launcher) == ("pmi", "srun")
        assert single.launcher in ("nodes", "direct"), single.launcher
