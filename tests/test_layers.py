"""The shape of the code, checked: contracts that hold between rooms (docs/internals.md).

- Every event name is defined once, in `_events.py`; producers and analytics use the names
  there. A literal event name anywhere else in the package fails here -- but for the places
  listed in NOT_EVENTS, where the same word is something else (a field, a wire tag, a
  protocol message), each with why.
- The agent's rooms (docs/internals.md, "The agent"): its modules import one another without
  a circle; nothing outside agent/ imports an agent module but its public entry points
  (`pilotfish.agent` itself); nothing inside imports the loop (`_main`) but `__main__`; the
  rooms the task table hosts never touch another object's private attribute.
(Statically, from the source: every import statement counts, lazy ones too --
tests/import_graph.py.)
"""

from __future__ import annotations

import ast
import pathlib

from import_graph import find_cycle, import_graph, strongly_connected

from pilotfish import _events as E

PKG = pathlib.Path(__file__).resolve().parents[1] / "python" / "pilotfish"

# (module, word): the word is not an event there
NOT_EVENTS = {
    ("descriptions.py", "partition"): "a key of RADICAL-Pilot's fields mapped to ours",
    ("agent/partition.py", "partition"): "a slot name of Launcher",
    ("agent/tasks.py", "partition"): "a slot name of AgentTask",
    ("rp/_describe.py", "partition"): "a TaskDescription field RP has",
    ("rp/_api.py", "partition"): "a key of task.as_dict() (RP's) and the attribute of pilotfish's Task",
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


def _graph() -> dict[str, set[str]]:
    return import_graph("pilotfish", str(PKG))


def test_agent_modules_import_each_other_without_a_circle():
    graph = _graph()
    agent = {m: {n for n in e if n.startswith("pilotfish.agent")}
             for m, e in graph.items() if m.startswith("pilotfish.agent")}
    assert len(agent) >= 15, sorted(agent)
    cycle = find_cycle(agent)
    assert cycle is None, ("agent/ has an import circle: " + " -> ".join(cycle)
                           + f"; in circles: {strongly_connected(agent)}")


def test_only_the_agents_entry_points_are_imported_from_outside():
    graph = _graph()
    wrong = sorted((m, n) for m, e in graph.items() if not m.startswith("pilotfish.agent")
                   for n in e if n.startswith("pilotfish.agent."))
    assert not wrong, f"agent internals imported from outside agent/: {wrong}"
    loop = sorted(m for m, e in graph.items() if "pilotfish.agent._main" in e)
    assert loop == ["pilotfish.agent.__main__"], loop


def test_hosted_rooms_use_no_private_attribute_of_another_object():
    """functions.py, services.py, supervisor.py (and elastic.py) meet the agent through
    ports.Host: no `other._name` (an object's own `self._name` is fine)."""
    found = []
    for rel in ("agent/functions.py", "agent/services.py", "agent/supervisor.py",
                "agent/elastic.py"):
        tree = ast.parse((PKG / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id == "self":
                    continue
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
    assert not found, "private attributes of other objects:\n" + "\n".join(found)
