"""The client's shape (issue 27): the modules of pilotfish/client/ import one another without
a circle.

The graph is built statically from the source (ast): every import statement anywhere in a
module counts -- at the top, inside a function (a lazy import), under `if TYPE_CHECKING:` --
absolute (`import pilotfish.client.x`, `from pilotfish.client.x import y`) and relative
(`from . import x`, `from .x import y`, `from ..client import x`). A name imported from the
package that is one of its modules is an edge to that module, any other name an edge to the
package's __init__. An agent's message reaches the tasks, the pilots and the service groups
through the session's router (client/_router.py), so none of them needs another in a circle.
Beyond no circle, each module has a floor (FLOORS) and imports only from floors below it.
"""

from __future__ import annotations

import ast
import os

from import_graph import find_cycle, import_graph, strongly_connected, targets

import pilotfish.client

PACKAGE = "pilotfish.client"
CLIENT_DIR = os.path.dirname(pilotfish.client.__file__)


def _short(m: str) -> str:
    return m[len(PACKAGE) + 1:] if m.startswith(PACKAGE + ".") else "__init__"


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The resolver itself: relative, absolute, lazy and TYPE_CHECKING imports are edges."""
    src = ("from __future__ import annotations\n"
           "import typing\n"
           "from . import b\n"
           "from .c import thing\n"
           "import pilotfish.client.d\n"
           "from pilotfish.client import e\n"
           "from .. import client\n"
           "from ..client.f import g\n"
           "if typing.TYPE_CHECKING:\n"
           "    from .h import H\n"
           "def lazy():\n"
           "    from .i import j\n")
    tree = ast.parse(src)
    known = {PACKAGE} | {f"{PACKAGE}.{x}" for x in "abcdefghi"}
    got: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            got |= targets(f"{PACKAGE}.a", False, node, known)
    assert {_short(m) for m in got} == {"b", "c", "d", "e", "__init__", "f", "h", "i"}
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"x"}}) == ["x", "y", "z", "x"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def test_client_modules_import_each_other_without_a_circle():
    graph = import_graph(PACKAGE, CLIENT_DIR)
    assert len(graph) >= 8, sorted(graph)  # (the package was found)
    cycle = find_cycle(graph)
    if cycle is not None:
        edges = "\n".join(f"  {_short(m)} -> {', '.join(sorted(map(_short, graph[m])))}"
                          for m in sorted(graph) if graph[m])
        circles = "; ".join("{" + ", ".join(map(_short, c)) + "}"
                            for c in strongly_connected(graph))
        raise AssertionError(
            "pilotfish/client/ has an import circle: "
            + " -> ".join(map(_short, cycle))
            + f"\nmodules in circles: {circles}\nthe graph:\n{edges}")


# The client's floors, lowest first (docs/internals.md, "The client's rooms"): a module imports
# only from floors below its own. A new module gets a floor here, or this test says so.
FLOORS = [
    # import nothing of the client (resume: a resumed journal; elastic: a pilot's grown units)
    {"_ports", "_bridge", "_calls", "_transitions", "resume", "elastic", "_alloc_core"},
    {"_alloc_sim"},  # the allocation policy on a model of a batch queue
    {"_router", "_registry", "adoption"},  # the plane's parts, meeting through _ports
    {"plane"},
    {"session"},  # the directory, the lock, the plane; a resumed one's journal (resume)
    {"services", "progress", "launching"},  # launching: an agent's config, its job, the watcher
    {"submit"},
    {"_held"},  # an allocation policy's held tasks: submit's pipeline in two halves
    {"task_books"},  # Task and a TaskManager's books (TaskBooks: the tasks' owner)
    {"task"},  # TaskManager: the user's API over its books
    {"autoalloc"},  # the allocation policy's I/O (PilotManager.autoalloc makes one)
    {"_pilot_data"},  # a pilot's staging, venvs (a task of its own), pilot.json
    {"pilot"},  # PilotManager: its pilots' states; launching and resume do the rest
    {"executor", "reading", "workload_run"},  # pilotfish logs, explain; pilotfish run
    {"__init__"},
]


def test_client_modules_import_only_from_the_floors_below():
    graph = import_graph(PACKAGE, CLIENT_DIR)
    floor = {m: i for i, floors in enumerate(FLOORS) for m in floors}
    unplaced = sorted(_short(m) for m in graph if _short(m) not in floor)
    assert not unplaced, f"client modules without a floor in FLOORS: {unplaced}"
    upward = [f"{_short(m)} (floor {floor[_short(m)]}) -> {_short(t)} (floor {floor[_short(t)]})"
              for m in sorted(graph) for t in sorted(graph[m])
              if floor[_short(t)] >= floor[_short(m)]]
    assert not upward, "imports that do not go down a floor:\n" + "\n".join(upward)


def test_every_message_an_agent_sends_has_one_route():
    """The router's table of kinds is the wire's: a new message kind fails here until it has
    a receiver."""
    import typing

    from pilotfish import _wire
    from pilotfish.client._router import ROUTES

    assert set(ROUTES) == set(typing.get_args(_wire.ToClient))
    assert set(ROUTES.values()) == {"tasks", "pilot", "group"}


def test_the_router_hands_each_kind_to_its_receiver():
    from pilotfish import _wire
    from pilotfish.client._router import Router

    got: list = []

    class Tasks:
        def take(self, items):
            got.append(("tasks", list(items)))

    class Group:
        def __init__(self, name):
            self.name = name

        def on(self, msg):
            got.append((self.name, type(msg).__name__))

        def pilot_final(self):
            got.append((self.name, "pilot final"))

    r = Router(Tasks())
    upd = _wire.Updates([_wire.Update("task.000000", "DONE", 1.0)])
    bye = _wire.Bye("pilot.0000", "DONE", "", 1.0)
    ack = _wire.GroupAck("g", "start", 1, None)
    r.dispatch("pilot.0000", upd)  # nobody attached it: dropped
    assert got == []
    r.attach("pilot.0000", lambda msg: got.append(("pilot", type(msg).__name__)))
    r.watch("pilot.0000", lambda msg: got.append(("watcher", type(msg).__name__)))
    r.dispatch("pilot.0000", upd)
    r.dispatch("pilot.0000", bye)
    assert got == [("watcher", "Updates"), ("tasks", upd.items), ("watcher", "Bye"),
                   ("pilot", "Bye")]
    got.clear()
    r.unwatch("pilot.0000")
    r.dispatch("pilot.0000", ack)  # no such group yet: dropped
    assert not r.has_group("pilot.0000", "g")
    r.add_group("pilot.0000", "g", Group("g"))
    r.add_group("pilot.0001", "g", Group("other"))
    assert r.has_group("pilot.0000", "g")
    r.dispatch("pilot.0000", ack)
    r.pilot_final("pilot.0000")
    assert got == [("g", "GroupAck"), ("g", "pilot final")]
    r.drop_group("pilot.0000", "g")
    assert not r.has_group("pilot.0000", "g") and r.has_group("pilot.0001", "g")


def state_writes_outside_move(source: str) -> list[tuple[int, str]]:
    """(line, where) of each write of a `.state` (assignment, augmented or annotated,
    setattr(x, "state", ...), a `state` entry of __dict__) outside a method named `_move` --
    but for `self.state = ...` in __init__, the birth state."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, child.name)
                continue
            targets: list[ast.expr] = []
            if isinstance(child, ast.Assign):
                targets = [t for tg in child.targets
                           for t in (tg.elts if isinstance(tg, ast.Tuple) else [tg])]
            elif isinstance(child, (ast.AugAssign, ast.AnnAssign)):
                targets = [child.target]
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) \
                    and child.func.id == "setattr" and len(child.args) >= 2 \
                    and isinstance(child.args[1], ast.Constant) and child.args[1].value == "state":
                found.append((child.lineno, func or "<module>"))
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "state":
                    birth = func == "__init__" and isinstance(t.value, ast.Name) \
                        and t.value.id == "self"
                    if func != "_move" and not birth:
                        found.append((t.lineno, func or "<module>"))
                elif isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) \
                        and t.slice.value == "state" and isinstance(t.value, ast.Attribute) \
                        and t.value.attr == "__dict__":
                    found.append((t.lineno, func or "<module>"))
            walk(child, func)

    walk(tree, None)
    return found


def test_client_state_changes_only_through_move():
    """Task._move and Pilot._move (guarded by client/_transitions.py's tables) are the only
    writers of a client object's state: a change that skips the guard fails here."""
    found = []
    for name in sorted(os.listdir(CLIENT_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(CLIENT_DIR, name)) as f:
                found += [f"client/{name}:{line} (in {func})"
                          for line, func in state_writes_outside_move(f.read())]
    assert not found, ("a state written outside its owner's _move() (client/_transitions.py):\n"
                       + "\n".join(found))


def test_the_state_write_rule_sees_what_it_must():
    src = ("class T:\n"
           "    def __init__(self):\n"
           "        self.state = 'NEW'\n"        # the birth state: fine
           "    def _move(self, to):\n"
           "        self.state = to\n"           # the owner: fine
           "    def other(self, t, u):\n"
           "        t.state = 'DONE'\n"
           "        self.state, x = 'A', 1\n"
           "        t.state += 'x'\n"
           "        setattr(t, 'state', 'B')\n"
           "        t.__dict__['state'] = 'C'\n"
           "def f(t):\n"
           "    def _move():\n"
           "        t.state = 'D'\n"             # (named _move: the rule trusts the name)
           "    t.state: str = 'E'\n")
    assert [line for line, _ in state_writes_outside_move(src)] == [7, 8, 9, 10, 11, 15]
