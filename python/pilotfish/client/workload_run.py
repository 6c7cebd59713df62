"""A workload file's run in a session (`pilotfish run`): its tasks submitted, and on a resume
submitted again where their latest run did not end (RUN_STATE); the run as its progress bar
counts it; the pilot's walltime waited out.

- `submit_workload(session_dir, tmgr, workload, resume)`: every task of the workload
  submitted, the latest run of each returned in the workload's order. On a resume, the
  tasks the session's journal holds are matched again (what finished stays finished) and
  each task whose latest run `runs_again` (CANCELED: an interrupt, a --timeout, the pilot's
  end; or killed by the pilot's walltime) is submitted once more; RUN_STATE (0600) keeps
  which task each such run is of, so that a later resume submits the same tasks in the same
  order (the journal's contract). RunStateError: RUN_STATE unreadable, wrong, or unwritable.
  (WorkloadTasks: what of a TaskManager it uses.)
- `LatestRuns`: the task manager as the progress bar reads it, with only the latest run of
  each task counted.
- `let_walltime_end(pilot, tasks)`: when tasks ended undone and the pilot's walltime is up,
  the pilot waited for (bounded), so that its end says why.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from .. import _json
from .. import states as S
from .._errors import PilotfishError
from .._util import read_private, write_private

if TYPE_CHECKING:
    from ..workload import Workload
    from .pilot import Pilot
    from .task import Task

RUN_STATE = "run.json"  # in the session directory: what `pilotfish run --resume` reads


class WorkloadTasks(Protocol):
    """A TaskManager as a workload's run uses it."""

    counts: Counter[str]

    def submit_tasks(self, descriptions: Any) -> list[Task]: ...

    def get_tasks(self, uids: Any = None) -> list[Task]: ...

    def wait_tasks(
        self, uids: Any = None, state: Any = None, timeout: float | None = None
    ) -> list[str]: ...


class RunStateError(PilotfishError):
    """RUN_STATE cannot be read, says what cannot be, or cannot be written: the message names
    the file and why."""


def _cut(text: object, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def runs_again(task: Task) -> bool:
    """Whether a resume submits this latest run of a task once more: it was CANCELED (an
    interrupt, a --timeout, the pilot's end) or the pilot's walltime killed it."""
    return task.state == S.CANCELED or (
        task.state == S.FAILED and (task.reason or "").startswith(S.WALLTIME_KILLED)
    )


def submit_workload(
    session_dir: str, tmgr: WorkloadTasks, workload: Workload, resume: bool
) -> list[Task]:
    """Submit the workload's tasks; returns the latest run of each, in order (the module's
    docstring: a resume, RUN_STATE)."""
    descs = workload.descriptions()
    state_path = os.path.join(session_dir, RUN_STATE)
    reruns: list[int] = []  # for each task submitted after the workload's: its index there
    if resume:
        try:
            reruns = _json.loads(read_private(state_path))["reruns"]
        except FileNotFoundError:
            reruns = []
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RunStateError(
                f"{state_path}: cannot read what the run submitted: "
                f"{getattr(e, 'strerror', None) or e}"
            ) from None
        if not (
            isinstance(reruns, list) and all(type(k) is int and 0 <= k < len(descs) for k in reruns)
        ):
            raise RunStateError(
                f"{state_path}: reruns = {_cut(reruns)}: not indices of the "
                f"{len(descs)} tasks of {workload.source}"
            )
    runs = tmgr.submit_tasks(descs)
    if reruns:
        runs += tmgr.submit_tasks([descs[k] for k in reruns])
    latest = list(runs[: len(descs)])
    for k, t in zip(reruns, runs[len(descs) :]):
        latest[k] = t
    again = [k for k, t in enumerate(latest) if runs_again(t)]
    if again:  # (first said, then submitted: the journal never holds runs this file lacks)
        try:
            write_private(state_path, json.dumps({"reruns": reruns + again}).encode())
        except OSError as e:
            raise RunStateError(
                f"{state_path}: cannot write which tasks run again: {e.strerror or e}"
            ) from None
        for k, t in zip(again, tmgr.submit_tasks([descs[k] for k in again])):
            latest[k] = t
    return latest


class LatestRuns:
    """The task manager as the progress bar reads it (client/progress.py's TaskCounts), with
    only the latest run of each task of the workload counted: on a resume, a run that was
    canceled and is submitted again counts once (the summary's total), not twice. Its
    `counts` is as much of a Counter as the bar reads: counts[state]."""

    def __init__(self, tmgr: WorkloadTasks, latest: list[Task]) -> None:
        mine = {id(t) for t in latest}
        self._tmgr = tmgr
        self._latest = latest
        # the superseded runs: ended (CANCELED) before this run submitted them again
        self._minus = Counter(t.state for t in tmgr.get_tasks() if id(t) not in mine)
        self.counts = CountsLess(tmgr.counts, self._minus)

    def __len__(self) -> int:
        return len(self._latest)

    def wait_tasks(
        self, uids: Any = None, state: Any = None, timeout: float | None = None
    ) -> list[str]:
        return self._tmgr.wait_tasks(uids, state, timeout=timeout)

    def get_tasks(self, uids: Any = None) -> list:
        return list(self._latest) if uids is None else self._tmgr.get_tasks(uids)


class CountsLess:
    """counts[state] less the superseded runs' (LatestRuns.counts)."""

    def __init__(self, counts: Counter[str], minus: Counter[str]) -> None:
        self._counts, self._minus = counts, minus

    def __getitem__(self, state: str) -> int:
        return self._counts[state] - self._minus.get(state, 0)


def let_walltime_end(pilot: Pilot, tasks: list[Task]) -> None:
    """When tasks ended undone and the pilot's walltime is up, its agent is stopping on its
    own: wait (bounded) for the pilot to end, so that the summary says why it ended rather
    than the session closing it (and no shutdown goes to an agent already gone)."""
    if pilot.state in S.FINAL or all(t.state == S.DONE for t in tasks):
        return
    launched = next((t for state, t in pilot.history if state == S.LAUNCHING), None)
    runtime = pilot.description.runtime
    # the agent drains this long before its walltime (agent/walltime.py, drain_margin); it
    # started after the client launched it: its drain is no earlier than this
    margin = min(60.0, max(1.0, 0.1 * runtime))
    if launched is not None and time.time() >= launched + runtime - margin:
        pilot.wait(timeout=margin + 15.0)
