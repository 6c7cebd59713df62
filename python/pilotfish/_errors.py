"""Exceptions of the public API."""

from __future__ import annotations


class PilotfishError(Exception):
    """Base class of pilotfish's errors."""


class DescriptionError(PilotfishError, ValueError):
    """An invalid description: names the field, the value and why.

    Raised at construction or at submit, before anything is sent anywhere.
    """

    def __init__(self, kind: str, field: str, value: object, why: str, index: int | None = None):
        self.kind = kind
        self.field = field
        self.value = value
        self.why = why
        self.index = index
        where = f"{kind}[{index}]" if index is not None else kind
        super().__init__(f"{where}.{field} = {value!r}: {why}")


class TimeoutExpired(PilotfishError, TimeoutError):
    """wait_tasks/wait_pilots ran past its timeout."""


class SessionClosed(PilotfishError, RuntimeError):
    """The session was closed; nothing more can be submitted."""
