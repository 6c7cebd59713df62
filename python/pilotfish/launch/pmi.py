"""pmi: an MPI task's ranks as plain processes, each given its PMI connection by whoever spawns
it -- the node executor of its node (agent/node_executor.py) or the agent itself on the
agent's node -- which serves the simple PMI wire protocol (agent/pmi/). No `srun`, `mpiexec` or
`prterun` per task: a task of the MPICH ABI starts at the executors' speed.

Every rank gets, on top of the placement environment every launcher gives (`PILOTFISH_*`,
`CUDA_VISIBLE_DEVICES`): PMI_FD=3 (the descriptor it inherits: one end of a socketpair whose
other end its node's server holds -- nothing listens on a port), PMI_RANK, PMI_SIZE and
PMI_JOBID (the world's KVS name, 128 random bits, which Slurm's libpmi2 also sends; what
each node's server tells its ranks, and MPICH names its shared memory after, is a fresh
name of that node's own: agent/pmi/node.py). Ranks are numbered by node in
order of first appearance (`by_node`, as `--host h1:n1,h2:n2` launchers number them), so
MPICH's PMI_process_mapping is a few blocks.

Open MPI does not speak this protocol (it needs PMIx): a task that names no launcher goes to
a PRRTE DVM (launch/mpi_route.py), and one of a known Open MPI program that names `pmi` is
refused at build; a Python program that did not choose its library gets MPI4PY_LIBMPI=<its
prefix>/lib/libmpi.so.12. A rank that ends without speaking PMI at all -- a program the pilot
could not read, routed here by `launcher="pmi"` -- fails its task naming it
(agent/pmi/worlds.py): never N singletons.

options: init_timeout (seconds a rank may take to reach PMI init; default 60).
"""

from __future__ import annotations

import itertools
import re
import secrets

from .base import (
    LaunchError,
    LaunchMethod,
    PmiWorld,
    ProcSpec,
    by_node,
    payload_argv,
    placement_env,
)
from .direct import remote_nodes
from .mpi_check import one_world

INIT_TIMEOUT_S = 60.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+-]")


def world_name(uid: str, seq: int) -> str:
    """A task attempt's KVS name: 128 fresh random bits (nobody else can predict it), its uid
    and attempt. Every node's server tells the world's ranks this one name -- MPICH knows a
    rank's world by it, and names its shared memory on each node after it (agent/pmi/node.py)."""
    return f"pf.{secrets.token_hex(16)}.{_UNSAFE.sub('_', uid)[-120:]}.{seq}"


class Pmi(LaunchMethod):
    """Launch method `pmi` (see the module docstring)."""

    name = "pmi"
    node_link = True
    mpi_world = "mpich"  # (mpi_abi.MPICH)

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.link = None  # the agent's node executors (agent/node_link.py), set when made
        self.remote = remote_nodes(resources)
        self._away = set(self.remote)
        self.init_timeout = float(self.options.get("init_timeout", INIT_TIMEOUT_S))
        if not self.init_timeout > 0:
            raise LaunchError(
                f"launcher_options['pmi']['init_timeout']={self.init_timeout!r}: "
                "a positive number of seconds"
            )
        self._seq = itertools.count(1)

    def begin(self, spawn=None) -> None:
        if self.remote and self.link is None:
            raise LaunchError(
                "launcher 'pmi' spawns ranks through node executors, which this pilot does not "
                f"run on {', '.join(self.remote[:4])}: use 'srun' (with launcher_options "
                "{'srun': {'mpi': 'pmi2'}}) or 'mpiexec' there"
            )

    def poll_ready(self) -> bool:
        """Ready once every other node's executor said hello or was given up on; the
        executors are the `nodes` method's (started once per partition)."""
        link = self.link
        if link is None or not self.remote:
            return True
        for n in self.remote:
            node = link.nodes.get(n)
            if node is None or not (node.up or node.lost):
                return False
        return True

    def build(self, task, slots, sandbox) -> list[ProcSpec]:
        task = one_world(self, task, sandbox)  # (an Open MPI program: refused)
        ordered = by_node(slots)
        size = len(ordered)
        world = PmiWorld(
            world_name(task.uid, next(self._seq)), size, tuple(s.node for s in ordered)
        )
        argv = payload_argv(task)
        procs = []
        for r, s in enumerate(ordered):
            env = placement_env(task, ordered, r)
            env.update(
                {
                    "PMI_FD": "3",
                    "PMI_RANK": str(r),
                    "PMI_SIZE": str(size),
                    "PMI_JOBID": world.kvsname,
                }
            )
            procs.append(
                ProcSpec(argv, env, r, node=s.node if s.node in self._away else None, world=world)
            )
        return procs
