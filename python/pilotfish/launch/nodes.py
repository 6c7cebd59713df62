"""nodes: a single-node task's ranks as plain processes (as `direct`), spawned by the node
executor of the node it was placed on (agent/node_executor.py), or by the agent's own core when that
node is the agent's. No launcher process per task: the executors are started once per node,
in one launcher step, by the agent's NodeStarter (agent/node_link.py), which this method is given
when the agent makes it. A pilot on other hosts routes every single-node task that names no
launcher here; naming it on a pilot without executors fails the task with why. A multi-rank
task: a program known to be MPI is refused at build (its ranks would be singletons), any
other's ranks get SINGLETON_GUARD (launch/mpi_route.py).

Emulated executors (option `emulate`, a local pilot's: agent/node_emulated.py): every declared
node of the partition is one, started as one step of `emulate_procs` processes (default: one
per EMULATE_PER_PROC nodes) instead of srun; a task's `duration`, when it has one, goes with
its spawn (PILOTFISH_EMULATED_DURATION) and is how long its processes "run" there.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Protocol

from .base import LaunchError, LaunchMethod, ProcSpec, payload_argv, placement_env
from .direct import remote_nodes
from .mpi_check import plain_guard

EMULATE_PER_PROC = 2500  # emulated nodes per process (two descriptors each)
DURATION_ENV = "PILOTFISH_EMULATED_DURATION"  # (agent/node_emulated.py reads it)


def executor_step(names: list[str], options: dict, config: str) -> tuple[list[str], dict]:
    """The batch system's launcher step that starts a node executor on each of these nodes
    (argv, extra environment): one Slurm step, one task per node, that outlives a dead node
    (--no-kill) and a rank's bad exit, without an MPI plugin of its own. Its stdin is the
    descriptor 3 it is started with, forwarded to every executor (--input=all): the agent's
    pipe holding the step secret, from which each derives its key (agent/node_keys.py).
    With option `emulate`: one process that reads the secret and forks the processes of the
    emulated executors (agent/node_emulated.py), on this host."""
    python = str(options.get("python") or sys.executable)
    if options.get("emulate"):
        procs = options.get("emulate_procs") or -(-len(names) // EMULATE_PER_PROC)
        argv = ["/bin/sh", "-c", 'exec "$0" "$@" <&3 3<&-', python, "-m"]
        argv += ["pilotfish.agent.node_emulated", config, "--procs", str(int(procs)), *names]
        return argv, {}
    argv = ["/bin/sh", "-c", 'exec "$0" "$@" <&3 3<&-', str(options.get("srun") or "srun")]
    jobid = options.get("jobid") or os.environ.get("SLURM_JOB_ID")
    if jobid:
        argv.append(f"--jobid={jobid}")
    argv += [
        "--overlap",
        f"--nodes={len(names)}",
        f"--ntasks={len(names)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(names)}",
        "--cpus-per-task=1",
        "--kill-on-bad-exit=0",
        "--no-kill",
        "--input=all",
        "--mpi=none",  # (its tasks' PMI is the executors' own: agent/pmi/node.py)
        python,
        "-m",
        "pilotfish.agent.node_executor",
        config,
    ]
    return argv, {"SLURM_OVERLAP": "1"}


class NodeStarter(Protocol):
    """What the method needs of the agent's node executors."""

    nodes: dict[str, Any]  # node name -> state with .lost (why, or None)

    def start(self, names: list[str], spawn: Callable, starter: Any, options: dict) -> None:
        """Start executors on these nodes (one launcher step); their hellos come later."""

    def waiting(self, starter: Any) -> list[str]:
        """The nodes this starter started whose executors have not said hello yet."""

    def stop(self, reason: str, starter: Any) -> None:
        """Ask the executors this starter started to stop what runs and exit."""


class NodesLaunch(LaunchMethod):
    """Launch method `nodes`: a single-node task's ranks as plain processes (as `direct`),
    spawned by the node's executor -- or by the agent's own core on the agent's node."""

    name = "nodes"
    node_link = True
    mpi_world = "plain"

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.link: NodeStarter | None = None  # the agent's (agent/node_link.py), set when made
        self.emulate = bool(self.options.get("emulate"))
        if self.emulate and not getattr(resources, "emulated", False):
            raise LaunchError(
                "launcher 'nodes': option emulate=True emulates the executors of a local "
                f"pilot's declared nodes; this pilot's nodes are {resources.source}'s"
            )
        procs = self.options.get("emulate_procs")
        if procs is not None and (type(procs) is not int or procs < 1):
            raise LaunchError(
                f"launcher 'nodes': option emulate_procs = {procs!r}: must be a whole number "
                "of processes >= 1 (the emulated executors' processes per partition)"
            )
        # (Slurm nodes whose slurmd is here are not remote; emulated ones all are)
        self.remote = [n.name for n in resources.nodes] if self.emulate else remote_nodes(resources)
        self._away = set(self.remote)
        self._begun = False

    def begin(self, spawn=None) -> None:
        if self.link is None:
            raise LaunchError(
                "launcher 'nodes' runs tasks through node executors, which only "
                "a batch pilot on other hosts has: use 'direct' here"
            )
        if self.remote:
            if spawn is None:
                raise LaunchError("launcher 'nodes' starts executors: begin() needs spawn")
            self.link.start(self.remote, spawn, self, self.options)
        self._begun = True

    def poll_ready(self) -> bool:
        """Ready once every node's executor said hello or was given up on (lost); failed
        when none of them started."""
        if self.link is None:
            return True
        if self.link.waiting(self):
            return False
        if self.remote and all(self.link.nodes[n].lost for n in self.remote):
            raise LaunchError(f"no node executor started: {self.link.nodes[self.remote[0]].lost}")
        return True

    def build(self, task, slots, sandbox) -> list[ProcSpec]:
        nodes = {s.node for s in slots}
        if len(nodes) != 1:
            raise LaunchError(
                f"launcher 'nodes' runs tasks on one node; this one spans {len(nodes)}"
            )
        (node,) = nodes
        where = node if node in self._away else None
        argv = payload_argv(task)
        guard = plain_guard(self, task, sandbox) if len(slots) > 1 else None
        procs = [
            ProcSpec(argv, placement_env(task, slots, r), r, node=where) for r in range(len(slots))
        ]
        if guard:
            for p in procs:
                p.env.update(guard)  # (no MPI world here: launch/mpi_route.py)
        if self.emulate and task.duration is not None:
            for p in procs:
                p.env[DURATION_ENV] = repr(float(task.duration))
        return procs

    def stop_begin(self) -> None:
        if self._begun and self.link is not None:
            self.link.stop("its partition stops", self)
