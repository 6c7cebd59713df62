"""ssh: one `ssh <host> <command>` per rank, for nodes without a launcher daemon.

The remote command is `cd <sandbox> && exec env K=V ... <payload>`, every word quoted for the
remote login shell (ssh joins its arguments with spaces and hands them to that shell). Only
the task's and the placement's variables travel; the remote side has its own login
environment. Ranks on an emulated node go to localhost.

options: ssh (command, default "ssh"), ssh_args (extra arguments, e.g. ["-p", "2222"]).
"""

from __future__ import annotations

import shlex

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, payload_argv, placement_env

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]


class Ssh(LaunchMethod):
    name = "ssh"
    mpi_world = "plain"

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ssh = [self._tool("ssh", "ssh"), *SSH_OPTIONS, *map(str, self.options.get("ssh_args", []))]
        payload = " ".join(shlex.quote(w) for w in payload_argv(task))
        procs = []
        for r, slot in enumerate(slots):
            host = "localhost" if self.emulated else slot.node
            env = placement_env(task, slots, r)
            assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
            remote = f"cd {shlex.quote(sandbox)} && exec env {assignments} {payload}"
            procs.append(ProcSpec([*ssh, host, remote], {}, r))
        return procs
