"""Placement feasibility: whether nodes of a shape can ever hold a request, shared by the
client (at submit, `pilotfish validate`) and the agent (on receipt, on resize).

A shape is a list of per-node (cores, GPUs, memory MiB; 0 = not tracked). The limits here are
what the agent and its Rust placer can represent; `misfit` returning None promises the placer
accepts the request. `partition_layout` is the one rule for how a pilot's nodes split into
partitions; `declared_shape` the one rule for a pilot's shape before its agent reports it.
"""

from __future__ import annotations

from typing import Any

try:
    from ._core import MAX_GPUS_PER_NODE
except ImportError:  # the Rust core not built (docs, linters): its value
    MAX_GPUS_PER_NODE = 64

# -- limits: what the agent and its Rust placer can represent (rust/src/placer) ------------
# Far beyond any real machine; each keeps a number inside a type or a memory budget.
MAX_NODES = 1_000_000  # a pilot's per-node state is built at submit and at start
MAX_CORES_PER_NODE = 65_536  # placer: per-core bitsets and one cached int per core id
MAX_TOTAL_CORES = 2**30  # nodes x cores_per_node: the placer's core bitsets
MAX_MEM_MIB = 2**32 - 1  # placer: a rank's memory is a u32 (MiB)
MAX_PLACER_ENCODED = 2**28  # placer: ranks x (3 + cores + gpus) numbers per task
MAX_RANKS = MAX_PLACER_ENCODED // 4  # the most 1-core ranks the placer encodes in one task
MAX_DURATION_S = 10 * 365 * 86400.0  # 10 years: a timeout/walltime beyond is a mistake


def partition_layout(
    n_nodes: int, partitions: int | list[dict] | None, launcher: str | None = None
) -> list[tuple[int, int, str | None]]:
    """[(first node index, node count, launcher or None for the pilot's)] of each partition.
    One contract for the client (which checks tasks against partitions at submit) and the
    agent (which builds them): P equal partitions take consecutive nodes, the first
    n_nodes % P of them one node more."""
    if partitions is None or partitions == 1:
        return [(0, n_nodes, launcher)]
    if isinstance(partitions, int):
        size, extra = divmod(n_nodes, partitions)
        sizes = [(size + (i < extra), launcher) for i in range(partitions)]
    else:
        sizes = [(p["nodes"], p.get("launcher") or launcher) for p in partitions]
    out, first = [], 0
    for n, lm in sizes:
        out.append((first, n, lm))
        first += n
    return out


def rank_capacity(
    shape: list,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    enough: int | None = None,
) -> int:
    """How many ranks of this size nodes of these (cores, gpus, mem) hold at once (counting
    stops at `enough`: node lists can be long)."""
    capacity = 0
    for c, g, m in shape:
        fit = c // cores_per_rank
        if gpus_per_rank:
            fit = min(fit, g // gpus_per_rank)
        if mem_per_rank and m:
            fit = min(fit, m // mem_per_rank)
        capacity += fit
        if enough is not None and capacity >= enough:
            break
    return capacity


def misfit(
    ranks: int,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    shape: list[tuple[int, int, int]],
) -> tuple[str, str] | None:
    """None if nodes of this shape [(cores, gpus, mem MiB; 0 = not tracked)] can ever hold
    the request, else (field, why) -- shared by the client (at submit) and the agent (on
    receipt). None also promises that the Rust placer accepts the request: the agent relies
    on it, whoever built the request."""
    problem = _unplaceable(ranks, cores_per_rank, gpus_per_rank, mem_per_rank)
    if problem is not None:
        return problem
    if not shape:
        return "ranks", "the pilot has no nodes"
    max_c = max(c for c, _, _ in shape)
    max_g = max(g for _, g, _ in shape)
    if cores_per_rank > max_c:
        return "cores_per_rank", f"larger than the largest node ({max_c} cores)"
    if gpus_per_rank > max_g:
        return "gpus_per_rank", f"larger than the largest node ({max_g} GPUs)"
    if mem_per_rank:
        mems = [m for _, _, m in shape]
        if all(mems) and mem_per_rank > max(mems):  # (a node with 0 does not track memory)
            return "mem_per_rank", f"larger than the largest node ({max(mems)} MiB)"
    capacity = rank_capacity(shape, cores_per_rank, gpus_per_rank, mem_per_rank, enough=ranks)
    if capacity >= ranks:
        return None
    return "ranks", f"more ranks of this size than the pilot holds ({capacity})"


def misfit_partitions(
    ranks: int,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    shapes: list[list[tuple[int, int, int]]],
) -> tuple[str, str] | None:
    """misfit() against a pilot made of partitions (a task never spans two): None if some
    partition can hold the request, else the reason the largest one cannot."""
    if len(shapes) <= 1:
        return misfit(
            ranks, cores_per_rank, gpus_per_rank, mem_per_rank, shapes[0] if shapes else []
        )
    first = None
    for shape in shapes:
        problem = misfit(ranks, cores_per_rank, gpus_per_rank, mem_per_rank, shape)
        if problem is None:
            return None
        first = first or problem
    biggest = max(shapes, key=lambda s: sum(c for c, _, _ in s))
    problem = misfit(ranks, cores_per_rank, gpus_per_rank, mem_per_rank, biggest) or first
    assert problem is not None  # (every partition failed: `first` is set)
    return problem[0], (
        f"{problem[1].replace('the pilot holds', 'a partition holds')} -- "
        f"larger than every one of the pilot's {len(shapes)} partitions "
        f"(a task never spans partitions)"
    )


def _unplaceable(
    ranks: Any, cores_per_rank: Any, gpus_per_rank: Any, mem_per_rank: Any
) -> tuple[str, str] | None:
    """(field, why) for a request outside what the placer's types hold (u32 counts, at most
    MAX_PLACER_ENCODED numbers per allocation), else None."""
    for field, v, lo, hi in (
        ("ranks", ranks, 1, MAX_RANKS),
        ("cores_per_rank", cores_per_rank, 1, MAX_CORES_PER_NODE),
        ("gpus_per_rank", gpus_per_rank, 0, MAX_GPUS_PER_NODE),
        ("mem_per_rank", mem_per_rank, 0, MAX_MEM_MIB),
    ):
        if isinstance(v, bool) or not isinstance(v, int):
            return field, "must be an integer"
        if not lo <= v <= hi:
            return field, f"must be between {lo} and {hi}"
    if ranks * (3 + cores_per_rank + gpus_per_rank) > MAX_PLACER_ENCODED:
        return "ranks", (
            f"ranks x (3 + cores_per_rank + gpus_per_rank) must be <= "
            f"{MAX_PLACER_ENCODED} (the most the placer holds for one task)"
        )
    return None


def declared_shape(d: Any) -> list[tuple[int, int, int]] | None:
    """Per node (cores, GPUs, memory MiB) of a pilot of this description, as the client
    declares it before the pilot starts (a local or simulated pilot's missing values are this
    machine's); None where only the agent learns it (a batch resource without
    cores_per_node). `d`: a PilotDescription (not imported: descriptions.py imports this
    module). The one rule for the pilot manager and `pilotfish validate`."""
    from ._util import machine_shape
    from .batch.registry import batch_system

    if batch_system(d.resource).runs_here:
        cores, gpus, mem = machine_shape()
        return [
            (
                d.cores_per_node or cores,
                gpus if d.gpus_per_node is None else d.gpus_per_node,
                mem if d.mem_per_node is None else d.mem_per_node,
            )
        ] * d.nodes
    if d.cores_per_node is not None:
        return [(d.cores_per_node, d.gpus_per_node or 0, d.mem_per_node or 0)] * d.nodes
    return None
