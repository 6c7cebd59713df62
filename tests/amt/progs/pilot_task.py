"""A small amt program, run as a 2-rank pilotfish task (launcher mpiexec)."""

import os
import sys

from pilotfish import amt


class Acc(amt.Element):
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        if x > 1:
            self.collection[(self.index + 1) % len(self.collection)].add(x - 1)


def main():
    coll = amt.Collection(Acc, 6)
    with amt.epoch():
        for i in coll.local_indices():
            coll[i].add(10)
    total = coll.reduce(lambda e: e.total, "sum")
    assert total == 6 * 55, total
    lib = amt.mpi().Get_library_version().splitlines()[0].split(",")[0].strip()
    # one write per line: both ranks share the task's stdout, and print() writes the text and
    # the newline separately when unbuffered, so lines of two ranks could interleave
    sys.stdout.write(f"OK pilot task rank {amt.rank()} of {amt.size()} "
                     f"(PILOTFISH_RANK={os.environ.get('PILOTFISH_RANK')}) total={total} "
                     f"on {lib}\n")
    sys.stdout.flush()


amt.run(main)
