"""`pilotfish explain SESSION_DIR TASK...`: why each task is where it is -- a live pilot's
agent asked, an ended one's from the session's events (pilotfish.client.reading's
explain_tasks)."""

from __future__ import annotations

import json

import click

from ._common import BadInput, PathArg, check_session_dir


@click.command()
@click.argument("session_dir", type=PathArg(exists=True, file_okay=False))
@click.argument("task", nargs=-1, required=True)
@click.option(
    "--timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to wait for a live pilot's answer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the explanations as JSON.")
def explain(session_dir: str, task: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """Why is TASK where it is? For each TASK uid of SESSION_DIR: where it is (queued,
    placed and waiting for its launcher, running, ended), what it waits for (no node with
    room for a rank now, another task's reservation, its colocation group's node, its
    partition's launcher, a held service view, tasks ahead of it), which nodes could ever
    hold it and the run time the scheduler expects. A live pilot is asked (through a
    request file in its sandbox); a finished one is explained from the session's events."""
    from ..client.reading import SessionReadError, explain_tasks

    check_session_dir(session_dir)
    try:
        out = explain_tasks(session_dir, task, timeout)
    except SessionReadError as e:
        raise BadInput(str(e)) from None
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo("\n\n".join(str(e) for e in out))
