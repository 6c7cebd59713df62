"""resource="lsf": IBM Spectrum LSF, through PSI/J's "lsf" executor; its job's nodes from
LSB_MCPU_HOSTS (_batch_env.lsf_nodes), its tasks launched by jsrun. A project is LSF's `-P`
only (PSI/J's account would add `-G`, a fair-share group, which LSF checks)."""

from __future__ import annotations

from .._batch_env import lsf_nodes
from .registry import BatchSystem, register

LSF = register(
    BatchSystem(
        name="lsf",
        psij_executor="lsf",
        job_name_attribute="lsf.J",
        node_failure_directives=("#BSUB -rn",),  # not rerunnable (no option against the kill)
        project_attribute="lsf.P",
        nodes=lsf_nodes,
        source="lsf",
        default_launcher="jsrun",
        rp_schemes=("lsf",),
    )
)

__all__ = ["LSF"]
