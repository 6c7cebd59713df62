"""The client's shape (issue 27): the modules of pilotfish/client/ import one another without
a circle.

The graph is built statically from the source (ast): every import statement anywhere in a
module counts -- at the top, inside a function (a lazy import), under `if TYPE_CHECKING:` --
absolute (`import pilotfish.client.x`, `from pilotfish.client.x import y`) and relative
(`from . import x`, `from .x import y`, `from ..client import x`). A name imported from the
package that is one of its modules is an edge to that module, any other name an edge to the
package's __init__. An agent's message reaches the tasks, the pilots and the service groups
through the session's router (client/_router.py), so none of them needs another in a circle.
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

        def _on(self, msg):
            got.append((self.name, type(msg).__name__))

        def _pilot_final(self):
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
