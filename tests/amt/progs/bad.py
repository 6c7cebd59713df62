"""Bad input at collectives. argv[1]:
  serialise  an element whose state cannot be pickled must migrate: MigrationError on every
             rank naming it, nothing moved, no message lost, the runtime keeps working
  mismatch   rank 0 calls rebalance while rank 1 calls phase: both get
             CollectiveMismatchError naming who called what
  timeout    rank 0 calls rebalance, rank 1 never does: rank 0 gets CollectiveMismatchError
             after sync_timeout and aborts the job (no hang)
  async      amt.migrate of an unpicklable element: HandlerError at the epoch's end, element
             still there and reachable
"""

import sys
import threading
from pathlib import Path

from pilotfish import amt

MPI = amt.mpi()      # mpi4py on the launcher's MPI (see pilotfish/amt/_mpi.py)


class Thing(amt.Element):
    def __init__(self):
        self.n = 0
        if self.index == 1:
            self.lock = threading.Lock()          # not picklable

    def poke(self):
        self.n += 1


def poke_all(coll):
    with amt.epoch():
        if amt.rank() == 0:
            for i in range(len(coll)):
                coll[i].poke()


def main():
    mode = sys.argv[1]
    amt.configure(measure=False, sync_timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 20)
    r = amt.rank()
    coll = amt.Collection(Thing, 8)
    for e in coll.local_elements():
        e.add_load(10.0 if r == 0 else 1.0)
    amt.phase()
    if mode == "serialise":
        try:
            amt.rebalance("greedy")
        except amt.MigrationError as exc:
            assert "Thing[1]" in str(exc) and "lock" in str(exc), exc
            print(f"rank {r}: MigrationError: {exc}")
        else:
            raise AssertionError("unserialisable element migrated")
        assert coll.local_indices() == list(range(4 * r, 4 * r + 4)), coll.local_indices()
        poke_all(coll)
        assert coll.reduce(lambda e: e.n, "sum") == 8
        if r == 0:
            del coll.local(1).lock
        st = amt.rebalance("greedy")              # now it can move
        assert st.migrations > 0
        poke_all(coll)
        assert coll.reduce(lambda e: e.n, "sum") == 16
        print(f"OK serialise rank {r}")
    elif mode == "async":
        try:
            with amt.epoch():
                if r == 1:
                    coll.migrate(1, 1)
        except amt.HandlerError as exc:
            assert "Thing[1]" in str(exc) and "serialis" in str(exc), exc
            print(f"rank {r}: HandlerError: {exc}")
        else:
            raise AssertionError("unserialisable element migrated")
        assert coll.is_local(1) == (r == 0)
        poke_all(coll)
        assert coll.reduce(lambda e: e.n, "sum") == 8
        print(f"OK async rank {r}")
    elif mode == "mismatch":
        try:
            if r == 0:
                amt.rebalance("greedy")
            else:
                amt.phase()
        except amt.CollectiveMismatchError as exc:
            assert "rebalance" in str(exc) and "phase" in str(exc), exc
            print(f"rank {r}: CollectiveMismatchError: {exc}")
            print(f"OK mismatch rank {r}")
            sys.stdout.flush()
            return
        raise AssertionError("mismatch not detected")
    elif mode == "timeout":
        if r == 0:
            try:
                amt.rebalance("greedy")
            except amt.CollectiveMismatchError as exc:
                print(f"rank {r}: CollectiveMismatchError: {exc}")
                print("OK timeout detected; aborting")
                sys.stdout.flush()
                if len(sys.argv) > 3:     # the launcher may drop output when the job aborts
                    Path(sys.argv[3]).write_text(f"OK timeout detected\n{exc}\n")
                MPI.COMM_WORLD.Abort(3)
            raise AssertionError("missing rebalance not detected")
        else:
            MPI.COMM_WORLD.Barrier()                   # never matched: only the abort ends it


if __name__ == "__main__":
    main()
