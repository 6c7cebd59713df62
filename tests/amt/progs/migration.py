"""Messages to migrating elements are all delivered, exactly once: every rank streams
numbered messages to every element while elements are migrated (by other ranks' requests and
by themselves, from inside handlers), so many messages reach a rank the element has left and
are forwarded. Element state (a numpy array) travels with the element."""

import random

import numpy as np
from pilotfish import amt

MPI = amt.mpi()      # mpi4py on the launcher's MPI (see pilotfish/amt/_mpi.py)

N = 24
PER_ROUND = 40       # messages per (rank, element) per round
ROUNDS = 4


class Roamer(amt.Element):
    def __init__(self):
        self.got = {}                                  # sender -> list of seq
        self.state = np.zeros(4096)                    # 32 KiB: migrates out-of-band
        self.hops = 0

    def msg(self, sender, seq, wander):
        self.got.setdefault(sender, []).append(seq)
        self.state[seq % 4096] += 1.0
        if wander is not None:                          # move on from inside a handler
            self.migrate(wander)

    def on_migrated_in(self):
        self.hops += 1


def main():
    r, p = amt.rank(), amt.size()
    coll = amt.Collection(Roamer, N)
    rng = random.Random(17 + r)
    seq = 0
    for rnd in range(ROUNDS):
        with amt.epoch():
            for k in range(PER_ROUND):
                for i in range(N):
                    wander = rng.randrange(p) if rng.random() < 0.02 else None
                    coll[i].msg(r, seq, wander)
                    seq += 1
                    if rng.random() < 0.03:
                        coll.migrate(rng.randrange(N), rng.randrange(p))
                if k % 8 == 0:
                    amt.progress()                     # let migrations overlap the stream
        # every message of this round delivered exactly once
        ok = True
        for e in coll.local_elements():
            for s, seqs in e.got.items():
                if len(seqs) != len(set(seqs)):
                    ok = False
        assert MPI.COMM_WORLD.allreduce(int(not ok)) == 0, "duplicate delivery"
    sent = MPI.COMM_WORLD.allgather(seq)
    for e in coll.local_elements():
        for s in range(p):
            got = sorted(e.got.get(s, []))
            want = [q for q in range(sent[s]) if q % N == e.index]
            assert got == want, (e.index, s, len(got), len(want))
        assert e.state.sum() == sum(len(v) for v in e.got.values())
    n_local = MPI.COMM_WORLD.allreduce(len(coll.local_indices()))
    assert n_local == N, n_local
    st = amt.stats()
    fwd = MPI.COMM_WORLD.allreduce(st["forwarded"])
    moved = MPI.COMM_WORLD.allreduce(st["migrations_in"])
    hints = MPI.COMM_WORLD.allreduce(st["hints"])
    hops = coll.reduce(lambda e: e.hops, "sum")
    assert moved > 20 and hops == moved and fwd > 0, (moved, hops, fwd)
    if r == 0:
        print(f"{moved} migrations, {fwd} forwarded messages, {hints} location hints")
    print(f"OK migration rank {r}")


amt.run(main)
