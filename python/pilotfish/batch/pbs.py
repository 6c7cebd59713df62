"""resource="pbs": PBS Pro / OpenPBS / Torque, through PSI/J's "pbs" executor; its job's
nodes from PBS_NODEFILE (_batch_env.pbs_nodes), its tasks launched by mpiexec."""

from __future__ import annotations

from .._batch_env import pbs_nodes
from .registry import BatchSystem, register

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

__all__ = ["PBS"]
