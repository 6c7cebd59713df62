"""One registry per kind of plug-in (docs/internals.md, "How to add a batch system / a launch
method"): launch methods are launch/__init__.py's LAUNCHERS, batch systems the records of
batch/registry.py. A second list of either anywhere in the package fails here:

- a tuple, list, set or dict (its keys) holding 3 or more launch-method names, or 3 or more
  batch-system names, outside the registries;
- a module comparing a value with 3 or more batch-system names (`resource == "slurm"`,
  `elif resource == "pbs"` ...): a list spelled as a chain of branches.

The names are the registries' own, read at test time. ALLOWED lists the exceptions, each
with why (a table of data about some launch methods, not a list of which exist).
"""

from __future__ import annotations

import ast
import os
import pathlib
import re

import pytest

from pilotfish.batch import SYSTEMS
from pilotfish.launch import LAUNCHERS

PKG = pathlib.Path(
    os.environ.get("PILOTFISH_REGISTRY_SCAN")
    or pathlib.Path(__file__).resolve().parents[1] / "python" / "pilotfish"
)

# (module, the line's first words): why it is not a second list
ALLOWED = {
    ("_launch_costs.py", "DEFAULT_MODEL"): "the costs fitted for three methods; every other "
    "registered one gets PRRTE's (_launch_costs._defaults reads the registry)",
}
LAUNCH_NAMES = frozenset(LAUNCHERS)
BATCH_NAMES = frozenset(SYSTEMS)


def _strings(nodes) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def second_lists(pkg: pathlib.Path) -> list[str]:
    """Every place in the package's source that lists launch methods or batch systems."""
    found = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        tree = ast.parse(path.read_text())
        lines = path.read_text().splitlines()
        compared: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                items = _strings(node.elts)
            elif isinstance(node, ast.Dict):
                items = _strings(k for k in node.keys if k is not None)
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                sides += [
                    e
                    for s in sides
                    if isinstance(s, (ast.Tuple, ast.List, ast.Set))
                    for e in s.elts
                ]
                for c in _strings(sides) & BATCH_NAMES:
                    compared.setdefault(c, node.lineno)
                continue
            else:
                continue
            for what, names in (("launch methods", LAUNCH_NAMES), ("batch systems", BATCH_NAMES)):
                hit = items & names
                if len(hit) >= 3:
                    first = re.match(r"\s*(\w*)", lines[node.lineno - 1]).group(1)
                    if (rel, first) not in ALLOWED:
                        found.append(f"{rel}:{node.lineno}: {what} {sorted(hit)}")
        if len(compared) >= 3:
            where = ", ".join(f"{n!r} (line {ln})" for n, ln in sorted(compared.items()))
            found.append(f"{rel}: compares with batch systems {where}")
    return found


def test_nothing_else_lists_launch_methods_or_batch_systems():
    found = second_lists(PKG)
    assert not found, (
        "a second list of launch methods or batch systems (read the "
        "registry instead: docs/internals.md):\n" + "\n".join(found)
    )


def test_the_exceptions_are_live():
    for (rel, first), why in ALLOWED.items():
        assert why and first in (PKG / rel).read_text(), (rel, first)


def test_the_scan_sees_a_second_list(tmp_path):
    """The scan itself: a module with a tuple of batch systems, one of launchers, and a chain
    of comparisons is caught three times; a registry-reading module is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        'KINDS = ("slurm", "pbs", "lsf")\n'
        'MPI = {"srun": 1, "mpiexec": 2, "mpirun": 3}\n'
        "def f(r):\n"
        '    if r == "slurm": return 1\n'
        '    elif r == "pbs": return 2\n'
        '    elif r in ("lsf",): return 3\n'
    )
    (pkg / "good.py").write_text(
        "from pilotfish.batch import batch_system\n"
        "def f(r): return batch_system(r).default_launcher\n"
        'ONE = ("local", "simulated")\n'
    )
    found = second_lists(pkg)
    assert len(found) == 3 and all(f.startswith("bad.py") for f in found), found


@pytest.mark.parametrize("name", sorted(LAUNCH_NAMES))
def test_every_launch_method_is_a_valid_launcher(name):
    import pilotfish as pf

    assert pf.TaskDescription(executable="x", launcher=name).launcher == name
    assert pf.PilotDescription(launcher=name).launcher == name


@pytest.mark.parametrize("name", sorted(BATCH_NAMES))
def test_every_batch_system_is_a_valid_resource(name):
    import pilotfish as pf

    assert pf.PilotDescription(resource=name).resource == name


@pytest.fixture
def registries():
    """The registries as they were, after the test."""
    from pilotfish.batch import SYSTEMS as systems

    before = dict(systems), dict(LAUNCHERS)
    yield
    systems.clear()
    systems.update(before[0])
    LAUNCHERS.clear()
    LAUNCHERS.update(before[1])


def test_a_plugin_module_registers_by_one_line_each(tmp_path, monkeypatch, registries):
    import pilotfish as pf
    from pilotfish.batch import batch_system
    from pilotfish.launch import get_launcher

    (tmp_path / "pf_unit_plugin.py").write_text(
        "import dataclasses\n"
        "from pilotfish import batch, launch\n"
        "from pilotfish.batch.pbs import PBS\n"
        "from pilotfish.launch.ssh import Ssh\n"
        'batch.register(dataclasses.replace(PBS, name="pbs_unit", default_launcher="ssh_unit"))\n'
        'launch.register(type("SshUnit", (Ssh,), {"name": "ssh_unit"}))\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pf.DescriptionError, match="pbs, lsf"):
        pf.PilotDescription(resource="pbs_unit")  # not named yet
    monkeypatch.setenv("PILOTFISH_PLUGINS", " pf_unit_plugin ,")
    d = pf.PilotDescription(
        resource="pbs_unit", launcher="ssh_unit", launcher_options={"ssh_unit": {}}
    )
    assert (d.resource, d.launcher) == ("pbs_unit", "ssh_unit")
    assert batch_system("pbs_unit").psij_executor == "pbs"
    assert "ssh_unit" in pf.descriptions.LAUNCHERS and "pbs_unit" in pf.descriptions.RESOURCES
    assert get_launcher("ssh_unit", None).name == "ssh_unit"


def test_a_plugin_that_cannot_be_imported_is_named(monkeypatch, registries):
    from pilotfish.batch import names

    monkeypatch.setenv("PILOTFISH_PLUGINS", "pf_no_such_plugin_module")
    with pytest.raises(
        ImportError,
        match=r"\$PILOTFISH_PLUGINS: cannot import plug-in "
        r"'pf_no_such_plugin_module'",
    ):
        names()


@pytest.mark.parametrize("bad", ["", "two words", None])
def test_register_refuses_a_nameless_plugin(bad):
    from pilotfish import batch, launch
    from pilotfish.batch.slurm import SLURM
    from pilotfish.launch.srun import Srun
    import dataclasses

    with pytest.raises(ValueError, match="register"):
        batch.register(dataclasses.replace(SLURM, name=bad))
    with pytest.raises(ValueError, match="register"):
        launch.register(type("Bad", (Srun,), {"name": bad}))
    with pytest.raises(ValueError, match="register"):
        launch.register(object)
