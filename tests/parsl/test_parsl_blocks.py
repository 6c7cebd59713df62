"""pilotfish.parsl.PilotfishExecutor with blocks: max_blocks, min_blocks, init_blocks,
parallelism and max_idletime map onto an allocation policy (PilotManager.autoalloc) whose
pilots are the blocks."""

from __future__ import annotations

import time

import pytest

parsl = pytest.importorskip("parsl")

from parsl import python_app  # noqa: E402
from parsl.config import Config  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish.parsl import PilotfishExecutor  # noqa: E402


@python_app
def nap(x):
    import os
    import time

    time.sleep(0.2)
    return x * x, os.environ.get("PILOTFISH_PILOT_UID")


def test_blocks_are_pilots_of_an_allocation_policy(tmp_path):
    ex = PilotfishExecutor(
        label="blocks",
        pilot=pf.PilotDescription(nodes=1, cores_per_node=2, runtime="10m"),
        session_path=str(tmp_path / "s"),
        max_blocks=2,
        min_blocks=0,
        init_blocks=1,
        max_idletime=1.0,
    )
    assert ex.autoalloc == {
        "max_pilots": 2,
        "min_pilots": 0,
        "init_pilots": 1,
        "parallelism": 1.0,
        "idle_timeout": 1.0,
    }
    dfk = parsl.load(Config(executors=[ex], run_dir=str(tmp_path / "runinfo")))
    try:
        futures = [nap(i) for i in range(12)]
        got = [f.result(timeout=60) for f in futures]
        assert [v for v, _ in got] == [i * i for i in range(12)]
        policy = ex._ex.tmgr.holder
        assert policy is not None and 1 <= len(policy.pilots) <= 2
        deadline = time.monotonic() + 20
        while any(p.state not in pf.FINAL for p in policy.pilots) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert {p.state for p in policy.pilots} == {pf.DONE}  # idle blocks released
    finally:
        dfk.cleanup()
        parsl.clear()
