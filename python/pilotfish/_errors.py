"""Exceptions of the public API."""

from __future__ import annotations

import reprlib

_SHOWN_CHARS = 200  # a rejected value is named, not dumped: error messages stay one line


class _ShortRepr(reprlib.Repr):
    """reprlib, minus the ways the builtin repr fails on hostile values."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = self.maxother = 120

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4300 digits raises ValueError (CPython's conversion limit)
        if x.bit_length() > 1000:
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_short = _ShortRepr()


def show(value: object, limit: int = _SHOWN_CHARS) -> str:
    """repr(value), cut to `limit` characters; never raises (huge ints, deep nesting, a
    failing __repr__) and is ASCII-safe for surrogates (repr escapes them)."""
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]  # no repr of a megabyte just to cut it
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<int of {value.bit_length()} bits>"  # its digits say nothing, its size does
    try:
        if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > 64:
            text = _short.repr(value)
        else:
            text = repr(value)
    except Exception:  # noqa: BLE001 -- whatever the object does, the error must still be raised
        try:
            text = _short.repr(value)
        except Exception:  # noqa: BLE001 -- a repr that raises: its type name instead
            text = f"<{type(value).__name__} object>"
    if not isinstance(text, str):
        text = f"<{type(value).__name__} object>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def printable(text: object) -> str:
    """text if it can be written to a UTF-8 stream, else its repr (lone surrogates, non-str)."""
    if isinstance(text, str):
        if text.isascii():
            return text
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    return show(text)


class PilotfishError(Exception):
    """Base class of pilotfish's errors."""


class DescriptionError(PilotfishError, ValueError):
    """An invalid description: names the field, the value and why.

    Raised at construction or at submit, before anything is sent anywhere. The message is
    safe to print whatever the value was (cut to a line, surrogates escaped).
    """

    def __init__(self, kind: str, field: str, value: object, why: str, index: int | None = None):
        self.kind = kind
        self.field = field
        self.value = value
        self.why = why
        self.index = index
        where = f"{kind}[{index}]" if index is not None else kind
        super().__init__(f"{where}.{printable(field)} = {show(value)}: {printable(why)}")


class TimeoutExpired(PilotfishError, TimeoutError):
    """wait_tasks/wait_pilots ran past its timeout."""


class SessionClosed(PilotfishError, RuntimeError):
    """The session was closed; nothing more can be submitted."""


class RemoteError(PilotfishError):
    """A function task's failure that cannot be given as the exception it raised (its class
    is not importable here, or it did not raise: its worker died, it was canceled)."""

    def __init__(self, type_name: str, message: str, traceback: str = ""):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = traceback


class SessionError(PilotfishError, OSError):
    """The session's directory or files cannot be used: a path another user controls, a
    session already open elsewhere, a full or read-only disk. Names the path and the cause;
    `errno` is the cause's (ENOSPC, EROFS, ...) when an OS error was the cause, else None.
    An OSError too, so code that caught the raw error still does."""

    def __init__(self, message: str, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.path = path
        self.errno = errno

    def __reduce__(self):
        return type(self), (str(self), self.path, self.errno)


class JournalError(PilotfishError):
    """A session journal that cannot be trusted to resume from: damaged in the middle (not
    just a last record cut short by a kill), or not a pilotfish journal. Names the file
    (`path`) and the byte `offset` of the first frame that is wrong."""

    def __init__(self, path: str, offset: int, why: str):
        self.path = path
        self.offset = offset
        self.why = why
        super().__init__(
            f"{path}: damaged at byte {offset}: {why}. pilotfish will not guess what ran: "
            f"start a new session (another path) to run everything afresh, keeping this "
            f"directory to look at; or restore the journal from a copy"
        )

    def __reduce__(self):
        return type(self), (self.path, self.offset, self.why)
