"""JSON read back from files (session.json, session.key, a pilot's agent.json, pilot.json and
keeper.json, run.json, an agent's answer, a resource file): every way such a file can be wrong
is a ValueError. Python's json raises RecursionError for nesting deeper than its recursion
limit (`[[[[...]]]]`), which no reader's `except ValueError` caught: one damaged file stopped a
resume, `pilotfish report` or `explain` with a bare RecursionError. Through `loads`/`load`, a
reader fails alone, with its reason and the file it names, or skips the file as it skips any
other it cannot read."""

from __future__ import annotations

import json
from typing import IO, Any


def loads(data: str | bytes | bytearray) -> Any:
    """json.loads; ValueError (never RecursionError) for text that is not JSON it can read."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested deeper than a JSON file pilotfish reads can be") from None


def load(fh: IO[Any]) -> Any:
    """json.load, through `loads`."""
    return loads(fh.read())
