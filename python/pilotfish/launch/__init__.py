"""Launch methods: (task, placement) -> the processes the agent's executor spawns.

    lm = get_launcher("mpirun", resources, options)   # LAUNCHERS: every one, by name
    lm.start(spawn)                          # daemons, if any (prrte's DVM)
    procs = lm.build(task, slots, sandbox)   # [ProcSpec(argv, env, rank)]
    lm.stop()

See base.py for the contract and the environment every rank gets.
"""

from __future__ import annotations

from typing import Any

from .. import _plugins
from ..batch.registry import batch_system
from .aprun import Aprun
from .base import LaunchError, LaunchMethod, ProcSpec, payload_argv, payload_script, placement_env
from .direct import Direct, remote_nodes
from .flux import Flux
from .jsrun import Jsrun
from .mpiexec import Mpiexec
from .mpirun import Mpirun
from .nodes import NodesLaunch
from .pmi import Pmi
from .pmix import Pmix
from .prrte import Prrte
from .srun import Srun
from .ssh import Ssh

# THE list of launch methods (in the order descriptions' errors name them); plug-ins add
# theirs with register() ($PILOTFISH_PLUGINS, _plugins.py). Nothing else lists them
# (tests/test_registries.py).
LAUNCHERS: dict[str, type[LaunchMethod]] = {}


def register(cls: type[LaunchMethod]) -> type[LaunchMethod]:
    """Add (or replace) a launch method under its class's `name`; returns the class (so it
    serves as a decorator). One line per launch method."""
    if not (isinstance(cls, type) and issubclass(cls, LaunchMethod)):
        raise ValueError(f"register: {cls!r} is not a LaunchMethod subclass")
    if not isinstance(cls.name, str) or not cls.name.isidentifier():
        raise ValueError(f"register: {cls.__name__}.name = {cls.name!r} is not an identifier")
    LAUNCHERS[cls.name] = cls
    return cls


for _cls in (Direct, Ssh, Mpirun, Mpiexec, Srun, Prrte, Flux, Jsrun, Aprun, NodesLaunch, Pmi, Pmix):
    register(_cls)


def launchers() -> dict[str, type[LaunchMethod]]:
    """Every registered launch method by name (plug-ins loaded)."""
    _plugins.load()
    return LAUNCHERS


def get_launcher(name: str, resources: Any, options: dict | None = None) -> LaunchMethod:
    """A launch method by name (one of LAUNCHERS: "direct", "ssh", "mpirun", "srun", ...).
    Raises LaunchError for an unknown name or one that cannot work with these resources."""
    cls = launchers().get(name)
    if cls is None:
        raise LaunchError(f"unknown launcher {name!r}; expected one of {', '.join(LAUNCHERS)}")
    return cls(resources, options)


def default_launcher(resource: str, resources: Any) -> str:
    """The pilot's launcher when its description names none: `direct` (the fastest) where every
    node is this machine -- a local or emulated pilot, or batch nodes that are this host (see
    direct.py) -- else the batch system's own launcher (its record's default_launcher)."""
    system = batch_system(resource)
    if system.runs_here or not remote_nodes(resources):
        return "direct"
    return system.default_launcher


def may_span_hosts(resource: str, resources: Any) -> bool:
    """Whether tasks of this pilot may run on another host, now or once it grows: a batch
    pilot whose first nodes are all this host can still grow onto others. The agent's
    sockets that tasks connect to then need TCP, not only ipc."""
    return not batch_system(resource).runs_here or bool(remote_nodes(resources))


def installed_mpi_launcher() -> str | None:
    """The MPI launcher a multi-rank task gets on a local pilot that names none: MPICH's
    mpiexec (hydra) if installed, else Open MPI's mpirun, else PRRTE's (through `prrte`), else
    None (`direct` stays: ranks are plain processes then). Looked up by running each
    candidate's --version: call once, lazily."""
    from .base import find_tool
    from .mpiexec import HYDRA_TOOLS, is_hydra
    from .mpirun import OPENMPI_TOOLS, is_openmpi_launcher

    if find_tool(HYDRA_TOOLS, is_hydra):
        return "mpiexec"
    if find_tool(OPENMPI_TOOLS, is_openmpi_launcher):
        return "mpirun"
    if find_tool(("prte",), None) and find_tool(("prun", "prterun"), None):
        return "prrte"
    return None


__all__ = [
    "installed_mpi_launcher",
    "LAUNCHERS",
    "default_launcher",
    "launchers",
    "may_span_hosts",
    "register",
    "LaunchError",
    "LaunchMethod",
    "ProcSpec",
    "get_launcher",
    "payload_argv",
    "payload_script",
    "placement_env",
]
