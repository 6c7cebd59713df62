"""Plain use without amt.run: the runtime starts on first use and finalises at exit; mpi4py is
loaded for whichever MPI launched us (no MPI4PY_LIBMPI given)."""

import sys

from pilotfish import amt


class Hop(amt.Element):
    def __init__(self):
        self.n = 0

    def hop(self, k):
        self.n += 1
        if k:
            self.collection[(self.index + 3) % len(self.collection)].hop(k - 1)


coll = amt.Collection(Hop, 16)
with amt.epoch():
    if amt.rank() == 0:
        coll[0].hop(200)
total = coll.reduce(lambda e: e.n, "sum")
lib = amt.mpi().Get_library_version().splitlines()[0].split(",")[0].split(" v")[0].strip()
sys.stdout.write(f"OK plain rank {amt.rank()}/{amt.size()} total={total} lib={lib}\n")
