"""aprun (Cray ALPS): one `aprun` per task.

    aprun -n R -N K -d C -cc none -L 12,13 <payload>

Checked against aprun(1) (Cray ALPS): -n width (processing elements = ranks), -N PEs per
node, -d depth (cores per PE, for its threads), -cc none (no CPU binding: the pilot owns
placement), -L candidate node list as numeric node ids (nid00012 -> 12). aprun fills each
node with K PEs before the next, so K is the largest count the pilot put on a node; an
uneven placement (3 + 1) becomes 3 + 1 only because the nodes are listed in that order.
ALPS has no GPU option (one GPU per XK node, always visible): the pilot sets
CUDA_VISIBLE_DEVICES. aprun forwards the caller's environment. Known from other pilot
systems: ALPS may run apruns that share a node one after another, not side by side.

options: aprun (command).
"""

from __future__ import annotations

import re

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, by_node, compose_env, node_counts, rank_wrapped


def nid_number(node: str) -> str:
    """ALPS node id of a Cray node name: "nid00012" -> "12"; other names unchanged."""
    m = re.fullmatch(r"nid0*(\d+)", node)
    return m.group(1) if m else node


class Aprun(LaunchMethod):
    name = "aprun"

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        payload, placement = rank_wrapped(task, ordered, "${ALPS_APP_PE:-}")
        env = compose_env(task, placement)
        counts = node_counts(ordered)
        argv = [
            self._tool("aprun", "aprun"),
            "-n",
            str(len(slots)),
            "-N",
            str(max(n for _, n in counts)),
            "-d",
            str(task.cores_per_rank),
            "-cc",
            "none",
        ]
        if not self.emulated:
            argv += ["-L", ",".join(nid_number(node) for node, _ in counts)]
        return [ProcSpec(argv + payload, env, None)]
