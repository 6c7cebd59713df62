"""What the `pilotfish` commands share: the bad-input error (exit 2), the path argument type,
the workload loader as the commands check a workload, the session-directory check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..workload import Workload


class BadInput(click.ClickException):
    """Bad input of any kind (a workload file, a launch model, an option): one short message
    and exit 2, never a traceback."""

    exit_code = 2


class PathArg(click.Path):
    """click.Path whose errors quote a long path cut (the message stays one line)."""

    def fail(self, message: str, param: Any = None, ctx: Any = None) -> Any:
        if len(message) > 300:
            message = message[:297] + "..."
        super().fail(message, param, ctx)


def short(text: object, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_workload(path: str, check_fit: bool = True) -> Workload:
    """The workload, checked as a submit to its pilot would check it (check_fit=False: the
    caller checks it against another pilot)."""
    from ..workload import load_workload

    try:
        w = load_workload(path)
        if check_fit:
            w.check_fit()
        return w
    except (OSError, ValueError) as e:
        raise BadInput(str(e)) from None


def check_session_dir(session_dir: str) -> None:
    """Refuse what is not a session directory, naming the sessions under it (papercut 3)."""
    from .._session_dirs import not_a_session

    why = not_a_session(session_dir)
    if why:
        raise BadInput(why)
