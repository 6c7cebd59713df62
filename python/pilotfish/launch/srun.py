"""srun (Slurm): one job step per task inside the pilot's allocation.

    srun --jobid=J --nodes=N --ntasks=R --ntasks-per-node=K --nodelist=h1,h2
         --cpus-per-task=C [--gpus-per-task=G] [--mem-per-cpu=M] --exact [--mpi=TYPE]
         --export=ALL <payload>

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
  --mpi            only when options["mpi"] is set ("pmi2" works for MPICH + mpi4py here;
                   "pmix" with the Open MPI wheel does not -- use prrte for Open MPI).
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

options: srun (command), jobid (default: SLURM_JOB_ID), mpi (e.g. "pmi2"), launch_retries.
"""

from __future__ import annotations

import os

from .._wire import RankSlot, TaskSpec
from .base import (
    LaunchError,
    LaunchMethod,
    ProcSpec,
    by_node,
    compose_env,
    node_counts,
    rank_wrapped,
)


class Srun(LaunchMethod):
    name = "srun"
    launch_retries = 2

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.jobid = str(self.options.get("jobid") or os.environ.get("SLURM_JOB_ID") or "")
        if not self.jobid:
            raise LaunchError("launcher 'srun' needs a Slurm allocation: SLURM_JOB_ID is not "
                              "set (or pass options={'jobid': ...})")
        overrides = getattr(resources, "overrides", ())
        self.fake_cores = "cores" in overrides
        self.fake_gpus = "gpus" in overrides
        self.fake_mem = "mem" in overrides

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        counts = node_counts(ordered)
        slurm_gpus = task.gpus_per_rank > 0 and not self.fake_gpus
        skip = ("CUDA_VISIBLE_DEVICES",) if slurm_gpus else ()
        payload, placement = rank_wrapped(task, ordered, "${SLURM_PROCID:-}", skip)
        env = compose_env(task, placement)

        argv = [self._tool("srun", "srun"), f"--jobid={self.jobid}"]
        if len({n for _, n in counts}) == 1:
            argv += [f"--nodes={len(counts)}", f"--ntasks={len(slots)}",
                     f"--ntasks-per-node={counts[0][1]}",
                     "--nodelist=" + ",".join(node for node, _ in counts)]
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
        if self.options.get("mpi"):
            argv += [f"--mpi={self.options['mpi']}"]
        argv += ["--export=ALL", *payload]
        return [ProcSpec(argv, env, None)]

    def retryable(self, exit_code: int, stderr: str | None = None) -> bool:
        """The step was never created: srun says so on stderr (a task's own exit 1 does not
        carry srun's words). Not when the job itself is ending."""
        if exit_code != 1 or not stderr:
            return False
        return ("Unable to create step" in stderr
                and "completing or completed" not in stderr)
