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
    ("rp/_task.py", "partition"): "a key of task.as_dict() (RP's) and the attribute of pilotfish's Task",
    ("client/task_books.py", "partition"): "a slot name of Task",
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
                "agent/elastic.py", "agent/function_workers.py", "agent/service_groups.py"):
        tree = ast.parse((PKG / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id == "self":
                    continue
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
    assert not found, "private attributes of other objects:\n" + "\n".join(found)


def test_no_import_circle_anywhere_in_the_package():
    """The whole package, lazy imports too: modules import one another without a circle."""
    graph = _graph()
    assert len(graph) >= 100, len(graph)
    cycle = find_cycle(graph)
    assert cycle is None, ("import circle: " + " -> ".join(cycle)
                           + f"; in circles: {strongly_connected(graph)}")


# -- private members stay in their module ---------------------------------------------------
# `x._name` (x not self/cls) or `from m import _name` where `_name` is not defined in this
# module: another module's private member, read or written here. A module's own private
# names (`self._name = ...`, `def _name`, `_name = ...`, __slots__, parameters) are its own
# to use on any object of its classes. Private *modules* (`from . import _wire`) are the
# package's own and fine.
ALLOWED_PRIVATE = {  # (module, name): why it is used across modules
    ("agent/keeper.py", "_exit"): "os._exit: the documented exit of a forked child",
    ("agent/worker.py", "_exit"): "os._exit: the documented exit of a forked child",
    ("amt/_runtime.py", "_exit"): "os._exit: the exit after an MPI_Abort that returned",
    ("agent/task_runner.py", "_replace"): "namedtuple's _replace: public API despite the name",
    # PSI/J (0.9) has no public hook for a failed queue poll: its poll thread's
    # _handle_poll_error fails every job it follows, so psij_job.py puts its own in its place
    # (found with getattr: _queue_poll_thread, _handle_poll_error) and keeps PSI/J's count
    ("batch/psij_job.py", "_poll_error_count"): "PSI/J's poll thread's count of failed polls "
                                                "in a row: no public way to see or bump it",
    # PSI/J (0.9) writes a submit script only inside submit(): render_script (for checks and
    # debugging) prepares its executor the way submit does
    ("batch/psij_job.py", "_ensure_work_dir"): "PSI/J's executor: no public way to render a "
                                               "submit script without submitting",
    ("batch/psij_job.py", "_create_script_context"): "PSI/J's executor: no public way to render "
                                                     "a submit script without submitting",
}
# Temporary: accesses in files others are rewriting. Each line is cleared by its owner; a new
# access fails. (Empty: every module keeps to its own and the protocols' public names.)
PENDING_PRIVATE: dict[str, str] = {}


def _own_names(tree: ast.AST) -> set[str]:
    own: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) \
                and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
            own.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
        elif isinstance(n, ast.arg):
            own.add(n.arg)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) \
                and n.value.startswith("_") and n.value.isidentifier():
            own.add(n.value)  # __slots__ entries
    return own


def private_uses(rel: str, source: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, name) of the other modules' private members this module uses."""
    tree = ast.parse(source)
    own = _own_names(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            name = n.attr
            if not name.startswith("_") or name.startswith("__"):
                continue
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                continue
            if name not in own:
                found.append((n.lineno, name))
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                name = a.name
                if name.startswith("_") and not name.startswith("__") \
                        and name not in modules:
                    found.append((n.lineno, name))
    return found


def test_no_private_member_of_another_module_is_used():
    modules = {p.stem for p in PKG.rglob("*.py")} | {"_core"}
    found = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if rel in PENDING_PRIVATE:
            continue
        for line, name in private_uses(rel, p.read_text(), modules):
            if (rel, name) not in ALLOWED_PRIVATE:
                found.append(f"{rel}:{line}: {name}")
    assert not found, "another module's private member used:\n" + "\n".join(found)


def test_the_private_rule_sees_what_it_must():
    src = ("from .x import _hidden\n"
           "from . import _wire\n"
           "class A:\n"
           "    __slots__ = ('_mine',)\n"
           "    def f(self, other):\n"
           "        self._mine = 1\n"
           "        other._mine = 2\n"      # its own class's member: fine
           "        return other._theirs, self.b._c\n")
    got = private_uses("m.py", src, {"_wire", "x"})
    assert sorted(name for _, name in got) == ["_c", "_hidden", "_theirs"]
    for (rel, name), why in ALLOWED_PRIVATE.items():
        assert (PKG / rel).exists() and why, (rel, name)
    for rel, why in PENDING_PRIVATE.items():
        assert (PKG / rel).exists() and why, rel


def test_no_arrow_between_the_agent_and_the_client():
    """The agent imports nothing of the client, the client nothing of the agent (it starts
    the agent as a process: pilotfish/_keeper_argv.py is the command both layers share)."""
    graph = _graph()

    def within(mod: str, pkg: str) -> bool:
        return mod == pkg or mod.startswith(pkg + ".")

    wrong = sorted(f"{m} -> {n}" for m, e in graph.items() for n in e
                   if (within(m, "pilotfish.agent") and within(n, "pilotfish.client"))
                   or (within(m, "pilotfish.client") and within(n, "pilotfish.agent")))
    assert not wrong, "imports between the agent and the client:\n" + "\n".join(wrong)
