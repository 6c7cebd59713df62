"""The batch systems a pilot's `resource` may name: one `BatchSystem` record each, registered
by its own module in batch/ (local.py, slurm.py, pbs.py, lsf.py, flux.py, simulated.py) or by
a plug-in ($PILOTFISH_PLUGINS, _plugins.py). Every place that needs to know something of a
batch system -- the description's check, the PSI/J job, the agent's node discovery and
walltime, its node executors, the default launcher, Pilot.grow, rp's resource schemes --
reads its record here; nothing else lists batch systems (tests/test_registries.py).

Kept cheap to import: no PSI/J, no launch method (the agent reads it too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import _plugins


@dataclass(frozen=True)
class BatchSystem:
    """What pilotfish knows of one batch system (the defaults: a PSI/J batch system with
    none of the extras)."""

    name: str  # the PilotDescription's `resource`
    # the agent runs on this machine, as the client's child (no batch job): local, simulated
    runs_here: bool = False
    # -- the pilot's job (batch/psij_job.py) --
    psij_executor: str | None = None  # PSI/J's executor name; None: no batch job
    psij_script: bool = True  # PSI/J renders a submit script (BatchSchedulerExecutor; not Flux)
    job_name_attribute: str | None = None  # the custom attribute naming the job (the pilot uid)
    node_failure_directives: tuple[str, ...] = ()  # see psij_job.py's docstring
    gpus_attribute: str | None = None  # gpus_per_node as this custom attribute, else PSI/J's
    project_attribute: str | None = None  # project as this custom attribute, else `account`
    job_info: Callable[[str], str] | None = None  # its account of a failed job (native id)
    # -- the agent (agent/resources.py, agent/walltime.py, agent/node_link.py) --
    nodes: Callable[[Mapping[str, str]], list[Any]] | None = None  # the job's nodes, from env
    no_nodes: str = ""  # why `nodes` is None (the error a discovery without a hostfile gets)
    source: str = ""  # Resources.source of nodes found so (launchers read it); default: name
    time_left: Callable[[Mapping[str, str]], float | None] | None = None  # walltime left
    node_executors: bool = False  # its launcher starts node executors on remote nodes
    # -- launching and growing --
    default_launcher: str = "ssh"  # on nodes that are not all this host
    grows: bool = False  # Pilot.grow submits a second job of it (batch/holder.py)
    rp_schemes: tuple[str, ...] = ()  # RADICAL-Pilot's job_manager_endpoint schemes for it

    @property
    def node_source(self) -> str:
        return self.source or self.name


SYSTEMS: dict[str, BatchSystem] = {}


def register(system: BatchSystem) -> BatchSystem:
    """Add (or replace) a batch system; returns it. One line per batch system."""
    name = getattr(system, "name", None)
    if not isinstance(system, BatchSystem) or not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(
            f"register: a BatchSystem with an identifier for its name, not "
            f"{type(system).__name__} named {name!r}"
        )
    SYSTEMS[system.name] = system
    return system


def names() -> tuple[str, ...]:
    """Every registered batch system's name, in registration order (plug-ins loaded)."""
    _plugins.load()
    return tuple(SYSTEMS)


def batch_system(name: str) -> BatchSystem:
    """The record of `name`; ValueError naming the known ones for an unknown name."""
    system = SYSTEMS.get(name)
    if system is None:
        _plugins.load()
        system = SYSTEMS.get(name)
    if system is None:
        raise ValueError(f"unknown resource {name!r}; expected one of {', '.join(names())}")
    return system


def systems() -> tuple[BatchSystem, ...]:
    """Every registered record (plug-ins loaded)."""
    _plugins.load()
    return tuple(SYSTEMS.values())


__all__ = ["SYSTEMS", "BatchSystem", "batch_system", "names", "register", "systems"]
