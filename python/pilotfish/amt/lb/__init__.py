"""Load-balancing strategies, one module each behind `base.Strategy` (as in DARMA/vt).

greedy         centralised: heaviest object to the least loaded rank (heaps); ignores the
               current placement, so it migrates most objects
greedy_refine  centralised refinement from the current placement: moves objects from the
               most to the least loaded rank until max/mean <= tolerance, at most
               max_migrations moves
hierarchical   tree-structured diffusion from per-rank load summaries; each rank picks its
               own objects to send (no object list is ever gathered)
tempered       vt's TemperedLB (gossip-based, after GrapevineLB): inform rounds, transfers
               sampled from a CMF, an acceptance criterion, several trials/iterations and
               rollback to the best one
home           sends every element back to its home rank (benchmarks, resets)
"""

from __future__ import annotations

from .base import HomeStrategy, Strategy
from .greedy import GreedyStrategy
from .greedy_refine import GreedyRefineStrategy
from .hierarchical import HierarchicalStrategy
from .tempered import TemperedStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        GreedyStrategy,
        GreedyRefineStrategy,
        HierarchicalStrategy,
        TemperedStrategy,
        HomeStrategy,
    )
}


def make_strategy(strategy, **options) -> Strategy:
    if isinstance(strategy, Strategy):
        if options:
            raise TypeError("options are given to a Strategy instance's constructor")
        return strategy
    if isinstance(strategy, type) and issubclass(strategy, Strategy):
        return strategy(**options)
    try:
        cls = STRATEGIES[strategy]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown load-balancing strategy {strategy!r}: choose one of {sorted(STRATEGIES)}"
        ) from None
    return cls(**options)


__all__ = [
    "STRATEGIES",
    "GreedyRefineStrategy",
    "GreedyStrategy",
    "HierarchicalStrategy",
    "HomeStrategy",
    "Strategy",
    "TemperedStrategy",
    "make_strategy",
]
