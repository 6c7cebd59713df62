"""What a batch job's environment says about its allocation, the parts every batch system
shares: compressed host lists and count lists (Slurm's form, also used elsewhere), host files,
and the readers of variables and node files that each batch system's own module uses (its
node list: batch/slurm.py, pbs.py, lsf.py). Every function raises ValueError naming the
variable or file and the value that could not be read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

from ._util import machine_shape
from ._wire import NodeInfo

# A compressed host list may describe a huge machine; this bounds a typo like n[0-999999999].
MAX_HOSTS = 1_000_000


# -- host lists -----------------------------------------------------------------------------


def expand_hostlist(text: str, what: str = "host list") -> list[str]:
    """Expand a Slurm-style compressed host list, keeping order and zero padding.

    "nid[001-003,010]" -> nid001 nid002 nid003 nid010; "a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4
    (several bracket groups: the cartesian product, first group slowest); "n1,n[3-5],login-7".
    Commas inside brackets separate ranges, outside they separate hosts. `what` names the
    source (e.g. the variable) in the ValueError raised for an empty or garbled list.
    """

    def bad(why: str) -> ValueError:
        return ValueError(f"{what} = {text!r}: {why}")

    if not text or not text.strip():
        raise bad("empty node list")
    hosts: list[str] = []
    for expr in _split_top_level(text, bad):
        expr = expr.strip()
        if not expr:
            raise bad("empty host name (stray comma?)")
        parts: list[list[str]] = []  # literal text and range groups, in order
        pos = 0
        while pos < len(expr):
            open_at = expr.find("[", pos)
            if open_at < 0:
                parts.append([expr[pos:]])
                break
            close_at = expr.find("]", open_at)
            if close_at < 0:
                raise bad(f"unclosed '[' in {expr!r}")
            if "[" in expr[open_at + 1 : close_at]:
                raise bad(f"nested '[' in {expr!r}")
            parts.append([expr[pos:open_at]])
            parts.append(_expand_ranges(expr[open_at + 1 : close_at], bad))
            pos = close_at + 1
        count = 1
        for p in parts:
            count *= len(p)
        if len(hosts) + count > MAX_HOSTS:
            raise bad(f"more than {MAX_HOSTS} hosts")
        hosts.extend("".join(combo) for combo in itertools.product(*parts))
    for h in hosts:
        if not h or any(ch.isspace() for ch in h):
            raise bad(f"bad host name {h!r}")
    return hosts


def _split_top_level(text: str, bad) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise bad("unmatched ']'")
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise bad("unclosed '['")
    out.append(text[start:])
    return out


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_ranges(body: str, bad) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        m = _RANGE.match(item)
        if not m:
            raise bad(f"bad range {item!r} in [{body}]")
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s if hi_s is not None else lo_s)
        if hi < lo:
            raise bad(f"range {item!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise bad(f"more than {MAX_HOSTS} hosts")
        width = len(lo_s)  # Slurm keeps the low bound's width: [08-10] -> 08 09 10
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def expand_counts(text: str, what: str = "count list") -> list[int]:
    """Expand Slurm's per-node count lists: "64(x4),32" -> [64, 64, 64, 64, 32]."""
    out: list[int] = []
    if not text or not text.strip():
        raise ValueError(f"{what} = {text!r}: empty")
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise ValueError(f"{what} = {text!r}: bad item {item!r} (expected N or N(xK))")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


# -- host files -----------------------------------------------------------------------------


def hostfile_nodes(path: str) -> list[NodeInfo]:
    """Lines "host", "host slots=N" (Open MPI), "host:N" (MPICH); '#' starts a comment.

    A host listed on several lines gets the sum of its slots; a bare host counts one slot.
    """
    lines = read_lines(path, "hostfile")
    slots: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        words = line.split()
        host, count = words[0], 1
        if ":" in host:
            host, _, n = host.partition(":")
            if not n.isdigit():
                raise ValueError(f"hostfile {path}:{lineno}: bad slot count in {line!r}")
            count = int(n)
        for w in words[1:]:
            key, _, val = w.partition("=")
            if key in ("slots", "max_slots", "max-slots"):
                if not val.isdigit():
                    raise ValueError(f"hostfile {path}:{lineno}: bad {key} in {line!r}")
                if key == "slots":
                    count = int(val)
            # other keys (e.g. Open MPI's rank/cpu hints) are not placement we use
        if not host:
            raise ValueError(f"hostfile {path}:{lineno}: no host name in {line!r}")
        slots[host] = slots.get(host, 0) + count
    if not slots:
        raise ValueError(f"hostfile {path}: no hosts")
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, n, gpus, mem) for h, n in slots.items()]


def read_lines(path: str, what: str) -> list[str]:
    """Non-empty lines without comments."""
    try:
        with open(path) as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{what} = {path!r}: cannot read ({e.strerror})") from None
    lines = [ln.split("#", 1)[0].strip() for ln in raw.splitlines()]
    return [ln for ln in lines if ln]


def count_slot_lines(lines: Iterable[str], what: str) -> list[tuple[str, int]]:
    """One line (or word) per slot -> [(host, slots)] in order of first appearance."""
    counts: dict[str, int] = {}
    for ln in lines:
        host = ln.split()[0]
        counts[host] = counts.get(host, 0) + 1
    if not counts:
        raise ValueError(f"{what}: no hosts")
    return list(counts.items())


# -- shared by the batch systems' readers ----------------------------------------------


def int_var(env: Mapping[str, str], var: str) -> int:
    value = env[var]
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(f"{var} = {value!r}: not an integer") from None
    if n < 0:
        raise ValueError(f"{var} = {value!r}: must be >= 0")
    return n
