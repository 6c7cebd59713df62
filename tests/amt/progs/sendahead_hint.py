"""A forwarded message's location hint leaves before its handler runs (issue 31), on 3 ranks
(counts, no timing).

Element 0 (home: rank 0) moves to rank 1. Rank 2, which has never heard of the move, sends it
`look`: the message goes to the home, rank 0, which forwards it to rank 1. Rank 1 tells rank 2
where the element is now (a hint) -- before the handler runs, and sent, not left pending
behind it: inside `look`, this rank's hint counter (amt.stats()["hints"]) is already 1 and
nothing is pending for rank 2. Before issue 31 the hint was posted after the handler returned
(the counter read 0 inside it). Then rank 2's next message goes straight to rank 1: rank 0
forwards nothing more.
"""

import sys

from pilotfish import amt
from pilotfish.amt import _runtime

COMM = amt.mpi().COMM_WORLD


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Probe(amt.Element):
    def __init__(self):
        self.seen = []

    def look(self):
        rt = _runtime.get()
        self.seen.append((amt.stats()["hints"], len(rt.messenger.out[2])))


def check(name, ok, detail):
    total = COMM.allreduce(int(bool(ok)))
    if total != COMM.Get_size():
        raise SystemExit(f"FAIL {name} rank {amt.rank()}: {detail}")
    say(f"OK {name} rank {amt.rank()}")


def main():
    r = amt.rank()
    assert amt.size() == 3, "run on 3 ranks"
    coll = amt.Collection(Probe, 6)          # 2 per rank: element 0's home is rank 0
    with amt.epoch():
        if r == 0:
            coll.migrate(0, 1)
    here = coll.is_local(0)
    check("moved", here == (r == 1), f"element 0 local here: {here}")

    with amt.epoch():
        if r == 2:
            coll[0].look()                   # to the home (rank 0), forwarded to rank 1
    seen = coll.local(0).seen if r == 1 else [(1, 0)]
    forwarded = amt.stats()["forwarded"]
    check("hint", seen == [(1, 0)] and forwarded == (1 if r == 0 else 0),
          f"inside the forwarded handler (hints, pending for rank 2): {seen}; "
          f"forwarded here: {forwarded}")

    with amt.epoch():
        if r == 2:
            coll[0].look()                   # rank 2 knows where it is now: no forward
    forwarded = amt.stats()["forwarded"]
    seen = coll.local(0).seen if r == 1 else [(1, 0), (1, 0)]
    check("direct", forwarded == (1 if r == 0 else 0) and seen == [(1, 0), (1, 0)],
          f"after the hint: forwarded here {forwarded}; seen {seen}")


amt.run(main)
