"""The simple PMI wire protocol at the byte level: its limits, how a connection's input is cut
into messages, and how answers are written. No state, no I/O (the engine, engine.py, feeds a
connection's buffer through here and dispatches what comes out).

- PMI-1: one line of `key=value` tokens, `cmd=...` first (`cmd=put kvsname=k key=a value=b`),
  ended by a newline; MPICH's multi-line spawn (`mcmd=spawn` ... `endcmd`) is lines too.
- PMI-2: a 6-character decimal length, then that many bytes of `key=value;` tokens
  (`    42cmd=fullinit;pmirank=0;`), `;;` a literal `;` in a value.

A connection speaks PMI-1 lines until its init asks for PMI-2; a line over `max_line` bytes, a
frame announcing more, or input that is neither is PmiProtocolError (parse.py), naming it.
"""

from __future__ import annotations

from collections.abc import Mapping

from .parse import PmiProtocolError, show

# what get_maxes advertises: the numbers MPICH's own hydra gives (the mpich wheel's libmpi is
# proven against them; MPICH splits a longer business card into segments of vallen_max)
KVSNAME_MAX = 256
KEYLEN_MAX = 64
VALLEN_MAX = 1024
MAX_LINE = 64 * 1024  # one PMI-1 line or PMI-2 frame, bytes
MAX_KVS_BYTES = 32 * 1024 * 1024  # one job's key-value space (all nodes' keys), bytes
MAX_OUT = 1024 * 1024  # answers a rank has not read yet, bytes
ENTRY_COST = 32  # bytes charged per key on top of its text (empty-key floods)

LINE = 1  # a PMI-1 line (without its newline)
FRAME = 2  # a PMI-2 frame's body (without its length)


def next_message(buf: bytearray, max_line: int, lines: bool) -> tuple[int, bytes] | None:
    """Take the next complete message off the front of `buf`: (LINE, line) or (FRAME, body);
    None while it is incomplete. `lines`: the connection is inside a PMI-1 spawn (every
    message a line, whatever it starts with). Raises PmiProtocolError for a message over
    `max_line` bytes or one that is neither a PMI-1 line nor a PMI-2 frame."""
    if lines or buf.startswith(b"cmd=") or buf.startswith(b"mcmd="):
        nl = buf.find(b"\n", 0, max_line + 1)
        if nl < 0:
            if len(buf) > max_line:
                raise PmiProtocolError(f"a PMI-1 line longer than {max_line} bytes")
            return None
        line = bytes(buf[:nl])
        del buf[: nl + 1]
        return LINE, line
    if len(buf) < 6:
        if b"\n" in buf:
            raise PmiProtocolError(
                f"malformed: {show(bytes(buf))} is neither a PMI-1 line (cmd=...) nor a PMI-2 frame"
            )
        return None
    head = bytes(buf[:6])
    if not head.strip().isdigit():
        raise PmiProtocolError(
            f"malformed: {show(bytes(buf[:40]))} is neither a "
            "PMI-1 line (cmd=...) nor a PMI-2 frame (6-digit "
            "length)"
        )
    n = int(head)
    if n > max_line:
        raise PmiProtocolError(f"a PMI-2 frame of {n} bytes, over {max_line}")
    if len(buf) < 6 + n:
        return None
    body = bytes(buf[6 : 6 + n])
    del buf[: 6 + n]
    return FRAME, body


def format1(cmd: str, kv: Mapping[str, str]) -> bytes:
    """A PMI-1 answer: `cmd=<cmd> k=v ...` and its newline."""
    return ("cmd=" + cmd + "".join(f" {k}={v}" for k, v in kv.items()) + "\n").encode()


def format2(cmd: str, thrid: str | None, kv: dict[str, str]) -> bytes:
    """A PMI-2 answer: its length, `cmd=<cmd>;k=v;...`, rc=0 unless given (Slurm's libpmi2
    requires it in every answer), the request's thrid last; `;` in a value doubled. (kv
    takes rc and thrid.)"""
    kv.setdefault("rc", "0")
    if thrid is not None:
        kv["thrid"] = thrid
    body = "cmd=" + cmd + ";" + "".join(f"{k}={v.replace(';', ';;')};" for k, v in kv.items())
    return (f"{len(body):6d}" + body).encode()
