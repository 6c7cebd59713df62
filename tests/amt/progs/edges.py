"""Edge cases of messaging, epochs and migration, on 2 ranks, in one job, in this order:
  init       an element's __init__ messages its neighbour, built or not yet: all delivered
  hooks      on_migrated_in starts a cascade across the ranks: it belongs to the migration's
             epoch, so all of it has run when the epoch ends
  errors     a handler sends a cascade to the other rank, then raises: HandlerError comes once
             the epoch has ended, with the cascade run
  pickle     an argument that cannot be pickled, for an element on the other rank: HandlerError
             naming the element and handler; the rest of its batch is delivered
  lost       an element whose state fails to unpickle where it arrives: reported; a later
             message to it fails at once, naming it; the other elements keep working
  loads      a negative load given to add_load: ValueError naming the element; a load model
             that predicts NaN: AmtError on every rank before any strategy runs
  destroyed  a send to a destroyed collection: AmtError at the send, on every rank
  mismatch   the ranks close different epochs: CollectiveMismatchError on both, not a hang
             (last: the runtime is unusable after it)
Counts right after an epoch are taken with plain MPI (no amt progress): what has run by then.
"""

import sys
import threading

from pilotfish import amt

MPI = amt.mpi()      # mpi4py on the launcher's MPI (see pilotfish/amt/_mpi.py)
COMM = MPI.COMM_WORLD


def say(text):
    sys.stdout.write(text + "\n")     # one write per line: the ranks share the output
    sys.stdout.flush()


def ran(coll):
    return COMM.allreduce(sum(e.runs for e in coll.local_elements()))


class Ring(amt.Element):
    def __init__(self):
        self.runs = 0
        self.collection[(self.index + 1) % len(self.collection)].hello()

    def hello(self):
        self.runs += 1


class Bouncer(amt.Element):
    def __init__(self):
        self.runs = 0
        self.refuse_unpickle = False

    def bounce(self, k, other):
        """Run k times in all, alternating between this element and `other`."""
        self.runs += 1
        if k > 1:
            self.collection[other].bounce(k - 1, self.index)

    def boom(self, k, other):
        self.collection[other].bounce(k, self.index)
        raise ValueError("boom after sending")

    def hello(self, x):
        self.runs += 1

    def on_migrated_in(self):
        if self.index == 1:
            self.collection[0].bounce(21, 1)

    def __setstate__(self, state):
        if state.get("refuse_unpickle"):
            raise RuntimeError("refusing to unpickle here")
        self.__dict__.update(state)


def expect(error, words, body):
    try:
        body()
    except error as exc:
        text = str(exc)
        assert all(w in text for w in words), (words, text)
        return text
    raise AssertionError(f"no {error.__name__}")


def epoch_on_rank0(fn):
    def body():
        with amt.epoch():
            if amt.rank() == 0:
                fn()
    return body


def main():
    amt.configure(measure=False, sync_timeout=30)
    r = amt.rank()
    assert amt.size() == 2

    ring = amt.Collection(Ring, 8)
    assert ring.reduce(lambda e: e.runs, "sum") == 8
    say(f"OK init rank {r}")

    b = amt.Collection(Bouncer, 8)                 # 0-3 on rank 0, 4-7 on rank 1
    with amt.epoch():
        if r == 0:
            b.migrate(1, 1)                       # element 1 arrives on rank 1: 21 bounces 0<->1
    assert ran(b) == 21, ran(b)
    say(f"OK hooks rank {r}")

    b = amt.Collection(Bouncer, 8)
    expect(amt.HandlerError, ["Bouncer[2]", "boom()", "boom after sending"],
           epoch_on_rank0(lambda: b[2].boom(31, 6)))
    assert ran(b) == 31, ran(b)
    say(f"OK errors rank {r}")

    b = amt.Collection(Bouncer, 8)
    text = expect(amt.HandlerError, ["Bouncer[6]", ".hello()", "cannot be pickled"],
                  epoch_on_rank0(lambda: (b[5].hello(1), b[6].hello(threading.Lock()))))
    assert ran(b) == 1, ran(b)
    say(f"OK pickle rank {r}: {text.splitlines()[0]}")

    b = amt.Collection(Bouncer, 8)
    if r == 0:
        b.local(2).refuse_unpickle = True
    expect(amt.HandlerError, ["cannot unpickle migrated Bouncer[2]"],
           epoch_on_rank0(lambda: b.migrate(2, 1)))
    expect(amt.HandlerError, ["Bouncer[2]", ".hello()", "lost in migration"],
           epoch_on_rank0(lambda: b[2].hello(0)))
    with amt.epoch():
        if r == 1:
            for i in (0, 3, 4):
                b[i].hello(0)
    assert ran(b) == 3, ran(b)
    amt.phase()
    say(f"OK lost rank {r}")

    mine = 3 if r == 0 else 4
    expect(ValueError, [f"Bouncer[{mine}]", "add_load(-1.0)", "finite number >= 0"],
           lambda: b.local(mine).add_load(-1.0))

    class NotANumber:
        spec = "nan"

        def predict(self, history):
            return float("nan")

    expect(amt.AmtError, ["predicted a negative or non-finite load", "nan"],
           lambda: amt.rebalance("tempered", model=NotANumber()))
    say(f"OK loads rank {r}")

    b.destroy()
    expect(amt.AmtError, ["'Bouncer'", "destroyed"], lambda: b[0].hello(0))
    say(f"OK destroyed rank {r}")

    def mismatched():
        with amt.epoch():
            if r == 0:
                with amt.epoch():
                    pass
    expect(amt.CollectiveMismatchError, ["different epochs"], mismatched)
    say(f"OK mismatch rank {r}")


if __name__ == "__main__":
    main()
