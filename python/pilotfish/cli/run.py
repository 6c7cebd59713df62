"""`pilotfish run WORKLOAD`: a pilot (or an allocation policy's pilots) and the workload's
tasks, with live progress and a summary; `--resume SESSION_DIR` goes on with what did not
finish (RUN_STATE keeps which tasks a resume submitted again)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, cast

import click

from .. import _json
from ._common import BadInput, PathArg, load_workload, short
from .validate import WORKLOAD_EXAMPLE, WORKLOAD_LIMITS

if TYPE_CHECKING:
    from ..client._ports import TaskCounts


# (\b: click keeps the example's lines as they are -- it pastes into a file and parses)
@click.command(epilog="Workload file format:\n\n\b\n" + WORKLOAD_EXAMPLE + "\n" + WORKLOAD_LIMITS)
@click.argument("workload", type=PathArg(exists=True, dir_okay=False))
@click.option(
    "--sessions",
    type=PathArg(file_okay=False),
    default=None,
    help="Where the session directory goes (default: ./pilotfish-sessions).",
)
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, only the summary.")
@click.option("--report", "make_report", is_flag=True, help="Write the HTML report after the run.")
@click.option(
    "--resume",
    "resume",
    type=PathArg(exists=True, file_okay=False),
    default=None,
    help="Continue the session in this directory: re-attach to its pilot if its agent "
    "is alive (else start a new one) and run only what did not finish.",
)
def run(
    workload: str,
    sessions: str | None,
    timeout: float | None,
    quiet: bool,
    make_report: bool,
    resume: str | None,
) -> None:
    """Run WORKLOAD (YAML): a pilot and groups of tasks.

    Exits 0 when every task is DONE, 1 when any failed or was canceled, 2 on bad input, 130
    when interrupted (Ctrl-C: the pilot is stopped, what ran is kept, and the summary says
    how to go on). A run that was interrupted, killed, or whose pilot ended (its walltime)
    goes on with --resume SESSION_DIR: what was canceled runs again, what finished does not.
    """
    from .. import states as S
    from .._errors import PilotfishError
    from ..client import PilotManager, Session, TaskManager
    from ..client.progress import wait_with_progress
    from ..client.session import new_session_uid

    w = load_workload(workload)
    t0 = time.time()
    session = pilot = policy = None
    tasks: list = []  # the latest run of each task of the workload, in order
    interrupted = timed_out = False
    try:
        uid = new_session_uid()
        try:
            if resume:
                session = Session(path=resume, resume=True)
            elif sessions:
                session = Session(path=os.path.join(sessions, uid), uid=uid)
            else:
                session = Session()
        except PilotfishError as e:
            raise BadInput(str(e)) from None
        with session:
            try:  # (a full disk is a SessionError here: exit 2 with its path, no traceback)
                pmgr = PilotManager(session)
                tmgr = TaskManager(session)
                if w.autoalloc is not None:  # pilots of w.pilot as the tasks need them
                    policy = pmgr.autoalloc(w.pilot, **w.autoalloc)
                    tmgr.add_pilots(policy)
                else:
                    pilot = pmgr.submit_pilots(w.pilot)
                    tmgr.add_pilots(pilot)
                tasks = _submit(session, tmgr, w, bool(resume))
            except (ValueError, PilotfishError) as e:
                raise BadInput(str(e)) from None
            if quiet:
                tmgr.wait_tasks(timeout=timeout)
            else:  # (a resume's bar counts the workload's tasks, not the canceled attempts)
                # (the bar reads counts[state] alone: _CountsLess is that much of a Counter)
                bar = cast("TaskCounts", _LatestRuns(tmgr, tasks))
                wait_with_progress(bar, timeout=timeout)
            timed_out = any(t.state not in S.FINAL for t in tasks)  # (--timeout passed)
            if pilot is not None:
                _let_walltime_end(pilot, tasks)
    except KeyboardInterrupt:
        interrupted = True  # (the session closed on the way out: its tasks are canceled)
    ttx = time.time() - t0
    if session is None:
        click.echo("interrupted before the session started: nothing ran", err=True)
        sys.exit(130)
    if tasks:
        from ..client.reading import OUTPUTS, keep_outputs

        try:
            keep_outputs(session.path, tmgr.get_tasks())
        except OSError as e:
            file = os.path.join(session.path, OUTPUTS)
            click.echo(f"cannot keep the tasks' output in {file}: {e.strerror or e}", err=True)
    counts = {s: 0 for s in (S.DONE, S.FAILED, S.CANCELED)}
    for t in tasks:
        counts[t.state] = counts.get(t.state, 0) + 1
    click.echo(f"session {session.uid}: {session.path}")
    if policy is not None:
        for p in policy.pilots:
            click.echo(f"pilot {p.uid} ({p.description.nodes} nodes, {policy.uid}): {p.state}")
    if pilot is not None:
        click.echo(
            f"pilot {pilot.uid}: {pilot.state}"
            + (f" ({pilot.reason})" if pilot.reason and pilot.state != S.ACTIVE else "")
        )
    click.echo(
        f"tasks: {len(tasks)} total, {counts[S.DONE]} done, {counts[S.FAILED]} failed, "
        f"{counts[S.CANCELED]} canceled, {len(tasks) - sum(counts.values())} unfinished"
    )
    click.echo(f"TTX {ttx:.2f}s, {len(tasks) / ttx:.1f} tasks/s")
    failed = [t for t in tasks if t.state in (S.FAILED, S.CANCELED)]
    # why each ended: the failed ones, and the canceled ones unless the interrupt canceled them
    told = [t for t in failed if t.state == S.FAILED or not interrupted]
    for t in told[:5]:
        click.echo(f"  {t.uid} ({t.name}): {t.state}: {t.reason}", err=True)
    if len(told) > 5:
        click.echo(f"  ... and {len(told) - 5} more", err=True)
    ran = [t for t in failed if t.state == S.FAILED]
    if ran:
        click.echo(
            f"what they printed: pilotfish logs {shlex.quote(session.path)} "
            f"{' '.join(t.uid for t in ran[:5])}{' ...' if len(ran) > 5 else ''}",
            err=True,
        )
    if interrupted or counts[S.CANCELED] or counts[S.DONE] + counts[S.FAILED] < len(tasks):
        again = len(tasks) - counts[S.DONE] - counts[S.FAILED]
        cmd = (
            ["pilotfish", "run"]
            + (["-q"] if quiet else [])
            + (["--timeout", f"{timeout:g}"] if timeout is not None else [])
            + (["--report"] if make_report else [])
            + ["--resume", session.path, os.path.abspath(workload)]
        )
        click.echo(
            (
                "interrupted: "
                if interrupted
                else f"--timeout {timeout:g}s passed: "
                if timed_out and timeout is not None
                else ""
            )
            + f"{again} task(s) canceled or not finished; to run them (and only them), "
            f"go on with:\n  {' '.join(shlex.quote(c) for c in cmd)}"
        )
    if make_report and not interrupted:
        from ..analytics.report import report_main

        report_main(session.path, None, as_json=False)
    if interrupted:
        sys.exit(130)
    if failed or counts[S.DONE] < len(tasks):
        sys.exit(1)


class _LatestRuns:
    """The task manager as the progress bar reads it (client/progress.py's TaskCounts), with
    only the latest run of each task of the workload counted: on a resume, a run that was
    canceled and is submitted again counts once (the summary's total), not twice."""

    def __init__(self, tmgr, latest: list) -> None:
        from collections import Counter

        mine = {id(t) for t in latest}
        self._tmgr = tmgr
        self._latest = latest
        # the superseded runs: ended (CANCELED) before this run submitted them again
        self._minus = Counter(t.state for t in tmgr.get_tasks() if id(t) not in mine)
        self.counts = _CountsLess(tmgr.counts, self._minus)

    def __len__(self) -> int:
        return len(self._latest)

    def wait_tasks(self, uids=None, state=None, timeout=None) -> list[str]:
        return self._tmgr.wait_tasks(uids, state, timeout=timeout)

    def get_tasks(self, uids=None) -> list:
        return list(self._latest) if uids is None else self._tmgr.get_tasks(uids)


class _CountsLess:
    def __init__(self, counts, minus) -> None:
        self._counts, self._minus = counts, minus

    def __getitem__(self, state: str) -> int:
        return self._counts[state] - self._minus.get(state, 0)


def _let_walltime_end(pilot, tasks) -> None:
    """When tasks ended undone and the pilot's walltime is up, its agent is stopping on its
    own: wait (bounded) for the pilot to end, so that the summary says why it ended rather
    than the session closing it (and no shutdown goes to an agent already gone)."""
    from .. import states as S

    if pilot.state in S.FINAL or all(t.state == S.DONE for t in tasks):
        return
    launched = next((t for state, t in pilot.history if state == S.LAUNCHING), None)
    runtime = pilot.description.runtime
    # the agent drains this long before its walltime (agent/walltime.py, drain_margin); it
    # started after the client launched it: its drain is no earlier than this
    margin = min(60.0, max(1.0, 0.1 * runtime))
    if launched is not None and time.time() >= launched + runtime - margin:
        pilot.wait(timeout=margin + 15.0)


RUN_STATE = "run.json"  # in the session directory: what `pilotfish run --resume` reads


def _runs_again(task) -> bool:
    """Whether a resume submits this latest run of a task once more: it was CANCELED (an
    interrupt, a --timeout, the pilot's end) or the pilot's walltime killed it."""
    from .. import states as S

    return task.state == S.CANCELED or (
        task.state == S.FAILED and (task.reason or "").startswith(S.WALLTIME_KILLED)
    )


def _submit(session, tmgr, w, resume: bool) -> list:
    """Submit the workload's tasks; returns the latest run of each, in order. On a resume,
    the tasks the session's journal holds are matched again (what finished stays finished)
    and each task whose latest run was CANCELED (an interrupt, a --timeout, the pilot's
    walltime) is submitted once more; RUN_STATE keeps which task each such run is of, so a
    later resume submits the same tasks in the same order (the journal's contract)."""
    from .._util import read_private, write_private

    descs = w.descriptions()
    state_path = os.path.join(session.path, RUN_STATE)
    reruns: list[int] = []  # for each task submitted after the workload's: its index there
    if resume:
        try:
            reruns = _json.loads(read_private(state_path))["reruns"]
        except FileNotFoundError:
            reruns = []
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BadInput(
                f"{state_path}: cannot read what the run submitted: "
                f"{getattr(e, 'strerror', None) or e}"
            ) from None
        if not (
            isinstance(reruns, list) and all(type(k) is int and 0 <= k < len(descs) for k in reruns)
        ):
            raise BadInput(
                f"{state_path}: reruns = {short(reruns)}: not indices of the "
                f"{len(descs)} tasks of {w.source}"
            )
    runs = tmgr.submit_tasks(descs)
    if reruns:
        runs += tmgr.submit_tasks([descs[k] for k in reruns])
    latest = list(runs[: len(descs)])
    for k, t in zip(reruns, runs[len(descs) :]):
        latest[k] = t
    again = [k for k, t in enumerate(latest) if _runs_again(t)]
    if again:  # (first said, then submitted: the journal never holds runs this file lacks)
        try:
            write_private(state_path, json.dumps({"reruns": reruns + again}).encode())
        except OSError as e:
            raise BadInput(
                f"{state_path}: cannot write which tasks run again: {e.strerror or e}"
            ) from None
        for k, t in zip(again, tmgr.submit_tasks([descs[k] for k in again])):
            latest[k] = t
    return latest
