"""`pilotfish run WORKLOAD`: a pilot (or an allocation policy's pilots) and the workload's
tasks, with live progress and a summary; `--resume SESSION_DIR` goes on with what did not
finish (RUN_STATE keeps which tasks a resume submitted again)."""

from __future__ import annotations

import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, cast

import click

from ._common import BadInput, PathArg, load_workload
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
    from ..client.workload_run import LatestRuns, let_walltime_end, submit_workload

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
                tasks = submit_workload(session.path, tmgr, w, bool(resume))
            except (ValueError, PilotfishError) as e:
                raise BadInput(str(e)) from None
            if quiet:
                tmgr.wait_tasks(timeout=timeout)
            else:  # (a resume's bar counts the workload's tasks, not the canceled attempts)
                # (the bar reads counts[state] alone: LatestRuns.counts is that much of one)
                bar = cast("TaskCounts", LatestRuns(tmgr, tasks))
                wait_with_progress(bar, timeout=timeout)
            timed_out = any(t.state not in S.FINAL for t in tasks)  # (--timeout passed)
            if pilot is not None:
                let_walltime_end(pilot, tasks)
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
