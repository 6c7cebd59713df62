"""The shape of the code, checked: contracts that hold between rooms (docs/internals.md).

- Every event name is defined once, in `_events.py`; producers and analytics use the names
  there. A literal event name anywhere else in the package fails here -- but for the places
  listed in NOT_EVENTS, where the same word is something else (a field, a wire tag, a
  protocol message), each with why.
"""

from __future__ import annotations

import ast
import pathlib

from pilotfish import _events as E

PKG = pathlib.Path(__file__).resolve().parents[1] / "python" / "pilotfish"

# (module, word): the word is not an event there
NOT_EVENTS = {
    ("descriptions.py", "partition"): "a key of RADICAL-Pilot's fields mapped to ours",
    ("agent/partition.py", "partition"): "a slot name of Launcher",
    ("rp/_describe.py", "partition"): "a TaskDescription field RP has",
    ("client/task.py", "partition"): "a slot name of Task",
    ("analytics/report.py", "partition"): "a table header",
    ("analytics/partitions.py", "partition"): "a DataFrame column",
    ("analytics/session.py", "partition"): "a DataFrame column",
    ("_wire.py", "group_resize"): "the wire tag of GroupResize",
    ("service.py", "refused"): "the registry's answer to a refused announcement",
    ("agent/services.py", "refused"): "the registry's answer to a refused announcement",
    ("insitu/_server.py", "refused"): "a staging server's count of refused handshakes",
}


def _literals(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


def test_event_names_are_defined_once():
    found = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if rel == "_events.py":
            continue
        for node in _literals(p):
            if node.value in E.NAMES and (rel, node.value) not in NOT_EVENTS:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, ("event names written out instead of _events' constants:\n"
                       + "\n".join(found))


def test_the_vocabulary_is_whole():
    """Every name is one constant's; the exceptions still name real events and places."""
    consts = {k: v for k, v in vars(E).items() if k.isupper() and v in E.NAMES}
    assert len(set(consts.values())) == len(consts) == len(E.NAMES)
    for (rel, word), why in NOT_EVENTS.items():
        assert word in E.NAMES and (PKG / rel).exists() and why, (rel, word)
