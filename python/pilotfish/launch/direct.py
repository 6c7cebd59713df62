"""direct: spawn every rank here, one process per rank, no launcher and no shell.

The fastest method and the only one with a per-rank environment for free. Valid when every
node of the pilot is this machine: a local pilot, an emulated (declared) machine whose nodes
all stand for this one, or nodes that are named as this host.
"""

from __future__ import annotations

import socket

from .._wire import RankSlot, TaskSpec
from .base import LaunchError, LaunchMethod, ProcSpec, payload_argv, placement_env


def local_names() -> set[str]:
    host = socket.gethostname()
    return {host, host.split(".", 1)[0], "localhost", "127.0.0.1"}


class Direct(LaunchMethod):
    name = "direct"

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        if not self.emulated:
            here = local_names()
            remote = [n.name for n in resources.nodes if n.name not in here]
            if remote:
                raise LaunchError(
                    f"launcher 'direct' starts processes on this host only, but the pilot's "
                    f"nodes ({resources.source}) include {', '.join(remote[:4])}"
                    f"{', ...' if len(remote) > 4 else ''}: use 'ssh', 'srun' or an MPI launcher")

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        argv = payload_argv(task)
        return [ProcSpec(argv, placement_env(task, slots, r), r) for r in range(len(slots))]
