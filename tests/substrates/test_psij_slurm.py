"""PsijBatchJob against the project's real Slurm (scripts/substrates/slurm.sh): submit, poll,
fail with Slurm's own words, cancel, reject. The job runs a small shell command in place of
the agent."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("psij")

from pilotfish.batch.psij_job import PsijBatchJob
from pilotfish.descriptions import PilotDescription

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _fast_polling(monkeypatch, slurm):
    monkeypatch.setenv("PILOTFISH_BATCH_POLL_S", "0.5")
    monkeypatch.setenv("SLURM_CONF", slurm.conf)


def make(tmp_path, script, uid="pilot.0000", **fields):
    d = PilotDescription(resource="slurm", **{"nodes": 2, "runtime": "10m", **fields})
    return PsijBatchJob(uid, d, str(tmp_path / uid), ["/bin/bash", "-c", script])


def wait_for(job, states, timeout=90.0):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, msg = job.poll()
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in states:
            return state, msg, seen
        time.sleep(0.2)
    job.cancel()
    pytest.fail(f"job {job.native_id} never reached {states}; states seen: {seen}")


def test_submit_runs_and_completes(tmp_path, slurm):
    job = make(tmp_path, 'echo "nodes=$SLURM_JOB_NUM_NODES list=$SLURM_JOB_NODELIST '
                         'name=$SLURM_JOB_NAME part=$SLURM_JOB_PARTITION"; sleep 2',
               queue="debug")
    job.submit()
    assert job.native_id and job.native_id.isdigit()
    state, msg, seen = wait_for(job, {"DONE", "FAILED", "CANCELED"})
    assert state == "DONE", (msg, seen)
    assert "RUNNING" in seen or "QUEUED" in seen
    with open(job.stdout_path) as f:
        out = f.read()
    assert "nodes=2 list=n[1-2] name=pilot.0000 part=debug" in out, out
    # PSI/J keeps its submit script for post-mortems
    assert list((tmp_path / "pilot.0000" / "psij" / "slurm").glob("*.job"))


def test_failure_carries_exit_code_and_stderr(tmp_path, slurm):
    job = make(tmp_path, "echo 'agent: cannot reach the client' >&2; exit 5", uid="pilot.0001")
    job.submit()
    state, msg, _ = wait_for(job, {"DONE", "FAILED", "CANCELED"})
    assert state == "FAILED"
    assert "agent exit code 5" in msg, msg
    assert "cannot reach the client" in msg, msg


def test_cancel(tmp_path, slurm):
    job = make(tmp_path, "sleep 300", uid="pilot.0002")
    job.submit()
    wait_for(job, {"RUNNING"})
    job.cancel()
    state, msg, _ = wait_for(job, {"DONE", "FAILED", "CANCELED"}, timeout=60)
    assert state == "CANCELED", msg


def test_rejected_submission_raises_slurms_message(tmp_path, slurm):
    job = make(tmp_path, "true", uid="pilot.0003", nodes=slurm.nodes + 1)
    with pytest.raises(RuntimeError, match="Node count specification invalid"):
        job.submit()
    job = make(tmp_path, "true", uid="pilot.0004", queue="no-such-queue")
    with pytest.raises(RuntimeError, match="(?i)invalid partition"):
        job.submit()


def test_walltime_exceeded_fails_with_slurms_reason(tmp_path, slurm):
    """runtime 1 minute, the job sleeps longer: Slurm ends it (TIMEOUT) -> FAILED."""
    job = make(tmp_path, "sleep 600", uid="pilot.0005", runtime=60)
    job.submit()
    state, msg, _ = wait_for(job, {"DONE", "FAILED", "CANCELED"}, timeout=200)
    assert state == "FAILED", msg
    assert "time limit" in msg.lower() or "TIMEOUT" in msg, msg
