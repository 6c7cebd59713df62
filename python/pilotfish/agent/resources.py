"""Resource discovery: which nodes, cores, GPUs and memory a pilot holds.

`discover()` reads what the batch system tells the job (environment variables and node files),
or takes a declared shape for a local or emulated machine. It never probes other nodes: for
batch systems the GPU count and memory of a node come from the variables that carry them, else
from this node (nodes of one allocation are assumed alike), else from the declaration.

Declared numbers (cores_per_node, gpus_per_node, mem_per_node) override what is found on
every node: that is how a pilot fakes larger nodes. `Resources.overrides` names what was
declared instead of found, so that launchers that ask the batch system for resources (srun)
know not to ask it for things it does not have.

Sources (Resources.source):
  local     one node that fits this machine, named by socket.gethostname()
  declared  an emulated machine (more nodes, or nodes larger than this one): node0000, ...
  hostfile  a file of "host slots=N", "host:N" or repeated "host" lines (any resource)
  a batch system's own (its record's `source`, batch/registry.py): what its `nodes` reads
            from the job's environment -- slurm: SLURM_JOB_NODELIST (compressed host list),
            SLURM_JOB_CPUS_PER_NODE, ...; pbs: PBS_NODEFILE (a line per slot), PBS_NUM_PPN or
            NCPUS; lsf: LSB_MCPU_HOSTS ("host n host n ..."), else LSB_DJOB_HOSTFILE / LSB_HOSTS
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from .._batch_env import expand_counts, expand_hostlist, hostfile_nodes
from .._util import machine_shape
from .._wire import NodeInfo
from ..batch.registry import BatchSystem, batch_system, systems


@dataclass
class Resources:
    nodes: list[NodeInfo]
    source: str
    # quantities taken from the declaration rather than found: subset of ("cores", "gpus", "mem")
    overrides: tuple[str, ...] = ()

    @property
    def emulated(self) -> bool:
        """True when every node is this machine or a stand-in for it (tasks run here)."""
        return self.source in ("local", "declared")


def discover(
    resource: str,
    nodes: int | None = None,
    cores_per_node: int | None = None,
    gpus_per_node: int | None = None,
    mem_per_node: int | None = None,
    env: Mapping[str, str] = os.environ,
    hostfile: str | None = None,
) -> Resources:
    """The nodes this pilot holds.

    resource: "local" or a batch system whose record reads its nodes (batch/registry.py;
    "flux" needs a hostfile). A hostfile, when
    given, is the node list whatever the resource. `nodes`, when given for a batch system,
    keeps the first `nodes` nodes found; finding fewer is an error.
    Raises ValueError naming the variable or file and the value that could not be read.
    """
    if resource == "simulated":  # nothing runs: the declared shape, nothing found
        r = _local(nodes, cores_per_node, gpus_per_node, mem_per_node)
        return Resources(
            [NodeInfo(f"node{i:04d}", n.cores, n.gpus, n.mem) for i, n in enumerate(r.nodes)],
            "simulated",
            r.overrides,
        )
    if hostfile is None and resource == "local":
        return _local(nodes, cores_per_node, gpus_per_node, mem_per_node)
    if hostfile is not None:
        found, source = hostfile_nodes(hostfile), "hostfile"
    else:
        try:
            system: BatchSystem | None = batch_system(resource)
        except ValueError:
            system = None
        if system is not None and system.nodes is not None:
            found, source = system.nodes(env), system.node_source
        elif system is not None and system.no_nodes:
            raise ValueError(system.no_nodes)
        else:
            known = ["local"] + [s.name for s in systems() if s.nodes is not None]
            raise ValueError(f"unknown resource {resource!r}; expected one of {', '.join(known)}")
    if nodes is not None:
        if nodes < 1:
            raise ValueError(f"nodes = {nodes}: must be >= 1")
        if len(found) < nodes:
            raise ValueError(
                f"{nodes} nodes requested but {source} gives {len(found)}: "
                f"{', '.join(n.name for n in found[:8])}"
            )
        found = found[:nodes]
    return _override(found, source, cores_per_node, gpus_per_node, mem_per_node)


# -- local and emulated machines ----------------------------------------------------------


def _local(nodes: int | None, cores: int | None, gpus: int | None, mem: int | None) -> Resources:
    m_cores, m_gpus, m_mem = machine_shape()
    n = 1 if nodes is None else nodes
    if n < 1:
        raise ValueError(f"nodes = {n}: must be >= 1")
    c = m_cores if cores is None else cores
    g = m_gpus if gpus is None else gpus
    mb = m_mem if mem is None else mem
    overrides = tuple(
        k for k, v in (("cores", cores), ("gpus", gpus), ("mem", mem)) if v is not None
    )
    fits = n == 1 and c <= m_cores and g <= m_gpus and (m_mem == 0 or mb <= m_mem)
    if fits:
        return Resources([NodeInfo(socket.gethostname(), c, g, mb)], "local", overrides)
    return Resources([NodeInfo(f"node{i:04d}", c, g, mb) for i in range(n)], "declared", overrides)


def _override(
    found: list[NodeInfo], source: str, cores: int | None, gpus: int | None, mem: int | None
) -> Resources:
    out = [
        NodeInfo(
            n.name,
            n.cores if cores is None else cores,
            n.gpus if gpus is None else gpus,
            n.mem if mem is None else mem,
        )
        for n in found
    ]
    overrides = tuple(
        k for k, v in (("cores", cores), ("gpus", gpus), ("mem", mem)) if v is not None
    )
    return Resources(out, source, overrides)


__all__ = ["Resources", "discover", "expand_counts", "expand_hostlist"]
