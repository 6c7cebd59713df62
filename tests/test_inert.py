"""_inert.py alone: escaping, bounds, and the log guard on a real handler (a virtual clock).
The attacks through a real pilot: tests/agent/test_inert_logs.py."""

from __future__ import annotations

import io
import logging

import pytest

from pilotfish import _inert
from pilotfish._inert import LogGuard, inert, one_line


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain text", "plain text"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC
        ("\x1b[2J\x9b31m\x9d0;t\x9c", "\\x1b[2J\\x9b31m\\x9d0;t\\x9c"),  # CSI, C1 CSI/OSC/ST
        ("\x00\x7f\x85", "\\x00\\x7f\\x85"),  # NUL, DEL, NEL
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),  # what splitlines() ends lines at
        ("\u202etxt.exe", "\\u202etxt.exe"),  # a right-to-left override
        ("lone \udc80", "lone \\udc80"),  # (no UTF-8 stream can write it)
        ("été ✓", "été ✓"),  # printable non-ASCII stays
    ],
)
def test_inert_escapes_every_control(raw, shown):
    assert inert(raw) == shown
    assert inert(raw).isprintable()


def test_inert_keeps_what_it_is_told_and_bounds():
    assert inert("a\nb\tc\x1bd\re", keep="\n\t") == "a\nb\tc\\x1bd\\re"
    with pytest.raises(ValueError, match="keep"):
        inert("x", keep="a")
    out = inert("y" * 100_000, 50)
    assert out == "y" * 50 + "... (99950 characters cut)"
    esc = inert("\x07" * 100, 40)  # escapes count against the bound
    assert esc.startswith("\\x07" * 10) and len(esc.split("...")[0]) == 40, esc
    assert one_line(None) is None and one_line("a\nb") == "a\\nb"
    assert len(one_line("z" * 10_000)) < _inert.REASON_MAX + 40


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _logger(clock, **kw):
    stream = io.StringIO()
    h = logging.StreamHandler(stream)
    h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    h.addFilter(LogGuard(h.handle, clock=clock, **kw))
    lg = logging.getLogger(f"test_inert.{id(stream)}")
    lg.propagate = False
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    return lg, stream, h


def _say(lg, text):
    lg.warning("peer said %s", text)  # (one call site)


def test_the_guard_bounds_escapes_and_rate_limits_per_call_site():
    clock = Clock()
    lg, stream, h = _logger(clock, burst=5, rate=2.0, interval=10.0)
    for _ in range(50):
        _say(lg, "x\nWARNING forged: line\x1b]0;t\x07" + "y" * 10_000)
    lg.info("another site, not limited by the first")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6, lines  # the burst, and the other site
    assert all(len(x) < _inert.LINE_MAX + 80 for x in lines)
    assert not [x for x in lines if x.startswith("WARNING forged")]
    assert "x\\nWARNING forged: line\\x1b]0;t\\x07" in lines[0]
    clock.t += 1.0  # two tokens back
    for _ in range(10):
        _say(lg, "again")
    assert stream.getvalue().count("peer said again") == 2
    clock.t += 10.0  # the interval is over: the next record brings the summary first
    lg.info("later")
    tail = stream.getvalue().splitlines()[-2:]
    assert tail[0].startswith("WARNING ") and "53 lines like 'peer said %s' dropped" in tail[0]
    assert tail[1].endswith(": later")
    for _ in range(30):  # dropped lines held back at the close are said there
        _say(lg, "more")
    h.guard = None
    LogGuard.summarize(h.filters[0])
    assert "lines like 'peer said %s' dropped" in stream.getvalue().splitlines()[-1]


def test_a_traceback_is_indented_and_a_bad_format_does_not_raise():
    lg, stream, _ = _logger(Clock())
    try:
        raise ValueError("bad\n2024-01-01 00:00:00,000 WARNING pilotfish.agent: FAKE\x1b[2J")
    except ValueError:
        lg.exception("failed: %s", "it")
    lg.warning("%d items", "not a number")  # (a TypeError in the format: logged, not raised)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"ERROR {lg.name}: failed: it"
    assert all(x.startswith("  ") for x in lines[1:-1]), lines
    assert "\x1b" not in stream.getvalue() and "\\x1b[2J" in stream.getvalue()
    assert "unformattable log message" in lines[-1], lines[-1]


def test_open_log_summarizes_at_close(tmp_path):
    import os

    fd = os.open(tmp_path / "a.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    root = logging.getLogger()
    old = (root.handlers[:], root.level)
    h = _inert.open_log(fd)
    try:
        lg = logging.getLogger("test_inert.open_log")
        for _ in range(_inert.BURST + 7):
            lg.warning("same site %d", 1)
    finally:
        root.removeHandler(h)
        h.close()
        root.handlers[:], root.level = old[0], old[1]
    text = (tmp_path / "a.log").read_text().splitlines()
    assert len(text) == _inert.BURST + 1 and "7 lines like 'same site %d' dropped" in text[-1]
