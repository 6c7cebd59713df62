"""Collections, active messages (local, remote, batched, numpy out-of-band), broadcast,
reduce, nested epochs, bad input errors. 2 ranks."""

import numpy as np
from pilotfish import amt

MPI = amt.mpi()      # mpi4py on the launcher's MPI (see pilotfish/amt/_mpi.py)


class Cell(amt.Element):
    def __init__(self, scale):
        self.scale = scale
        self.pings = []
        self.total = 0.0
        self.seen_bcast = 0

    def ping(self, sender, seq):
        self.pings.append((sender, seq))

    def take(self, arr):
        assert arr.dtype == np.float64 and arr.flags.writeable
        arr *= 1.0                       # received arrays are writable
        self.total += float(arr.sum()) * self.scale

    def hello(self, tag):
        self.seen_bcast += 1
        assert tag == "hi"

    def chain(self, left):
        if left:
            n = len(self.collection)
            self.collection[(self.index + 1) % n].chain(left - 1)
        self.pings.append(("chain", left))

    def boom(self):
        raise ValueError("boom from " + repr(self.index))


class Grid(amt.Element):
    def __init__(self):
        self.visits = 0

    def visit(self):
        self.visits += 1
        i, j = self.index
        if i + 1 < self.collection.shape[0]:
            self.collection[(i + 1, j)].visit()


def main():
    r, p = amt.rank(), amt.size()
    assert p == MPI.COMM_WORLD.Get_size() == 2, p
    print(f"rank {r} on {MPI.Get_library_version().splitlines()[0].strip()}")
    cells = amt.Collection(Cell, 10, args=(2.0,))
    # even block distribution at first
    assert cells.local_indices() == list(range(5 * r, 5 * r + 5)), cells.local_indices()
    grid = amt.Collection(Grid, (4, 3))
    assert len(grid.local_indices()) == 6 and isinstance(grid.local_indices()[0], tuple)

    before = amt.stats()
    with amt.epoch():
        for i in cells.local_indices():              # same-rank messages: no MPI at all
            cells[i].ping(r, 0)
    after = amt.stats()
    assert after["messages_sent"] == before["messages_sent"], (before, after)
    assert after["local_messages"] - before["local_messages"] == 5

    # many small remote messages: batched per destination
    other = 1 - r
    b0 = amt.stats()["batches_sent"]
    with amt.epoch():
        for seq in range(1, 2001):
            cells.send(5 * other + seq % 5, "ping", r, seq)
    st = amt.stats()
    assert st["batches_sent"] - b0 <= 10, st           # 2000 messages in a few batches

    # numpy arrays travel out-of-band (pickle protocol 5 buffers)
    o0 = amt.stats()["oob_buffers_sent"]
    with amt.epoch():
        for i in range(10):
            cells[i].take(np.full(50_000, 1.0))
    assert amt.stats()["oob_buffers_sent"] - o0 >= 5
    total = cells.reduce(lambda e: e.total, "sum")
    assert total == 2 * 10 * 50_000 * 2.0, total

    # nested epochs + recursive chains + broadcast on a 2-D collection
    with amt.epoch():
        if r == 0:
            cells[3].chain(25)
        with amt.epoch():
            if r == 1:
                grid.broadcast("visit")
        visits = MPI.COMM_WORLD.allreduce(sum(e.visits for e in grid.local_elements()))
        assert visits == 3 * (1 + 2 + 3 + 4), visits       # inner epoch done at its exit
    chains = cells.reduce(lambda e: sum(1 for s, _ in e.pings if s == "chain"), "sum")
    assert chains == 26, chains
    if r == 0:
        cells.broadcast("hello", "hi")
    amt.quiesce()
    assert cells.reduce(lambda e: e.seen_bcast, "min") == 1
    assert cells.reduce(lambda e: e.seen_bcast, "max") == 1
    n = cells.reduce(lambda e: sum(1 for s, _ in e.pings if s in (0, 1)), "sum")
    assert n == 10 + 2 * 2000, n
    assert cells.reduce(r + 1, "sum") == 3 and cells.reduce(r, "max") == 1
    assert cells.reduce(np.array([r, 1]), "sum").tolist() == [1, 2]

    # bad input: clear errors, raised where the mistake is made
    try:
        cells[3].no_such_handler(1)
    except amt.UnknownHandlerError as exc:
        assert "Cell[3]" in str(exc) and "no_such_handler" in str(exc), exc
        print(f"rank {r}: UnknownHandlerError: {exc}")
    else:
        raise AssertionError("unknown handler accepted")
    for bad in (10, -1, "x", (1, 2)):
        try:
            cells[bad].ping(0, 0)
        except amt.IndexOutOfRangeError as exc:
            assert "outside collection 'Cell'" in str(exc), exc
        else:
            raise AssertionError(f"index {bad!r} accepted")
    try:
        grid[(4, 0)].visit()
    except IndexError as exc:
        print(f"rank {r}: IndexError: {exc}")
    else:
        raise AssertionError("index (4, 0) accepted")
    # a handler that raises: every rank learns it when the epoch ends
    try:
        with amt.epoch():
            if r == 1:
                cells[2].boom()          # runs on rank 0
    except amt.HandlerError as exc:
        assert "Cell[2]" in str(exc) and "boom" in str(exc) and exc.failures[0][0] == 0, exc
        print(f"rank {r}: HandlerError: {str(exc).splitlines()[0]}")
    else:
        raise AssertionError("handler error not reported")
    # still working afterwards
    with amt.epoch():
        cells[(r + 7) % 10].ping(r, -1)
    assert cells.reduce(lambda e: sum(1 for _, s in e.pings if s == -1), "sum") == 2
    print(f"OK basic rank {r}")


amt.run(main)
