"""The agent's spool of captured-output files (agent/task_runner.py TaskRunner). Reuse without
O_TRUNC end to end: tests/client/test_local_pilot.py (outputs that never mix)."""

from pilotfish._core import Executor
from pilotfish.agent.task_runner import TaskRunner


def _runner(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    return TaskRunner(Executor(base_env=["PATH=/usr/bin:/bin"]), str(tasks),
                      spool_dir=str(tmp_path / "spool"))


def test_numbers_go_on_after_an_earlier_agents_files(tmp_path):
    """A resumed pilot's new agent finds the old agent's spool files (maybe with output):
    its new numbers never name one of them."""
    spool = tmp_path / "spool"
    spool.mkdir()
    for name in ("3.out", "12.err", "12.out.2", "notes.txt"):
        (spool / name).write_text("old output")
    assert _runner(tmp_path)._new_spool() == 13
