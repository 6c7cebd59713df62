"""flux: one `flux run` per task inside a Flux instance.

    flux run -N n -n R -c C [-g G] --requires=host:h1,h2 <payload>

Checked against flux-core's man pages (doc/man1/common/job-param-common.rst and
job-param-pertask.rst, job-constraints.rst): -N/--nodes nodes, -n/--ntasks tasks,
-c/--cores-per-task, -g/--gpus-per-task; --requires=host:<hostlist> restricts the job to
those hosts (RFC 29 host list, so a comma list is fine). `flux run` rather than
`flux submit`: run blocks until the job ends and exits with its status, so the executor
reaps it like any process; submit returns at once with a job id. Flux duplicates the
caller's environment into the job by default, so the ProcSpec env reaches the ranks.

Flux is a scheduler itself: it places tasks on the given hosts and binds cores and GPUs
(CUDA_VISIBLE_DEVICES), so the pilot sets CUDA_VISIBLE_DEVICES only for faked GPUs. "Tasks
are distributed evenly across the allocated nodes" with -N: an uneven placement by the pilot
becomes an even one. Flux queues a job that does not fit yet.
Not runnable on this machine (no flux-core in Debian 12): tested by the command it builds.

options: flux (command).
"""

from __future__ import annotations

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, by_node, compose_env, rank_wrapped, unique_nodes


class Flux(LaunchMethod):
    name = "flux"

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        flux_gpus = task.gpus_per_rank > 0 and "gpus" not in getattr(
            self.resources, "overrides", ()
        )
        skip = ("CUDA_VISIBLE_DEVICES",) if flux_gpus else ()
        payload, placement = rank_wrapped(task, ordered, "${FLUX_TASK_RANK:-}", skip)
        env = compose_env(task, placement)
        nodes = unique_nodes(ordered)
        argv = [
            self._tool("flux", "flux"),
            "run",
            "-N",
            str(len(nodes)),
            "-n",
            str(len(slots)),
            "-c",
            str(task.cores_per_rank),
        ]
        if flux_gpus:
            argv += ["-g", str(task.gpus_per_rank)]
        if not self.emulated:
            argv += ["--requires=host:" + ",".join(nodes)]
        return [ProcSpec(argv + payload, env, None)]
