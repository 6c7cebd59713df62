"""pilotfish._core.Placer through Python: the contract in docs/internals.md."""

import random

import pytest

from pilotfish._core import Placer


def place(p, reqs, **kw):
    """reqs: list of (key, ranks, cores, gpus[, mem])."""
    cols = list(zip(*[(r + (0,))[:5] for r in reqs]))
    return p.place_batch(*[list(c) for c in cols], **kw)


def test_contract_example():
    p = Placer(cores=[16] * 4, gpus=[2] * 4, mem=[0] * 4)
    assert p.n_nodes == 4
    assert p.free(0) == (16, 2, 0)
    assert p.total_free() == (64, 8)
    res = p.place_batch([1, 2], [1, 2], [4, 8], [0, 1], [0, 0])
    assert res[0] == [(0, (0, 1, 2, 3), ())]
    # rank 0 packs on node 0 (12 cores left), rank 1 too (4 left).
    assert res[1] == [(0, tuple(range(4, 12)), (0,)), (0, (12, 13, 14, 15), (1,))] or res[1] == [
        (0, tuple(range(4, 12)), (0,)),
        (1, tuple(range(0, 8)), (0,)),
    ]
    assert isinstance(res[1], list) and all(isinstance(s, tuple) for s in res[1])
    assert p.held(2) == res[1]
    assert p.n_held == 2
    p.release_batch([1, 2])
    assert p.total_free() == (64, 8)
    assert p.n_held == 0


def test_packs_ranks_lowest_ids_first():
    p = Placer(cores=[8, 8], gpus=[0, 0])
    res = place(p, [(7, 3, 3, 0)])
    assert res == [[(0, (0, 1, 2), ()), (0, (3, 4, 5), ()), (1, (0, 1, 2), ())]]
    p.release_batch([7])
    assert p.free(0) == (8, 0, 0)


def test_backfill_and_stop():
    p = Placer(cores=[4])
    assert place(p, [(1, 1, 3, 0), (2, 1, 3, 0), (3, 1, 1, 0)]) == [
        [(0, (0, 1, 2), ())],
        None,
        [(0, (3,), ())],
    ]
    p.release_batch([1, 3])
    res = place(p, [(4, 1, 5, 0), (5, 1, 1, 0)], backfill=False)
    assert res == [None, None]
    assert p.total_free() == (4, 0)


def test_multi_rank_is_atomic():
    p = Placer(cores=[4, 4], gpus=[1, 0])
    assert place(p, [(1, 2, 1, 1)]) == [None]  # only one GPU in total
    assert p.total_free() == (8, 1)
    p._check()


def test_node_hint_all_ranks_on_that_node():
    p = Placer(cores=[8, 8, 8])
    res = p.place_batch([1, 2, 3], [2, 2, 1], [2, 4, 1], [0, 0, 0], [0, 0, 0], node_hint=[2, 1, -1])
    assert res[0] == [(2, (0, 1), ()), (2, (2, 3), ())]
    assert res[1] == [(1, (0, 1, 2, 3), ()), (1, (4, 5, 6, 7), ())]
    assert res[2] == [(0, (0,), ())]
    # Does not fit on the hinted node: not placed, even though other nodes have room.
    assert p.place_batch([4], [1], [5], [0], [0], node_hint=[2]) == [None]
    with pytest.raises(ValueError):
        p.place_batch([5], [1], [1], [0], [0], node_hint=[3])


def test_memory_is_tracked_per_node():
    p = Placer(cores=[8, 8], gpus=[0, 0], mem=[1000, 0])
    res = p.place_batch([1, 2], [1, 1], [1, 1], [0, 0], [600, 600])
    assert [r[0][0] for r in res] == [0, 1]  # node 1 does not track memory
    assert p.free(0) == (7, 0, 400)
    assert p.free(1) == (7, 0, 0)
    assert p.place_batch([3], [2], [1], [0], [300], node_hint=[0]) == [None]
    p.release_batch([1])
    assert p.free(0) == (8, 0, 1000)


def test_release_unknown_key_raises_after_releasing_known():
    p = Placer(cores=[4])
    place(p, [(1, 1, 2, 0)])
    with pytest.raises(KeyError):
        p.release_batch([1, 99])
    assert p.total_free() == (4, 0)
    with pytest.raises(KeyError):
        p.release_batch([1])


def test_duplicate_key_is_refused_without_effect():
    p = Placer(cores=[8])
    place(p, [(1, 1, 1, 0)])
    with pytest.raises(ValueError):
        place(p, [(2, 1, 1, 0), (1, 1, 1, 0)])
    with pytest.raises(ValueError):
        place(p, [(3, 1, 1, 0), (3, 1, 1, 0)])
    assert p.total_free() == (7, 0)
    assert p.n_held == 1
    p._check()


def test_reservation():
    p = Placer(cores=[8, 8, 8], gpus=[1, 1, 1])
    place(p, [(1, 1, 4, 0)])  # node 0 half busy
    nodes = p.reserve(100, 2, 8, 1)
    assert nodes == [1, 2]  # most free resources now
    assert p.reservation(100) == [1, 2]
    # Other keys cannot use the reserved nodes...
    assert place(p, [(2, 1, 5, 0)]) == [None]
    assert place(p, [(3, 1, 4, 0)]) == [[(0, (4, 5, 6, 7), ())]]
    # ...the reserving key can.
    assert place(p, [(100, 2, 8, 1)]) == [[(1, tuple(range(8)), (0,)), (2, tuple(range(8)), (0,))]]
    p.unreserve(100)
    assert p.reservation(100) is None
    with pytest.raises(KeyError):
        p.unreserve(100)
    p.release_batch([1, 3, 100])
    place(p, [(4, 1, 8, 0)])
    assert p.held(4)[0][0] == 0
    # Impossible even on empty nodes: None, nothing reserved.
    assert p.reserve(200, 4, 8, 1) is None
    assert p.reservation(200) is None
    p._check()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(cores=[4, 4], gpus=[1]),
        dict(cores=[-1]),
        dict(cores=[4], gpus=[65]),
    ],
)
def test_bad_capacities(kwargs):
    with pytest.raises(ValueError):
        Placer(**kwargs)


def test_bad_requests():
    p = Placer(cores=[4])
    with pytest.raises(ValueError):
        p.place_batch([1, 2], [1], [1, 1], [0, 0], [0, 0])
    with pytest.raises(ValueError):
        p.place_batch([1], [0], [1], [0], [0])
    with pytest.raises(ValueError):
        p.place_batch([1], [1], [-1], [0], [0])
    with pytest.raises(IndexError):
        p.free(1)


def test_gpu_heavy_node_layout():
    p = Placer(cores=[168] * 2, gpus=[6] * 2)
    res = place(p, [(k, 1, 20, 1) for k in range(13)])
    nodes = [r[0][0] if r else None for r in res]
    assert nodes == [0] * 6 + [1] * 6 + [None]
    assert res[5] == [(0, tuple(range(100, 120)), (5,))]


def test_random_never_oversubscribes():
    rng = random.Random(42)
    n = 25
    caps = [(rng.randint(0, 140), rng.randint(0, 8), rng.choice([0, rng.randint(100, 5000)])) for _ in range(n)]
    p = Placer(cores=[c for c, _, _ in caps], gpus=[g for _, g, _ in caps], mem=[m for _, _, m in caps])
    held = {}  # key -> (mem per rank, allocation)
    next_key = 0
    for step in range(1500):
        op = rng.random()
        if op < 0.55:
            reqs = []
            for _ in range(rng.randint(1, 40)):
                reqs.append((next_key, rng.choice([1, 1, 1, 2, 4]), rng.choice([1, 1, rng.randint(0, 60)]),
                             rng.choice([0, 0, rng.randint(0, 3)]), rng.choice([0, 0, rng.randint(0, 900)])))
                next_key += 1
            hints = [rng.choice([-1] * 8 + [rng.randrange(n)]) for _ in reqs]
            res = place(p, reqs, node_hint=hints, backfill=rng.random() < 0.7)
            for r, h, out in zip(reqs, hints, res):
                if out is not None:
                    assert len(out) == r[1]
                    for node, cores, gpus in out:
                        assert len(cores) == r[2] and len(gpus) == r[3]
                        assert h == -1 or node == h
                    held[r[0]] = (r[4], out)
        elif op < 0.85:
            keys = [k for k in held if rng.random() < 0.4]
            p.release_batch(keys)
            for k in keys:
                del held[k]
        elif op < 0.93:
            p.reserve(rng.randrange(next_key + 1), rng.randint(1, 4), rng.randint(1, 60), rng.randint(0, 2))
        else:
            for k in range(next_key + 1):
                if p.reservation(k) is not None:
                    p.unreserve(k)
                    break
        # Independent check: no core or GPU given twice, within capacity, counts agree.
        used_c = [set() for _ in range(n)]
        used_g = [set() for _ in range(n)]
        used_m = [0] * n
        for mem, alloc in held.values():
            for node, cores, gpus in alloc:
                assert not used_c[node] & set(cores) and not used_g[node] & set(gpus)
                used_c[node] |= set(cores)
                used_g[node] |= set(gpus)
                used_m[node] += mem
        for node, (c, g, m) in enumerate(caps):
            assert all(0 <= i < c for i in used_c[node]) and all(0 <= i < g for i in used_g[node])
            assert p.free(node) == (c - len(used_c[node]), g - len(used_g[node]), m - used_m[node] if m else 0)
            assert not m or used_m[node] <= m
        assert p.total_free() == (sum(c for c, _, _ in caps) - sum(map(len, used_c)),
                                  sum(g for _, g, _ in caps) - sum(map(len, used_g)))
        p._check()


def test_max_free_is_the_most_free_cores_on_one_node_per_gpu_count():
    from pilotfish import _core

    p = _core.Placer([4, 8, 6], [0, 2, 1])
    assert p.max_free() == [8, 8, 8]  # g = 0, 1, 2
    p.place_batch([1], [1], [7], [1])  # node 1: 1 core, 1 GPU left
    assert p.max_free() == [6, 6, -1]
    p.reserve(2, 1, 6, 1)  # node 2 reserved for key 2: hidden from everyone else
    assert p.max_free() == [4, 1, -1]
    p.unreserve(2)
    p.release_batch([1])
    assert p.max_free() == [8, 8, 8]
