"""A Slurm pilot with node executors ends cleanly, on the project's cluster of real hosts: the
executors' srun step ends by itself before the batch job does (each executor kills only what
runs on its own host), so Slurm has no step to tear down and the job's nodes are free at once
-- before, the step was SIGKILLed from another host, and its nodes stayed COMPLETING until
slurmctld's next ping (20-40 s in which the next pilot could not start).

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_pilot_end.py
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

import pilotfish as pf
from cluster import hosts, netns, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)
from pilotfish.agent.containment import marked

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]


def _node_states(names) -> dict:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T", "-n", ",".join(names)],
                         capture_output=True, text=True, timeout=30).stdout
    return dict(line.split() for line in out.splitlines())


def test_the_executors_step_ends_before_the_job_and_its_nodes_are_free_at_once(slurm, tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, nodes=3)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true")
                                   for _ in range(3 * slurm.cpus)])
        assert set(tmgr.wait_tasks([t.uid for t in tasks], timeout=60)) == {pf.DONE}
        names = sorted({t.slots[0].node for t in tasks if t.slots})
        assert len(names) == 3, names  # (the executors ran tasks on the other two hosts)
        [nodefile] = glob.glob(os.path.join(pilot.sandbox, "psij", "slurm", "*.nodefile"))
        job = os.path.basename(nodefile).split(".")[0]  # (PSI/J names it by the job id)
    # the session closed: the job is gone from the queue once its script ended
    deadline = time.time() + 60
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                         timeout=30).stdout.strip():
        assert time.time() < deadline, "the pilot's job did not end"
        time.sleep(0.2)
    with open(os.path.join(pilot.sandbox, "agent.log")) as f:
        step = [line for line in f if "nodes p0" in line and "exited" in line]
    assert step and all("signal 0" in line for line in step), step  # (not SIGKILLed)
    # Slurm's view: no node of the job is still COMPLETING (a step it had to tear down keeps
    # it so until the next ping, 20 s here); a moment for slurmctld to take the epilogs
    deadline = time.time() + 5
    while any("completing" in st for st in _node_states(names).values()):
        assert time.time() < deadline, _node_states(names)
        time.sleep(0.2)


def test_a_node_executors_leftover_kill_sees_only_its_own_host(tmp_path):
    """containment.marked(here_only=True), as node executors call it: a marked process on
    another host (a namespace of the cluster sharing this kernel) is not this host's."""
    mark = {**os.environ, "PILOTFISH_SANDBOX": str(tmp_path)}
    here = subprocess.Popen(["sleep", "60"], env=mark)
    there = subprocess.Popen(["ip", "netns", "exec", netns("n2"), "sleep", "60"], env=mark)
    try:
        deadline = time.time() + 10
        while not os.readlink(f"/proc/{there.pid}/exe").endswith("sleep") or \
                len(marked(str(tmp_path)).get(str(tmp_path), [])) < 2:  # (ip has entered n2)
            assert time.time() < deadline, marked(str(tmp_path))
            time.sleep(0.05)
        assert sorted(marked(str(tmp_path))[str(tmp_path)]) == sorted([here.pid, there.pid])
        assert marked(str(tmp_path), here_only=True) == {str(tmp_path): [here.pid]}
    finally:
        for p in (here, there):
            p.kill()
            p.wait()
    assert sys.platform.startswith("linux")
