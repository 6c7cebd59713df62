"""The import graph of a package, built statically (ast), for the tests of the code's shape
(tests/test_layers.py, tests/client/test_client_shape.py).

Every import statement anywhere in a module counts -- at the top, inside a function (a lazy
import), under `if TYPE_CHECKING:` -- absolute (`import a.b.c`, `from a.b.c import y`) and
relative (`from . import x`, `from .x import y`, `from .. import x`). A name imported from a
package that is one of its modules is an edge to that module, any other name an edge to the
package's __init__.
"""

from __future__ import annotations

import ast
import os


def _modules(package: str, directory: str) -> dict[str, str]:
    """{dotted module name: path} of the package's modules (__init__ as the package)."""
    out = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(root, directory)
        pkg = package if rel == "." else package + "." + rel.replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py"):
                mod = pkg if name == "__init__.py" else f"{pkg}.{name[:-3]}"
            elif name.endswith(".so") or name.endswith(".pyi"):  # an extension (_core): a leaf
                mod = f"{pkg}.{name.split('.')[0]}"
                out.setdefault(mod, "")
                continue
            else:
                continue
            out[mod] = os.path.join(root, name)
    return out


def targets(module: str, is_package: bool, node: ast.AST, known: set[str]) -> set[str]:
    """The modules of `known` that one import statement of `module` imports."""
    found: set[str] = set()

    def nearest(name: str) -> str | None:  # `a.b.c` imports a, a.b and a.b.c: the deepest known
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            cand = ".".join(parts[:i])
            if cand in known:
                return cand
        return None

    if isinstance(node, ast.Import):
        for alias in node.names:
            hit = nearest(alias.name)
            if hit is not None:
                found.add(hit)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            base_parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in known:  # `from . import task`: the module task
                found.add(sub)
                continue
            hit = nearest(base)
            if hit is not None:
                found.add(hit)
    return found


# the package's compiled modules (rust/: pilotfish._core), known whether or not built yet
EXTENSIONS = {"pilotfish": ("_core",)}


def import_graph(package: str, directory: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports} (no self edges)."""
    mods = _modules(package, directory)
    if "." not in package:
        for ext in EXTENSIONS.get(package, ()):
            mods.setdefault(f"{package}.{ext}", "")
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        if not path:  # an extension module: imports nothing of the package
            graph[mod] = set()
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges: set[str] = set()
        is_package = os.path.basename(path) == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= targets(mod, is_package, node, known)
        edges.discard(mod)
        graph[mod] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        color[m] = GREY
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if color.get(n, BLACK) == GREY:
                return stack[stack.index(n):] + [n]
            if color.get(n) == WHITE:
                got = visit(n)
                if got:
                    return got
        stack.pop()
        color[m] = BLACK
        return None

    for m in sorted(graph):
        if color[m] == WHITE:
            got = visit(m)
            if got:
                return got
    return None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles' modules: strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out
