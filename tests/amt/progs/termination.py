"""Termination detection on a randomly branching recursive workload: exact counts right at
epoch exit (checked with a plain MPI allreduce, not with amt), nested epochs."""

import random
import sys

from pilotfish import amt

MPI = amt.mpi()      # mpi4py on the launcher's MPI (see pilotfish/amt/_mpi.py)

N = 37
DEPTH = 12


def children(seed, depth):
    """The deterministic tree: each task spawns 0..3 children at random elements."""
    if depth >= DEPTH:
        return []
    rng = random.Random(seed)
    k = rng.choice((0, 1, 1, 2, 2, 3))
    return [(rng.randrange(N), rng.getrandbits(48)) for _ in range(k)]


def tree_size(seed, depth=0):
    stack, count = [(seed, depth)], 0
    while stack:
        s, d = stack.pop()
        count += 1
        stack.extend((cs, d + 1) for _, cs in children(s, d))
    return count


class Node(amt.Element):
    def __init__(self):
        self.count = {}

    def task(self, tree, seed, depth):
        self.count[tree] = self.count.get(tree, 0) + 1
        for target, cs in children(seed, depth):
            self.collection[target].task(tree, cs, depth + 1)


def counted(coll, tree):
    local = sum(e.count.get(tree, 0) for e in coll.local_elements())
    return MPI.COMM_WORLD.allreduce(local)       # independent of amt's own machinery


def main():
    r, p = amt.rank(), amt.size()
    coll = amt.Collection(Node, N)
    roots = [(1000 * k + 7) for k in range(p * 3)]
    expect = {s: tree_size(s) for s in roots}
    total = sum(expect.values())
    for rep in range(3):
        with amt.epoch():
            for k, s in enumerate(roots):
                if k % p == r:
                    coll[s % N].task(("flat", rep), s, 0)
        got = counted(coll, ("flat", rep))
        assert got == total, (rep, got, total)
    # nested: the inner epoch ends when its own tree is done, whatever the outer one does
    big, small = roots[0], roots[1]
    with amt.epoch():
        if r == 0:
            coll[0].task("outer", big, 0)
        with amt.epoch():
            if r == p - 1:
                coll[1].task("inner", small, 0)
        assert counted(coll, "inner") == expect[small]
    assert counted(coll, "outer") == expect[big]
    st = amt.stats()
    print(f"OK termination rank {r}: {total} tasks per repetition, {st['waves']} waves, "
          f"{st['messages_sent']} remote messages in {st['batches_sent']} batches")
    sys.stdout.flush()


amt.run(main)
