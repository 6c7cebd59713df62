"""A user's files, read with a bound and named in messages that stay short: the workload file
(workload.py) and a launch model file (_launch_costs.py) read through here, so neither needs
the other.
"""

from __future__ import annotations

from ._errors import printable


class WorkloadError(ValueError):
    """A workload file refused: the message names the file, the place, the value and why."""


def cut(text: str, limit: int = 200) -> str:
    """text, cut to `limit` characters (an error message stays short whatever was given)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_name(path: str) -> str:
    """A file's name for a message: printable and at most 200 characters."""
    return cut(printable(path), 200)


def byte_count(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit} ({n} bytes)"
    return f"{n} bytes"


def read_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of `path`, read no further than `limit` (one byte more, to tell); a
    WorkloadError naming the file if it cannot be read or holds more. `what` names the kind
    of file for the message ("workload file")."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        why = (e.strerror if isinstance(e, OSError) else None) or cut(str(e), 100)
        raise WorkloadError(f"{file_name(path)}: cannot read it: {why}") from None
    if len(data) > limit:
        raise WorkloadError(
            f"{file_name(path)}: larger than {byte_count(limit)}, the most a {what} may hold"
        )
    return data
