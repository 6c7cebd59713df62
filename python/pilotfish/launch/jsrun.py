"""jsrun (IBM JSM, LSF machines such as Summit): one `jsrun` per task.

    jsrun -n R -a 1 -c C -g G [-r K] -b none <payload>

jsrun thinks in resource sets (RS): -n/--nrs number of sets, -a/--tasks_per_rs tasks in each,
-c/--cpu_per_rs cores, -g/--gpu_per_rs GPUs, -r/--rs_per_host sets per host, -b/--bind
binding (checked against the IBM jsrun command reference and the OLCF jsrun quick start
guide). A set never spans nodes and all sets of a call are alike, so the pilot's request
maps one rank to one set: R sets of (1 task, C cores, G GPUs). -r K is added when the
pilot put K ranks on every node, so jsrun spreads them the same way. `-b none` leaves
binding alone.

jsrun picks the hosts itself: naming them needs an explicit resource file (-U/--erf_input),
a file per task, which this runtime avoids. The pilot's accounting guarantees the
resources are free; which node a rank lands on is jsrun's choice (PILOTFISH_NODE then tells
the pilot's view, not the truth). jsrun binds GPUs and sets CUDA_VISIBLE_DEVICES; it
propagates the caller's environment.

options: jsrun (command).
"""

from __future__ import annotations

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, by_node, compose_env, node_counts, rank_wrapped

JSM_RANK = "${JSM_NAMESPACE_RANK:-${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-}}}"


class Jsrun(LaunchMethod):
    name = "jsrun"

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        jsm_gpus = task.gpus_per_rank > 0 and "gpus" not in getattr(self.resources, "overrides", ())
        skip = ("CUDA_VISIBLE_DEVICES",) if jsm_gpus else ()
        payload, placement = rank_wrapped(task, ordered, JSM_RANK, skip)
        env = compose_env(task, placement)
        argv = [
            self._tool("jsrun", "jsrun"),
            "-n",
            str(len(slots)),
            "-a",
            "1",
            "-c",
            str(task.cores_per_rank),
            "-g",
            str(task.gpus_per_rank if jsm_gpus else 0),
        ]
        per_node = {n for _, n in node_counts(ordered)}
        if len(per_node) == 1:
            argv += ["-r", str(per_node.pop())]
        argv += ["-b", "none"]
        return [ProcSpec(argv + payload, env, None)]
