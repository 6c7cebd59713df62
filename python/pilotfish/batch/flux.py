"""resource="flux": Flux, through PSI/J's "flux" executor (a jobspec, not a script: no
directives, no custom attributes). A Flux job has no node-list variable: its agent needs a
hostfile or declared nodes. Its tasks are launched by `flux run`."""

from __future__ import annotations

from .registry import BatchSystem, register

FLUX = register(
    BatchSystem(
        name="flux",
        psij_executor="flux",
        psij_script=False,
        # Flux gives a job no node-list variable; `flux resource` would need the broker.
        no_nodes=(
            "resource 'flux': node discovery is not supported; pass a hostfile "
            "(e.g. written by `flux hostlist`) or declare the nodes"
        ),
        default_launcher="flux",
        rp_schemes=("flux",),
    )
)

__all__ = ["FLUX"]
