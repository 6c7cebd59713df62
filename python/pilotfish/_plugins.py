"""Plug-ins: modules named in $PILOTFISH_PLUGINS (comma-separated), imported once, on the
first look at a registry of plug-ins (batch systems: pilotfish.batch; launch methods:
pilotfish.launch), in every process that inherits the variable -- the client, and the agent
and node executors it starts (a batch job exports the client's environment). A plug-in
module registers what it adds when imported, one line each:

    pilotfish.batch.register(dataclasses.replace(pilotfish.batch.slurm.SLURM, name="mine"))
    pilotfish.launch.register(MyLauncher)

A module that cannot be imported is an ImportError naming the variable and the module.
"""

from __future__ import annotations

import importlib
import os

ENV = "PILOTFISH_PLUGINS"
_loaded: set[str] = set()
_seen: list[str | None] = [None]  # the variable's value at the last load


def load() -> None:
    """Import the modules $PILOTFISH_PLUGINS names that are not imported yet."""
    value = os.environ.get(ENV)
    if value == _seen[0] or not value:
        return
    for name in value.split(","):
        name = name.strip()
        if not name or name in _loaded:
            continue
        _loaded.add(name)  # (first: a plug-in that looks at a registry does not recurse)
        try:
            importlib.import_module(name)
        except Exception as e:  # (whatever the module raised: named, chained)
            _loaded.discard(name)
            raise ImportError(f"${ENV}: cannot import plug-in {name!r}: {e}") from e
    _seen[0] = value


__all__ = ["ENV", "load"]
