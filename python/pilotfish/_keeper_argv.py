"""The command that starts a pilot's agent under its keeper: `keeper_argv(CONFIG)`.

Below both layers: the client (client/launching.py) puts it in the pilot's batch job; the
agent's keeper (agent/keeper.py) is the file it names. The client imports nothing of the
agent (it starts the agent as a process), so the command lives here, not in agent/.
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
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent", "keeper.py"),
        cfg_path,
    ]
