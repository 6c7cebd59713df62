"""`pilotfish logs SESSION_DIR [TASK]...`: what the tasks printed, and how each ended (read
by pilotfish.client.reading: task_outputs, choose_outputs)."""

from __future__ import annotations

import os

import click

from ._common import BadInput, PathArg, check_session_dir, short


@click.command()
@click.argument("session_dir", type=PathArg(exists=True, file_okay=False))
@click.argument("task", nargs=-1)
def logs(session_dir: str, task: tuple[str, ...]) -> None:
    """Show what the tasks of SESSION_DIR printed, and how each ended: every task, or each
    TASK given (a uid such as task.000003, or a group's name). Any session: run by `pilotfish
    run` or from Python, ended or live (a task that has not ended shows its state; what it
    prints shows once it ends)."""
    from .. import states as S
    from .._inert import inert, one_line
    from ..client.reading import choose_outputs, task_outputs

    check_session_dir(session_dir)
    outs = task_outputs(session_dir, warn=lambda text: click.echo(text, err=True))
    if not outs and not task:
        click.echo(f"no tasks in {session_dir} (yet)")
        return
    chosen = outs
    if task:
        chosen, missing = choose_outputs(outs, task)
        if missing:
            uids = sorted(o.uid for o in outs)
            have = f"{uids[0]}..{uids[-1]}" if uids else "none"
            names = {o.name for o in outs}
            raise BadInput(
                f"{', '.join(short(m, 40) for m in missing[:5])}: no such task or "
                f"group in {session_dir} (its tasks: {have}; its groups: "
                f"{short(', '.join(sorted(n or '' for n in names)), 200)})"
            )
    for o in chosen:
        why = o.reason or (f"exit code {o.exit_code}" if o.exit_code not in (None, 0) else "")
        if o.state not in S.FINAL:
            why = "not ended: what it prints shows once it ends"
        click.echo(one_line(f"== {o.uid} ({o.name}): {o.state}" + (f": {why}" if why else "")))
        for what, text, where in (
            ("stdout", o.stdout, o.stdout_path),
            ("stderr", o.stderr, o.stderr_path),
        ):
            if where is not None:
                click.echo(
                    (one_line(f"-- {what}: written to {where}") or "")
                    + ("" if os.path.isabs(where) else " (in the task's sandbox)")
                )
            elif isinstance(text, str) and text:
                click.echo(f"-- {what}")
                click.echo(inert(text, keep="\n\t"), nl=not text.endswith("\n"))
