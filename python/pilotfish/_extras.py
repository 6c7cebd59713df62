"""Optional dependencies: which extra of `pip install 'pilotfish[...]'` brings which module, and
the one way code that needs one imports it.

The base install (pyproject.toml's `dependencies`) is what `import pilotfish`, the CLI and a
local pilot need. A feature that needs more imports it through `require()` when it is used
(never at `import pilotfish`), so that a missing module fails there with the extra to install:

    vtk = require("vtk", "the isosurface pipeline")
    # MissingExtra: the isosurface pipeline needs vtk, which is not installed in this Python
    #   (/usr/bin/python3): pip install 'pilotfish[insitu]'

EXTRAS and pyproject.toml's [project.optional-dependencies] must agree; tests/test_wheel.py
checks that they do.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# top-level module -> the extra that installs it
EXTRAS = {"vtk": "insitu", "mpi4py": "mpi", "parsl": "parsl"}


class MissingExtra(ModuleNotFoundError):
    """An optional dependency of a pilotfish feature is not installed; the message names the
    feature, the module, this Python and the `pip install 'pilotfish[EXTRA]'` that fixes it.
    A ModuleNotFoundError, so code that handles a missing module handles this one."""


def require(module: str, feature: str) -> ModuleType:
    """`module` imported (a dotted name: its top-level package must be a key of EXTRAS), or
    MissingExtra when its package is not installed. An import error from inside an installed
    package (its own missing dependency, a broken library) is raised unchanged."""
    top = module.partition(".")[0]
    extra = EXTRAS[top]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] != top or isinstance(e, MissingExtra):
            raise
        raise MissingExtra(
            f"{feature} needs {top}, which is not installed in this Python ({sys.executable}): "
            f"pip install 'pilotfish[{extra}]'",
            name=top,
        ) from e
