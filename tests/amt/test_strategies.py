"""Load-balancing strategies' decisions without MPI: hierarchical's tree plan, greedy's ties,
tempered's weights (pure Python; the collective runs are in test_amt.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pilotfish.amt.lb import make_strategy
from pilotfish.amt.lb.hierarchical import plan_flows

NEEDS_MPIEXEC = False  # pure Python: runs without MPICH too (see conftest)


def apply(loads, flows):
    final = list(loads)
    sent = [0.0] * len(loads)
    for (o, d), a in flows.items():
        final[o] -= a
        final[d] += a
        sent[o] += a
    return final, sent


@pytest.mark.parametrize("P, fanout", [(14, 2), (20, 4), (7, 3), (33, 4), (64, 4)])
def test_hierarchical_plan_equalises_any_tree(P, fanout):
    rng = random.Random(P * 31 + fanout)
    for _ in range(200):
        loads = [rng.choice([0.0, 0.0, rng.random() * 100, rng.random()]) for _ in range(P)]
        if not sum(loads):
            continue
        final, sent = apply(loads, plan_flows(loads, fanout))
        mean = sum(loads) / P
        assert max(final) / mean == pytest.approx(1.0, abs=1e-9), (loads, final)
        assert all(s <= x + 1e-9 for s, x in zip(sent, loads))   # only what a rank holds


def test_hierarchical_plan_with_a_partial_last_subtree():
    """Two loaded ranks at the end of 14 (fan-out 2): the partial sub-tree once sent its excess
    to only as many ranks as it had, leaving 3.3x."""
    loads = [0.0] * 12 + [100.0, 100.0]
    final, _ = apply(loads, plan_flows(loads, 2))
    assert max(final) == pytest.approx(200 / 14)


def test_greedy_ties_go_to_the_rank_with_fewer_objects():
    g = make_strategy("greedy")
    owner = np.repeat(np.arange(4), 10)
    loads = np.array(([1.0] * 4 + [0.0] * 6) * 4)
    new = g.assign(loads, owner, 4)
    assert sorted(np.bincount(new, minlength=4).tolist()) == [10, 10, 10, 10]
    assert np.bincount(new, weights=loads, minlength=4).tolist() == [4.0] * 4


def test_greedy_keeps_everything_where_it_is_when_nothing_was_measured():
    g = make_strategy("greedy")
    owner = np.repeat(np.arange(4), 5)
    assert (g.assign(np.zeros(20), owner, 4) == owner).all()


def test_tempered_weights_without_load_are_uniform():
    t = make_strategy("tempered", cmf="original")
    ranks, cum = t._weights({1: 0.0, 2: -1.0}, 1.0, 0.0)      # mean 0: was a ZeroDivisionError
    assert ranks == [1, 2] and cum == pytest.approx([0.5, 1.0])
