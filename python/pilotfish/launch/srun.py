"""srun (Slurm): one job step per task inside the pilot's allocation.

    srun --jobid=J --nodes=N --ntasks=R --ntasks-per-node=K --nodelist=h1,h2
         --cpus-per-task=C [--gpus-per-task=G] [--mem-per-cpu=M] --exact
         [--kill-on-bad-exit=1] [--mpi=TYPE] --export=ALL <payload>

Each flag, checked against srun(1) of Slurm 22.05 (Debian 12 `slurm-client`):
  --jobid          run the step in the pilot's allocation (SLURM_JOB_ID of the agent).
  --nodes/--nodelist  the nodes the pilot placed the ranks on (-N, -w).
  --ntasks-per-node   with the default block distribution, K consecutive ranks per node:
                   rank order = `by_node` order. Ranks spread unevenly (3 + 1) cannot be said
                   with flags: then `--distribution=arbitrary` with SLURM_HOSTFILE, a file with
                   a line per rank written beside the task (srun rejects --nodes with
                   arbitrary, and --nodelist would replace the file).
  --cpus-per-task, --gpus-per-task  the rank's shape (-c; --gpus-per-task also binds the GPUs
                   and sets CUDA_VISIBLE_DEVICES, so the pilot does not).
  --mem-per-cpu    only when the task asks for memory: ceil(mem_per_rank / cores_per_rank) MiB.
  --exact          the step gets only the resources it asks for, so steps run side by side
                   (by default a step takes every CPU of its nodes).
  --kill-on-bad-exit=1  (-K; a multi-rank task) a rank that exits non-zero ends the step: srun
                   kills the other ranks and exits, so the task FAILS at once. Slurm's default
                   (KillOnBadExit=0) lets the others run on -- an MPI rank then waits in its
                   next collective until the task's timeout. srun's exit status is then the
                   highest over the ranks, a signal above any code (srun(1)): the killed
                   ranks' SIGTERM gives 143, and the failed rank's own code is in srun's
                   stderr ("srun: error: n2: task 1: Exited with exit code 7").
  --mpi            the PMI srun serves the ranks: options["mpi"] when set (it always wins, as
                   does SLURM_MPI_TYPE in the agent's or the task's environment). Else, for a
                   multi-rank task where the cluster's MpiDefault is none, from the task's
                   program (launch/mpi_abi.py): MPICH ABI or not known to be MPI -> "pmi2" when
                   srun offers it (harmless for a program that does not speak PMI), so an
                   MPICH world forms instead of N singletons "rank 0 of 1" ending DONE; an
                   MPICH program without pmi2 is refused. Open MPI -> "pmix" when srun offers
                   it and its plugin loads, else the task is refused at build (Open MPI needs
                   PMIx: use launcher='prrte'). Checked on the project's cluster
                   (scripts/substrates/slurm.sh, Slurm 22.05): `srun --mpi=list` lists pmix
                   (pmix_v4) but the plugin cannot load its PMIx library, so Open MPI is
                   refused; pmi2 works for MPICH + mpi4py.
                   What the cluster offers is learned once per srun command, on the first
                   multi-rank task that needs it, and kept (`slurm_mpi`): MpiDefault from
                   `scontrol show config`, the plugins from `srun --mpi=list`, and whether
                   pmix loads from `srun --mpi=pmix --test-only` (which fails at once when the
                   plugin cannot load; else asks the controller, starting nothing). A Slurm
                   that does not answer (10 s) leaves --mpi out, as before.
  --export=ALL     srun's environment (the ProcSpec env on top of the agent's) goes to the
                   ranks; no values on the command line, so nothing needs quoting.

Nodes faked larger than Slurm knows them (Resources.overrides has "cores"): Slurm cannot
account for them, so steps use --overlap --overcommit and no --cpus-per-task/--exact: the
pilot's accounting is the only one and srun just starts processes. Faked GPUs ("gpus" in
overrides) are not asked of Slurm; the pilot sets CUDA_VISIBLE_DEVICES.

A step that does not fit waits for resources (it does not fail).

The pilot's job has one Slurm task per node (SLURM_NTASKS_PER_NODE=1 etc. in the agent's
environment, which srun reads as defaults): every step says its own --nodes/--ntasks/
--ntasks-per-node, or uses the arbitrary distribution, which ignores them (checked).

A step that could not be created ("srun: error: Unable to create step for job ...", exit 1)
never ran: that launch is retried (`launch_retries`, default 2) when its stderr is captured.

options: srun (command), scontrol (command), jobid (default: SLURM_JOB_ID), mpi (e.g. "pmi2";
"none" turns the choice from the program off), launch_retries.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from .._wire import RankSlot, TaskSpec
from .base import (
    LaunchError,
    LaunchMethod,
    ProcSpec,
    by_node,
    compose_env,
    node_counts,
    probe,
    rank_wrapped,
)
from .mpi_abi import MPICH, OPENMPI, program_mpi

PROBE_S = 10.0  # seconds a question to Slurm may take (once per srun command)


@dataclass
class SlurmMpi:
    """What a Slurm offers MPI: its MpiDefault (None: not known), the plugins `srun --mpi=list`
    names, and whether a pmix plugin loads (it needs the PMIx library; asked on first need)."""

    default: str | None
    plugins: tuple[str, ...]
    srun: str = "srun"
    loads: dict[str, str | None] = field(default_factory=dict)  # plugin -> None (loads) / why

    def why_not(self, plugin: str) -> str | None:
        """None when srun can use `plugin`, else why not (for a reason)."""
        if plugin not in self.plugins:
            return f"srun --mpi=list: {', '.join(self.plugins) or '(no answer)'}"
        if not plugin.startswith("pmix"):
            return None  # (pmi2 needs no library beyond Slurm's own)
        if plugin not in self.loads:
            self.loads[plugin] = _plugin_fails(self.srun, plugin)
        return self.loads[plugin]

    def usable(self, plugin: str) -> bool:
        return self.why_not(plugin) is None


_FACTS: dict[tuple[str, str], SlurmMpi] = {}


def slurm_mpi(srun: str = "srun", scontrol: str = "scontrol") -> SlurmMpi:
    """The cluster's MPI facts, learned once per (srun, scontrol) and kept."""
    key = (srun, scontrol)
    if key not in _FACTS:
        m = re.search(
            r"^MpiDefault\s*=\s*(\S+)", probe([scontrol, "show", "config"], timeout=PROBE_S), re.M
        )
        _FACTS[key] = SlurmMpi(
            m.group(1).lower() if m else None,
            mpi_plugins(probe([srun, "--mpi=list"], timeout=PROBE_S)),
            srun,
        )
    return _FACTS[key]


def mpi_plugins(listing: str) -> tuple[str, ...]:
    """The plugin names in `srun --mpi=list`'s words (Slurm 22.05: "MPI plugin types are..."
    then a tab-indented name per line, then "specific pmix plugin versions available:
    pmix_v4"; older ones prefix lines with "srun: ")."""
    names: list[str] = []
    for line in listing.splitlines():
        line = re.sub(r"^srun:\s*", "", line).strip()
        if "available:" in line:
            names += [n for n in re.split(r"[\s,]+", line.split("available:", 1)[1]) if n]
        elif re.fullmatch(r"[A-Za-z0-9_]+", line):
            names.append(line)
    return tuple(dict.fromkeys(names))


def _plugin_fails(srun: str, plugin: str) -> str | None:
    """None when srun loads the MPI plugin, else srun's words. `--test-only` outside any
    allocation (the SLURM_* of the pilot's job left out): srun loads the plugin while it reads
    its options and fails at once when it cannot; else it asks the controller when a one-task
    job could start, and starts nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    try:
        r = subprocess.run(
            [srun, f"--mpi={plugin}", "--test-only", "--ntasks=1", "true"],
            capture_output=True,
            text=True,
            timeout=PROBE_S,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"srun --mpi={plugin}: {e}"
    words = (r.stdout or "") + (r.stderr or "")
    if "Invalid MPI type" in words or "Couldn't load" in words or "Unable to load" in words:
        lines = [ln.strip() for ln in words.splitlines() if "error" in ln]
        return f"srun --mpi={plugin}: {lines[0] if lines else words.strip()[:200]}"
    return None


class Srun(LaunchMethod):
    name = "srun"
    mpi_world = "either"
    launch_retries = 2

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.jobid = str(self.options.get("jobid") or os.environ.get("SLURM_JOB_ID") or "")
        if not self.jobid:
            raise LaunchError(
                "launcher 'srun' needs a Slurm allocation: SLURM_JOB_ID is not "
                "set (or pass options={'jobid': ...})"
            )
        overrides = getattr(resources, "overrides", ())
        self.fake_cores = "cores" in overrides
        self.fake_gpus = "gpus" in overrides
        self.fake_mem = "mem" in overrides
        # the cluster's MPI facts (slurm_mpi), on first need; tests may set them
        self.slurm_mpi: SlurmMpi | None = None

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        counts = node_counts(ordered)
        slurm_gpus = task.gpus_per_rank > 0 and not self.fake_gpus
        skip = ("CUDA_VISIBLE_DEVICES",) if slurm_gpus else ()
        payload, placement = rank_wrapped(task, ordered, "${SLURM_PROCID:-}", skip)
        env = compose_env(task, placement)

        argv = [self._tool("srun", "srun"), f"--jobid={self.jobid}"]
        if len({n for _, n in counts}) == 1:
            argv += [
                f"--nodes={len(counts)}",
                f"--ntasks={len(slots)}",
                f"--ntasks-per-node={counts[0][1]}",
                "--nodelist=" + ",".join(node for node, _ in counts),
            ]
        else:
            hostfile = os.path.join(sandbox, f"{task.uid}.slurm_hosts")
            with open(hostfile, "w") as f:
                f.write("".join(f"{s.node}\n" for s in ordered))
            env["SLURM_HOSTFILE"] = hostfile
            argv += [f"--ntasks={len(slots)}", "--distribution=arbitrary"]
        if self.fake_cores:
            argv += ["--overlap", "--overcommit"]
        else:
            argv += [f"--cpus-per-task={task.cores_per_rank}"]
        if slurm_gpus:
            argv += [f"--gpus-per-task={task.gpus_per_rank}"]
        if task.mem_per_rank and not (self.fake_cores or self.fake_mem):
            argv += [f"--mem-per-cpu={-(-task.mem_per_rank // task.cores_per_rank)}"]
        if not self.fake_cores:
            argv += ["--exact"]
        if len(slots) > 1:
            argv += ["--kill-on-bad-exit=1"]
        mpi = self._mpi(task, len(slots), sandbox)
        if mpi:
            argv += [f"--mpi={mpi}"]
        argv += ["--export=ALL", *payload]
        return [ProcSpec(argv, env, None)]

    def _mpi(self, task: TaskSpec, ranks: int, cwd: str) -> str | None:
        """The --mpi value (module docstring); LaunchError when the program cannot form one
        world through this srun."""
        if self.options.get("mpi"):
            return str(self.options["mpi"])
        if (
            ranks < 2
            or (task.environment or {}).get("SLURM_MPI_TYPE")
            or os.environ.get("SLURM_MPI_TYPE")
        ):
            return None
        if self.slurm_mpi is None:
            self.slurm_mpi = slurm_mpi(
                self._tool("srun", "srun"), self._tool("scontrol", "scontrol")
            )
        facts = self.slurm_mpi
        if facts.default != "none":
            return None  # the cluster's own default (or Slurm did not say): as srun does
        kind = program_mpi(
            task.executable or "", list(task.arguments or ()), dict(task.environment or {}), cwd
        )
        if kind == OPENMPI:
            why = facts.why_not("pmix")
            if why is None:
                return "pmix"
            raise LaunchError(
                f"Open MPI needs PMIx, which this Slurm's srun does not offer "
                f"({why}; MpiDefault=none): use launcher='prrte' (or "
                f"launcher_options={{'srun': {{'mpi': ...}}}})"
            )
        why = facts.why_not("pmi2")
        if why is None:
            return "pmi2"
        if kind == MPICH:
            raise LaunchError(
                f"an MPICH-ABI program needs PMI-2, which this Slurm's srun does "
                f"not offer ({why}; MpiDefault=none): name no launcher (the "
                f"pilot's own PMI) or use launcher='mpiexec'"
            )
        return None

    def retryable(self, exit_code: int, stderr: str | None = None) -> bool:
        """The step was never created: srun says so on stderr (a task's own exit 1 does not
        carry srun's words). Not when the job itself is ending."""
        if exit_code != 1 or not stderr:
            return False
        return "Unable to create step" in stderr and "completing or completed" not in stderr
