"""Text from tasks and peers made inert before it reaches a log, a reason or a terminal.

- `inert(text, limit, keep)`: every control character (C0, DEL, C1), the Unicode line and
  paragraph separators, the bidirectional controls and lone surrogates written as escapes
  (`\\n`, `\\r`, `\\t`, `\\xNN`, `\\uNNNN`), but those named in `keep` (a task's multi-line
  output keeps newline and tab); cut to `limit` characters, saying how many were cut. Nothing
  it returns can end a log line, start a terminal sequence (CSI, OSC: a title, a clipboard) or
  reorder what is shown.
- `one_line(text)`: a task's reason (agent/table.py), a line of `pilotfish logs`: inert, one
  line, at most REASON_MAX characters.
- `LogGuard`: the filter on the agent's and the node executors' log handler. Each record's
  message is made inert and cut to LINE_MAX characters, its traceback's lines too (indented:
  none of them can pass for a record); each call site (file and line) may write BURST lines at
  once, then RATE a second (a token bucket); what a site drops is said once per INTERVAL, "N
  lines like <template> dropped in the last Xs", and at the log's close.
- `open_log(fd)`: the agent's and a node executor's logging: the stream on `fd`, the format,
  the guard.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable

LINE_MAX = 2048  # characters of one log record's message
TRACE_MAX = 16384  # characters of one record's traceback (its end is kept)
REASON_MAX = 4096  # characters of a task's reason
BURST = 100  # lines one call site may log at once...
RATE = 10.0  # ...and then a second
INTERVAL = 10.0  # seconds between two summaries of what one call site dropped
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_UNSAFE = (
    "\x00-\x1f\x7f-\x9f"  # C0, DEL, C1 (CSI, OSC, NEL: 0x9b, 0x9d, 0x85)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks and overrides
    "\u2028\u2029"  # line and paragraph separators (str.splitlines ends lines there)
    "\ud800-\udfff"  # lone surrogates: no UTF-8 stream can write them
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_patterns: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    p = _patterns.get(keep)
    if p is None:
        bad = re.compile(f"[{_UNSAFE}]")
        if any(bad.fullmatch(c) is None for c in keep):
            raise ValueError(f"keep={keep!r}: only control characters can be kept")
        p = re.compile(f"(?![{re.escape(keep)}])[{_UNSAFE}]" if keep else f"[{_UNSAFE}]")
        _patterns[keep] = p
    return p


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def inert(text: str, limit: int | None = None, keep: str = "") -> str:
    """`text` with every control character but those in `keep` escaped (see the module), cut
    to `limit` characters (the escapes counted) with "... (N characters cut)" after it."""
    if not isinstance(text, str):
        text = str(text)
    pattern = _pattern(keep)
    cut = 0
    if limit is not None and len(text) > limit:
        cut, text = len(text) - limit, text[:limit]  # (no escaping of a megabyte just to cut it)
    if not (text.isascii() and text.isprintable()):
        text = pattern.sub(_escape, text)
    if limit is not None and len(text) > limit:
        cut += len(text) - limit  # (escapes grew it: cut again, the rest counted in input chars)
        text = text[:limit]
    return f"{text}... ({cut} characters cut)" if cut else text


def one_line(text: str | None, limit: int = REASON_MAX) -> str | None:
    """A reason or any one-line text from a task or a peer: inert, nothing kept, bounded."""
    return None if text is None else inert(text, limit)


class _Site:
    __slots__ = ("tokens", "seen", "dropped", "since", "template", "name")

    def __init__(self, now: float, template: str, name: str):
        self.tokens = float(BURST)
        self.seen = now  # when the bucket was last filled
        self.dropped = 0
        self.since = 0.0  # when this site's dropping began (its summary's interval)
        self.template = template
        self.name = name


class LogGuard(logging.Filter):
    """See the module. `emit` writes a summary record (the guarded handler's `handle`)."""

    def __init__(
        self,
        emit: Callable[[logging.LogRecord], object],
        clock: Callable[[], float] = time.monotonic,
        burst: int = BURST,
        rate: float = RATE,
        interval: float = INTERVAL,
    ):
        super().__init__()
        self._emit = emit
        self._clock = clock
        self._burst, self._rate, self._interval = float(burst), rate, interval
        self._sites: dict[tuple[str, int], _Site] = {}
        self._dropping: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_pilotfish_summary", False):
            return True  # (ours: already inert)
        now = self._clock()
        key = (record.pathname, record.lineno)
        with self._lock:
            site = self._sites.get(key)
            if site is None:
                template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
                site = self._sites[key] = _Site(now, template, record.name)
            site.tokens = min(self._burst, site.tokens + (now - site.seen) * self._rate)
            site.seen = now
            due = self._due(now) if self._dropping else []
            keep = site.tokens >= 1.0
            if keep:
                site.tokens -= 1.0
            else:
                if not site.dropped:
                    site.since = now
                    self._dropping.add(key)
                site.dropped += 1
        for summary in due:
            self._emit(summary)
        if keep:
            _make_inert(record)
        return keep

    def _due(self, now: float, every: bool = False) -> list[logging.LogRecord]:
        out = []
        for key in list(self._dropping):
            site = self._sites[key]
            if every or now - site.since >= self._interval:
                out.append(self._summary(key, site, now))
                site.dropped = 0
                self._dropping.discard(key)
        return out

    def _summary(self, key: tuple[str, int], site: _Site, now: float) -> logging.LogRecord:
        r = logging.LogRecord(
            site.name,
            logging.WARNING,
            key[0],
            key[1],
            "%d lines like %s dropped in the last %.1fs (%s:%d logs at most %d at once, "
            "then %g a second)",
            (
                site.dropped,
                inert(repr(site.template), 200),
                now - site.since,
                os.path.basename(key[0]),
                key[1],
                self._burst,
                self._rate,
            ),
            None,
        )
        r.__dict__["_pilotfish_summary"] = True  # (the filter's own mark: already inert)
        return r

    def summarize(self) -> None:
        """Write the summary of every site that has dropped lines since its last one."""
        with self._lock:
            due = self._due(self._clock(), every=True)
        for summary in due:
            self._emit(summary)


def _make_inert(record: logging.LogRecord) -> None:
    """The record's message rendered, made inert and cut; its traceback likewise, indented."""
    try:
        msg = record.getMessage()
    except Exception as e:  # noqa: BLE001 -- a bad format must not raise where the log call was
        msg = f"(unformattable log message {record.msg!r} % {record.args!r}: {e})"
    record.msg, record.args = inert(msg, LINE_MAX), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = _block(record.exc_text)
    if record.stack_info:
        record.stack_info = _block(record.stack_info)


def _block(text: str) -> str:
    """A multi-line text under a record (a traceback): inert but its newlines, its end kept,
    every line indented (none can pass for a record of its own)."""
    cut = len(text) - TRACE_MAX
    if cut > 0:
        text = f"({cut} characters cut)\n" + text[cut:]
    return "\n".join("  " + line for line in inert(text, keep="\n").split("\n"))


class _GuardedStream(logging.StreamHandler):
    """A stream handler whose close writes what its guard still holds back."""

    guard: LogGuard

    def close(self) -> None:
        guard = getattr(self, "guard", None)
        if guard is not None and self.stream is not None and not self.stream.closed:
            guard.summarize()
        super().close()


def open_log(fd: int, level: int = logging.INFO) -> logging.Handler:
    """The process's logging to the file open on `fd` (agent.log, nodes/<node>.log), every
    record through a LogGuard. Returns the handler (on the root logger)."""
    handler = _GuardedStream(os.fdopen(fd, "a", buffering=1))
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.guard = LogGuard(handler.handle)
    handler.addFilter(handler.guard)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return handler
