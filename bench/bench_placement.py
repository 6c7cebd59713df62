"""Placement throughput of pilotfish._core.Placer, measured through Python.

Cases (one JSON line each):
  mix_first_fill   65,600 tasks of the seed-000 mix (90%: 1 rank x U[1,9] cores; 10%: 1 rank x
                   U[68,84] cores + 1 GPU) onto 2,048 nodes x (168 cores, 6 GPUs), one
                   place_batch with backfill=True.
  mix_steady       then rounds of: release a random 10% of the placed keys, place a batch of
                   new requests from the same mix (backfill=True). Timed: release + place.
  uniform_1core    1-core tasks onto 10,000 nodes x 168 cores until full (1,680,000), in
                   batches of 10,000.
Only the Placer calls are timed; the request lists are built beforehand. CPython's cyclic
GC runs that happen outside the timed calls are added to the time too (conservatively charging
every collection to the placer: its results are what makes the collector run).

Usage: python bench/bench_placement.py [--rounds N] [--batch N]
"""

import argparse
import gc
import json
import random
import time

from pilotfish._core import Placer


class Clock:
    """Accumulates the time of timed sections plus all GC time outside them."""

    def __init__(self):
        self.seconds = 0.0
        self._inside = False
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)

    def close(self):
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase, info):
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif not self._inside:
            self.seconds += time.perf_counter() - self._gc_start

    def __enter__(self):
        self._inside = True
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t0
        self._inside = False


def mix(rng, n, first_key):
    """Request columns (keys, ranks, cores, gpus) for n tasks of the mix."""
    keys = list(range(first_key, first_key + n))
    cores, gpus = [], []
    for _ in range(n):
        if rng.random() < 0.9:
            cores.append(rng.randint(1, 9))
            gpus.append(0)
        else:
            cores.append(rng.randint(68, 84))
            gpus.append(1)
    return keys, [1] * n, cores, gpus


def emit(case, **fields):
    print(json.dumps({"case": case, **fields}), flush=True)


def bench_mix(rounds, batch):
    rng = random.Random(0)  # the seed-000 mix
    n_nodes, n_tasks = 2048, 65_600
    p = Placer(cores=[168] * n_nodes, gpus=[6] * n_nodes, mem=[0] * n_nodes)
    keys, ranks, cores, gpus = mix(rng, n_tasks, 0)
    zeros = [0] * n_tasks

    clock = Clock()
    with clock:
        res = p.place_batch(keys, ranks, cores, gpus, zeros, backfill=True)
    placed = [k for k, r in zip(keys, res) if r is not None]
    gc.collect()  # settle the collections this result causes, on the clock
    clock.close()
    dt = clock.seconds
    emit("mix_first_fill", nodes=n_nodes, requests=n_tasks, placed=len(placed),
         seconds=round(dt, 4), placements_per_s=round(len(placed) / dt),
         requests_per_s=round(n_tasks / dt))

    next_key = n_tasks
    held = set(placed)
    # Build all rounds' inputs first so that only the Placer is timed.
    plan = []
    sim_rng = random.Random(1)
    for _ in range(rounds):
        plan.append(mix(rng, batch, next_key))
        next_key += batch
    zeros = zeros[:batch]
    t_place = t_release = 0.0
    n_placed = n_released = n_tried = 0
    clock = Clock()
    for keys, ranks, cores, gpus in plan:
        victims = sim_rng.sample(sorted(held), len(held) // 10)
        t0 = time.perf_counter()
        with clock:
            p.release_batch(victims)
            t1 = time.perf_counter()
            res = p.place_batch(keys, ranks, cores, gpus, zeros, backfill=True)
        t2 = time.perf_counter()
        t_release += t1 - t0
        t_place += t2 - t1
        held.difference_update(victims)
        new = [k for k, r in zip(keys, res) if r is not None]
        held.update(new)
        n_placed += len(new)
        n_released += len(victims)
        n_tried += len(keys)
    gc.collect()
    clock.close()
    emit("mix_steady", rounds=rounds, batch=batch, placed=n_placed, released=n_released,
         requests=n_tried, seconds=round(clock.seconds, 4),
         placements_per_s=round(n_placed / clock.seconds),
         place_only_placements_per_s=round(n_placed / t_place),
         requests_per_s=round(n_tried / t_place),
         releases_per_s=round(n_released / t_release))
    p._check()


def bench_uniform(batch):
    n_nodes, cores = 10_000, 168
    p = Placer(cores=[cores] * n_nodes, gpus=[0] * n_nodes, mem=[0] * n_nodes)
    total = n_nodes * cores
    ones, zeros = [1] * batch, [0] * batch
    batches = [list(range(s, min(s + batch, total))) for s in range(0, total, batch)]
    placed = 0
    clock = Clock()
    for keys in batches:
        n = len(keys)
        args = (ones, ones, zeros, zeros) if n == batch else ([1] * n, [1] * n, [0] * n, [0] * n)
        with clock:
            res = p.place_batch(keys, *args)
        placed += n - res.count(None)
        del res
    gc.collect()
    clock.close()
    t = clock.seconds
    assert placed == total, placed
    assert p.total_free() == (0, 0)
    emit("uniform_1core", nodes=n_nodes, cores_per_node=cores, batch=batch, placed=placed,
         seconds=round(t, 4), placements_per_s=round(placed / t))
    all_keys = [k for b in batches for k in b]
    t0 = time.perf_counter()
    p.release_batch(all_keys)
    dt = time.perf_counter() - t0
    emit("uniform_1core_release", released=len(all_keys), seconds=round(dt, 4),
         releases_per_s=round(len(all_keys) / dt))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50, help="steady-state rounds")
    ap.add_argument("--batch", type=int, default=10_000, help="requests per batch")
    args = ap.parse_args()
    bench_mix(args.rounds, args.batch)
    bench_uniform(args.batch)


if __name__ == "__main__":
    main()
