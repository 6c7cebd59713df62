"""Reading the simple PMI wire protocol (the engine's, engine.py): PMI-1 lines and PMI-2 frames
taken apart into key=value pairs, and the error a rank's bad input raises (its job fails with
it). Every text from a rank that reaches a reason goes through show(): bounded, escaped."""

from __future__ import annotations


class PmiProtocolError(Exception):
    """A rank broke the protocol: its job fails with this reason."""


def need(kv: dict[str, str], key: str, cmd: str) -> str:
    v = kv.get(key)
    if v is None:
        raise PmiProtocolError(f"malformed: cmd={cmd} without {key}=")
    return v


def parse1(line: str) -> dict[str, str]:
    """`cmd=put kvsname=k key=a value=b` -> dict. Values are kept as they came (a backslash
    escapes the next character in MPICH's reader; the ranks that read a value back unescape
    it themselves), tokens split on unescaped spaces."""
    if "\\" in line:
        toks, cur, i = [], [], 0
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                cur.append(line[i : i + 2])
                i += 2
                continue
            if ch == " ":
                toks.append("".join(cur))
                cur = []
            else:
                cur.append(ch)
            i += 1
        toks.append("".join(cur))
    else:
        toks = line.split(" ")
    return pairs(toks, "a PMI-1 line", line)


def parse2(body: str) -> dict[str, str]:
    """`cmd=kvs-put;key=a;value=b;` -> dict; `;;` is a literal `;` in a value (Slurm's
    libpmi2 escapes so)."""
    if ";;" in body:
        toks, cur, i = [], [], 0
        while i < len(body):
            ch = body[i]
            if ch == ";":
                if body.startswith(";;", i):
                    cur.append(";")
                    i += 2
                    continue
                toks.append("".join(cur))
                cur = []
            else:
                cur.append(ch)
            i += 1
        if cur:
            toks.append("".join(cur))
    else:
        toks = body.split(";")
    return pairs(toks, "a PMI-2 frame", body)


def pairs(toks: list[str], where: str, whole: str) -> dict[str, str]:
    """key=value tokens -> dict (the first of a key wins); a token that is not key=value, or
    no cmd=, is PmiProtocolError naming it."""
    kv: dict[str, str] = {}
    for t in toks:
        if not t:
            continue
        k, eq, v = t.partition("=")
        if not eq or not k:
            raise PmiProtocolError(
                f"malformed: token {show(t.encode())} in {where} is not key=value"
            )
        kv.setdefault(k, v)
    if not kv.get("cmd"):
        raise PmiProtocolError(f"malformed: {where} without cmd=: {show(whole.encode())}")
    return kv


def show(b: bytes, limit: int = 80) -> str:
    s = repr(b[:limit])[2:-1]
    return s + (f"...({len(b)} bytes)" if len(b) > limit else "")
