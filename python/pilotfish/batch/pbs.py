"""resource="pbs": PBS Pro / OpenPBS / Torque, through PSI/J's "pbs" executor; its job's
nodes from PBS_NODEFILE (pbs_nodes), its tasks launched by mpiexec."""

from __future__ import annotations

from collections.abc import Mapping

from .._batch_env import count_slot_lines, int_var, read_lines
from .._util import machine_shape
from .._wire import NodeInfo
from .registry import BatchSystem, register


def pbs_nodes(env: Mapping[str, str]) -> list[NodeInfo]:
    if "PBS_NODEFILE" not in env:
        raise ValueError("PBS_NODEFILE is not set: not inside a PBS allocation")
    path = env["PBS_NODEFILE"]
    slots = count_slot_lines(read_lines(path, "PBS_NODEFILE"), f"PBS_NODEFILE ({path})")
    # A node file has a line per MPI process (PBS Pro: mpiprocs), which may be fewer than the
    # cores held; PBS_NUM_PPN (Torque) or NCPUS (PBS Pro, cores per chunk) says the cores.
    per_node = None
    for var in ("PBS_NUM_PPN", "NCPUS"):
        if var in env:
            per_node = int_var(env, var)
            break
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, per_node if per_node is not None else n, gpus, mem) for h, n in slots]


PBS = register(
    BatchSystem(
        name="pbs",
        psij_executor="pbs",
        job_name_attribute="pbs.N",
        # not rerunnable; tolerate_node_failures: PBS Pro / OpenPBS 19.1 and later
        node_failure_directives=("#PBS -r n", "#PBS -W tolerate_node_failures=all"),
        nodes=pbs_nodes,
        source="pbs",
        default_launcher="mpiexec",
        rp_schemes=("pbs", "pbspro", "torque"),
    )
)

__all__ = ["PBS", "pbs_nodes"]
