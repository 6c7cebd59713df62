"""direct: spawn every rank here, one process per rank, no launcher and no shell.

The fastest method and the only one with a per-rank environment for free. Valid when every
node of the pilot is this machine:
  - a local pilot, or an emulated (declared) machine whose nodes all stand for this one;
  - nodes named as this host (a hostfile of "localhost slots=...");
  - Slurm nodes whose slurmd runs on this host: Slurm knows where each node really is
    (`scontrol show node`: NodeHostName). Several slurmd on one host (`slurmd -N n1`,
    NodeHostname=<this host>) is how a single machine emulates a cluster -- as the project's
    test Slurm does -- and such nodes are all this machine. Asked once, when the launcher
    is made; on a real cluster the answer names other hosts and direct is refused.

A multi-rank task's ranks are plain processes, so no MPI world: a program known to be MPI is
refused at build, and every rank of any other gets SINGLETON_GUARD, which makes an MPI library
the pilot did not recognise fail in MPI_Init instead of running as a singleton
(launch/mpi_route.py).
"""

from __future__ import annotations

import socket

from .._wire import RankSlot, TaskSpec
from .base import LaunchError, LaunchMethod, ProcSpec, payload_argv, placement_env, probe
from .mpi_check import plain_guard


def local_names() -> set[str]:
    host = socket.gethostname()
    return {host, host.split(".", 1)[0], "localhost", "127.0.0.1"}


def slurm_node_hosts(names: list[str]) -> dict[str, str]:
    """{node name: the host its slurmd runs on} as Slurm knows it ({} when it cannot say)."""
    text = probe(["scontrol", "show", "node", "-o", ",".join(names)])
    hosts = {}
    for line in text.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "NodeName" in fields and "NodeHostName" in fields:
            hosts[fields["NodeName"]] = fields["NodeHostName"]
    return hosts


def remote_nodes(resources) -> list[str]:
    """Names of the pilot's nodes that are not this machine."""
    if getattr(resources, "source", None) in ("local", "declared"):
        return []
    here = local_names()
    remote = [n.name for n in resources.nodes if n.name not in here]
    if remote and resources.source == "slurm":
        hosts = slurm_node_hosts(remote)
        short = {h.split(".", 1)[0] for h in here}
        remote = [n for n in remote if n not in hosts or hosts[n].split(".", 1)[0] not in short]
    return remote


class Direct(LaunchMethod):
    name = "direct"
    mpi_world = "plain"

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        remote = remote_nodes(resources)
        if remote:
            raise LaunchError(
                f"launcher 'direct' starts processes on this host only, but the pilot's "
                f"nodes ({resources.source}) include {', '.join(remote[:4])}"
                f"{', ...' if len(remote) > 4 else ''}: use 'ssh', 'srun' or an MPI launcher"
            )

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        argv = payload_argv(task)
        guard = plain_guard(self, task, sandbox) if len(slots) > 1 else None
        procs = [ProcSpec(argv, placement_env(task, slots, r), r) for r in range(len(slots))]
        if guard:
            for p in procs:
                p.env.update(guard)  # (no MPI world here: launch/mpi_route.py)
        return procs
