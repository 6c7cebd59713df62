"""The agent: runs inside the allocation, one per pilot (`python -m pilotfish.agent CONFIG`).

resources (discovery) -> scheduler (policy over the Rust placer) -> executor (launch methods
over the Rust spawner/reaper) -> state updates and events back to the client, in batches.

The public entry points (the only names other rooms use): `python -m pilotfish.agent CONFIG`,
and `keeper_argv(CONFIG)`, the command that starts an agent under its keeper. Nothing here is
imported by the client: it starts the agent as a process.
"""

from __future__ import annotations

import os
import sys


def keeper_argv(cfg_path: str) -> list[str]:
    """The command that starts a pilot's agent under its keeper (agent/keeper.py), which
    outlives it (-I: nothing from the environment or the script's folder on its path)."""
    return [
        sys.executable,
        "-I",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "keeper.py"),
        cfg_path,
    ]
