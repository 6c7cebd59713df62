"""A PMI world's limits on the cluster of real hosts (issue 47, rows 1, 4 and 6): what ranks of
one task may make the agent and the node executors hold, and what ends their task.

- every rank of a 4-host world puts ~31 MB (each host under the 32 MiB cap, the world far
  over it): the agent refuses the contribution that takes the world past its cap as it
  arrives and the task FAILS naming the cap, the size and the node -- the agent and every
  node executor stay within the cap + 64 MB (their peak RSS, /proc/PID/status VmHWM);
- a remote host's ranks contribute 70,000 keys to one fence: it completes (the fence travels
  in bounded parts), every rank reads the other host's first and last key back;
- a rank that exits 0 without ever speaking PMI while a child of it keeps its PMI descriptor
  open fails its task (the rule is the connection's state when the rank's process is
  reaped, not its descriptor's EOF): never N singletons ending DONE.

The ranks: tests/agent/pmi_progs/raw_pmi.py (speaks PMI-1 itself), /bin/sh.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish.agent.pmi import MAX_KVS_BYTES
from pilotfish.launch.base import by_node
from cluster import hosts, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

RAW = str(Path(__file__).resolve().parents[1] / "agent" / "pmi_progs" / "raw_pmi.py")
CORES = 16  # a whole host per rank (the cluster's hosts have 16 cores: slurm.sh)
MB = 1024 * 1024


@pytest.fixture(scope="module")
def pilot(slurm, tmp_path_factory):
    """One pilot on the four hosts; the first test measures its processes' peak memory."""
    with pf.Session(path=tmp_path_factory.mktemp("s")) as s:
        yield slurm_pilot(s, launcher_options={"pmi": {"init_timeout": 30}})


def _run(tmgr, td, timeout=180):
    (t,) = tmgr.submit_tasks([td])
    tmgr.wait_tasks([t.uid], timeout=timeout)
    return t


def _hwm(pid: int) -> int:
    """A process's peak resident memory (VmHWM), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def _executors(sandbox: str) -> list[int]:
    """The pids of the pilot's node executors (`python -m pilotfish.agent.node_executor <sandbox>/
    nodes.json`, one per other host)."""
    config = os.path.join(sandbox, "nodes.json").encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:4] == [b"-m", b"pilotfish.agent.node_executor", config]:  # (not the srun step's)
            found.append(int(d))
    return found


def test_a_world_over_its_kvs_cap_fails_as_it_arrives(pilot):
    p, tmgr = pilot
    agent = json.loads(Path(p.sandbox, "pilot.json").read_text())["agent_pid"]
    end = time.monotonic() + 60
    while len(_executors(p.sandbox)) < 3 and time.monotonic() < end:
        time.sleep(0.2)
    execs = _executors(p.sandbox)
    assert len(execs) == 3, execs  # n2..n4 (the agent serves n1's ranks itself)
    before = {pid: _hwm(pid) for pid in [agent, *execs]}
    t = _run(
        tmgr,
        pf.TaskDescription(
            executable=sys.executable,
            launcher="pmi",
            ranks=4,
            cores_per_rank=CORES,
            arguments=[RAW, "bigput", "31"],
        ),
    )
    after = {pid: _hwm(pid) for pid in [agent, *execs]}
    print(
        f"agent {after[agent] / MB:.0f} MB peak (before {before[agent] / MB:.0f}); executors "
        + ", ".join(f"{after[x] / MB:.0f} (before {before[x] / MB:.0f})" for x in execs)
        + f"; reason: {t.reason}"
    )
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert f"max_kvs_bytes={MAX_KVS_BYTES}" in t.reason, t.reason
    assert "key-value space" in t.reason and "timed out" not in t.reason, t.reason
    assert any(f"node {h}" in t.reason for h in ("n1", "n2", "n3", "n4")), t.reason
    for pid, peak in after.items():
        assert peak <= MAX_KVS_BYTES + 64 * MB, (
            pid,
            "agent" if pid == agent else "executor",
            peak / MB,
            before[pid] / MB,
        )


def test_70000_keys_from_a_remote_host_complete_one_fence(pilot):
    _, tmgr = pilot
    t0 = time.monotonic()
    t = _run(
        tmgr,
        pf.TaskDescription(
            executable=sys.executable,
            launcher="pmi",
            ranks=2,
            cores_per_rank=CORES,
            timeout=60,
            arguments=[RAW, "manykeys", "70000"],
        ),
    )
    assert t.state == pf.DONE, (t.state, t.reason, t.stderr)
    hosts_of = [s.node for s in by_node(t.slots)]
    assert len(set(hosts_of)) == 2 and set(hosts_of) != {"n1"}, hosts_of
    print(
        f"2 x 70,000 keys through one fence across {hosts_of}: "
        f"{time.monotonic() - t0:.1f} s submit -> DONE"
    )


def test_a_rank_that_exits_without_pmi_while_a_child_holds_its_descriptor(pilot):
    _, tmgr = pilot
    t = _run(
        tmgr,
        pf.TaskDescription(
            executable="/bin/sh",
            launcher="pmi",
            ranks=2,
            cores_per_rank=CORES,
            arguments=["-c", "sleep 20 & exit 0"],
        ),
        timeout=60,
    )
    assert t.state == pf.FAILED, (t.state, t.reason)
    assert "ended without speaking PMI" in t.reason, t.reason
