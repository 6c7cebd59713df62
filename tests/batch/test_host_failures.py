"""A host that fails, and a batch system that stumbles, on the project's cluster of real hosts
(scripts/substrates/slurm.sh: a login host and compute hosts n1..n4, each its own network and
UTS namespace, one real slurmd each). No mocks: a real Slurm pilot from the login host.

- A compute host dies whole (every process of it SIGKILLed, its slurmd too): Slurm declares
  the node DOWN once SlurmdTimeout passes -- and, unless the job asked --no-kill and
  --no-requeue, kills and requeues the pilot's job with it. The pilot must stay ACTIVE on the
  other hosts. The test restores the host (the same slurmd command slurm.sh start runs, then
  `scontrol update state=resume`) so that the shared cluster is whole again.
- `squeue` fails for a while (a wrapper first on the client's PATH: the shared slurmctld is
  left alone): the client's polls are retried with back-off, the pilot stays ACTIVE, no task
  fails; only the agent's silence or the batch system's word ends a pilot.

    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_host_failures.py
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import pilotfish as pf
from cluster import hosts, WHERE, netns, slurm_pilot  # noqa: F401 -- hosts: an autouse fixture (cluster.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]



def _slurm(*argv: str, timeout: float = 20) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    return r.stdout.strip() if r.returncode == 0 else ""


def _conf_value(key: str) -> str:
    """A slurm.conf setting as the shared cluster has it (read, never changed)."""
    for line in Path(os.environ["SLURM_CONF"]).read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.split()[0]
    return ""


def _node_state(node: str) -> str:
    return _slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T").lower()


def _job_state(job: str) -> str:
    return _slurm("squeue", "-h", "-j", job, "-o", "%T")


def _held(job: str) -> list[str]:
    """The hosts the job holds now, as squeue says."""
    return _slurm("scontrol", "show", "hostnames",
                  _slurm("squeue", "-h", "-j", job, "-o", "%N")).split()


def _kill_whole_host(node: str) -> list[str]:
    """SIGKILL every process in that host's network namespace, its slurmd included: the host
    is gone as far as Slurm and the pilot can tell."""
    pids = subprocess.run(["ip", "netns", "pids", netns(node)], capture_output=True,
                          text=True, check=True).stdout.split()
    killed = []
    for pid in map(int, pids):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            os.kill(pid, signal.SIGKILL)
            killed.append(comm)
        except (OSError, ProcessLookupError):
            pass
    return killed


def _restore_host(node: str) -> None:
    """Start the host's slurmd again as scripts/substrates/slurm.sh start does (its netns, a
    UTS namespace of its own named after it) and resume the node: the cluster is whole."""
    running = subprocess.run(["ip", "netns", "pids", netns(node)], capture_output=True,
                             text=True).stdout.split()
    if not any(_comm(p) == "slurmd" for p in running):
        subprocess.run(["ip", "netns", "exec", netns(node), "unshare", "--uts", "sh", "-c",
                        'hostname "$1" && exec slurmd -N "$1" -f "$2" </dev/null', "slurmd",
                        node, os.environ["SLURM_CONF"]], check=True, timeout=60)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = _node_state(node)
        if state in ("idle", "allocated", "mixed"):
            return
        if "down" in state or "drain" in state:
            _slurm("scontrol", "update", f"nodename={node}", "state=resume")
        time.sleep(1)
    raise AssertionError(f"{node} did not come back: {_node_state(node)!r}")


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_dead_host_leaves_the_pilot_running_on_the_others(slurm, tmp_path):
    """Every process of compute host n3, its slurmd included, SIGKILLed while tasks run on
    every host. Past SlurmdTimeout Slurm declares n3 DOWN; the pilot's job asked --no-kill
    and --no-requeue, so Slurm neither kills nor requeues it: squeue still says RUNNING, the
    pilot stays ACTIVE, n3's tasks run again elsewhere (retries=1), and tasks submitted after
    run DONE on n1, n2 and n4. (Before: the job was requeued at SlurmdTimeout, the agent
    killed, the pilot FAILED.)"""
    slurmd_timeout = float(_conf_value("SlurmdTimeout") or 300)
    assert slurmd_timeout <= 120, f"SlurmdTimeout={slurmd_timeout:g}: this test would take too long"
    assert _node_state("n3") in ("idle", "mixed", "allocated"), _node_state("n3")
    job = None
    try:
        with pf.Session(path=tmp_path / "s") as s:
            pilot, tmgr = slurm_pilot(s, active_timeout=180,
                                      launcher_options={"nodes": {"lost_after_s": 3}})
            job = pilot._job.native_id
            n = 4 * slurm.cpus  # one per core: every host busy
            tasks = tmgr.submit_tasks([pf.TaskDescription(
                executable="/bin/sh", arguments=["-c", f"sleep 5; {WHERE}"], retries=1)
                for _ in range(n)])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(t.state != pf.EXECUTING for t in tasks):
                time.sleep(0.2)
            assert {t.slots[0].node for t in tasks if t.slots} == {"n1", "n2", "n3", "n4"}
            time.sleep(1.0)  # (their processes exist)
            killed = _kill_whole_host("n3")
            assert "slurmd" in killed, killed
            t_kill = time.monotonic()
            # Slurm's word on n3: DOWN once its slurmd has not answered for SlurmdTimeout
            deadline = t_kill + 2 * slurmd_timeout + 60
            while time.monotonic() < deadline and "down" not in _node_state("n3"):
                time.sleep(1)
            down_after = time.monotonic() - t_kill
            assert "down" in _node_state("n3"), (_node_state("n3"), down_after)
            # what Slurm does to the job then, it does at once: wait (bounded) for its word
            # on the job -- n3 out of its nodes, or the job no longer RUNNING -- then give the
            # client's polls a few intervals to hear it
            end = time.monotonic() + 10
            while time.monotonic() < end and _job_state(job) == "RUNNING" and "n3" in _held(job):
                time.sleep(0.5)
            end = time.monotonic() + 4 * float(os.environ.get("PILOTFISH_BATCH_POLL_S", "0.5")) + 2
            while time.monotonic() < end and pilot.state == pf.ACTIVE:
                time.sleep(0.5)
            assert pilot.state == pf.ACTIVE, (pilot.state, pilot.reason, down_after)
            assert _job_state(job) == "RUNNING", (_job_state(job), down_after)
            held = _held(job)
            assert held == ["n1", "n2", "n4"], held  # n3 left the job; the rest stayed
            states = tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
            assert collections.Counter(states) == {pf.DONE: n}, \
                [(t.uid, t.reason) for t in tasks if t.state != pf.DONE][:3]
            later = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sh",
                                                          arguments=["-c", WHERE])
                                       for _ in range(200)])
            states = tmgr.wait_tasks([t.uid for t in later], timeout=120)
            assert collections.Counter(states) == {pf.DONE: 200}, \
                [(t.uid, t.reason) for t in later if t.state != pf.DONE][:3]
            assert {t.stdout.split()[0] for t in later} == {"n1", "n2", "n4"}
            assert pilot.state == pf.ACTIVE, pilot.reason
            print(f"n3 DOWN {down_after:.0f}s after the kill (SlurmdTimeout={slurmd_timeout:g})")
            pilot.cancel()
            assert pilot.wait(timeout=60) == pf.CANCELED, pilot.reason
    finally:
        if job is not None and _job_state(job):  # (requeued before the fix: never again)
            _slurm("scancel", job)
        _restore_host("n3")


def _squeue_wrapper(where: Path) -> tuple[Path, Path, Path]:
    """A `squeue` first on PATH that fails as squeue does without its slurmctld while `flag`
    exists, and is the real one otherwise; each call adds a line to `calls`."""
    real = shutil.which("squeue")
    assert real, "squeue is not on PATH"
    bin_dir, flag, calls = where / "bin", where / "failing", where / "calls"
    bin_dir.mkdir()
    script = bin_dir / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{flag}" ]; then echo fail >> "{calls}"\n'
        "  echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'echo ok >> "{calls}"\n'
        f'exec "{real}" "$@"\n')
    script.chmod(0o755)
    return bin_dir, flag, calls


def test_a_failing_squeue_is_retried_and_the_pilot_lives(slurm, tmp_path, monkeypatch):
    """squeue fails for 10 s while tasks run (the client's every poll gets slurmctld's
    "Unable to contact slurm controller"): the agent goes on heartbeating, so the client
    retries with back-off -- the pilot stays ACTIVE, 0 tasks FAIL, the polls resume once
    squeue answers. Canceled while squeue fails again, the pilot ends CANCELED on its
    agent's bye. (Before: PSI/J failed the job on its third failed poll, and with it the
    pilot and every task not yet DONE.)"""
    poll_s = float(os.environ.get("PILOTFISH_BATCH_POLL_S", "0.5"))
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = slurm_pilot(s, active_timeout=180, nodes=2)
        job = pilot._job.native_id
        bin_dir, flag, calls = _squeue_wrapper(tmp_path)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        flag.touch()
        t0 = time.monotonic()
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sh",
                                                      arguments=["-c", f"sleep 2; {WHERE}"])
                                   for _ in range(6 * slurm.cpus)])  # ~12 s on 2 x 16 cores
        # (back-off from 0.5 s: tries at ~0, 0.5, 1.5, 3.5, 7.5 s -- one per interval would
        # be 20; the next at ~15.5 s, after squeue answers again)
        failing_s = 10.0
        while time.monotonic() - t0 < failing_s:
            assert pilot.state == pf.ACTIVE, (pilot.state, pilot.reason)
            time.sleep(0.5)
        failed_polls = calls.read_text().count("fail") if calls.exists() else 0
        flag.unlink()
        assert failed_polls >= 2, failed_polls  # the client did poll, and squeue did fail
        # back-off: far fewer tries than one per poll interval
        assert failed_polls <= max(8, failing_s / poll_s / 4), failed_polls
        states = tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
        assert collections.Counter(states) == {pf.DONE: len(tasks)}, \
            [(t.uid, t.reason) for t in tasks if t.state != pf.DONE][:3]
        deadline = time.monotonic() + 60  # the polls resume (the back-off is bounded)
        while time.monotonic() < deadline and "ok" not in calls.read_text():
            time.sleep(0.5)
        assert "ok" in calls.read_text(), "the client stopped polling the batch system"
        assert pilot.state == pf.ACTIVE, pilot.reason
        assert _job_state(job) == "RUNNING"
        print(f"{failed_polls} failed polls in {failing_s:g}s (interval {poll_s:g}s)")
        # squeue fails again as the pilot is canceled: the agent's bye ends it all the same
        # (before: ACTIVE until squeue answered, its last known job state being RUNNING)
        flag.touch()
        try:
            pilot.cancel()
            assert pilot.wait(timeout=30) == pf.CANCELED, (pilot.state, pilot.reason)
        finally:
            flag.unlink()
        deadline = time.monotonic() + 60  # (the job did end: Slurm's word, once it answers)
        while time.monotonic() < deadline and _job_state(job) not in ("", "COMPLETED"):
            time.sleep(0.5)
        assert _job_state(job) in ("", "COMPLETED"), _job_state(job)
