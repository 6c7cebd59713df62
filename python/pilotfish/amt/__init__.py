"""pilotfish.amt: load-balanced task collections on MPI (after DARMA/vt).

Runs inside any multi-rank task (mpiexec, prterun, srun, or a pilotfish task with ranks=N):

    from pilotfish import amt

    class Block(amt.Element):
        def __init__(self, n):            # self.index is already set
            self.data = ...
        def work(self, x):                # a handler
            self.collection[(self.index + 1) % 8].work(x)

    def main():
        coll = amt.Collection(Block, 8, args=(10,))    # collective, spread evenly
        with amt.epoch():                             # leaving waits for termination
            for i in coll.local_indices():
                coll[i].work(1)
        amt.phase()                                   # closes a load-measurement phase
        stats = amt.rebalance(strategy="tempered", model="median:3")

    amt.run(main)

See docs/amt.md. This package never imports the pilotfish client or agent.
"""

from __future__ import annotations

from . import _runtime
from ._collection import Collection, Element, ElementProxy
from ._errors import (
    AmtError,
    CollectiveMismatchError,
    HandlerError,
    IndexOutOfRangeError,
    MigrationError,
    UnknownHandlerError,
)
from ._instrument import LBStats, LoadModel, PhaseStats, imbalance

__all__ = [
    "AmtError",
    "CollectiveMismatchError",
    "Collection",
    "Element",
    "ElementProxy",
    "HandlerError",
    "IndexOutOfRangeError",
    "LBStats",
    "LoadModel",
    "MigrationError",
    "PhaseStats",
    "UnknownHandlerError",
    "configure",
    "epoch",
    "finalize",
    "imbalance",
    "mpi",
    "phase",
    "progress",
    "quiesce",
    "rank",
    "rebalance",
    "run",
    "size",
    "stats",
    "strategies",
]


def mpi():
    """The mpi4py.MPI module, loaded for the MPI that launched this process (see _mpi.py):
    import MPI through this (or import pilotfish.amt first) when both MPICH and Open MPI are
    installed in one environment."""
    from ._mpi import mpi as _mpi

    return _mpi()


def rank() -> int:
    """This process's rank (initialises MPI and the runtime on first use)."""
    return _runtime.get().rank


def size() -> int:
    """The number of ranks."""
    return _runtime.get().size


def configure(
    measure: bool | None = None,
    sync_timeout: float | None = None,
    batch_max: int | None = None,
    inband_max: int | None = None,
    clock: str | None = None,
    idle: str | None = None,
    send_ahead: float | None = None,
) -> None:
    """Runtime settings (local to this rank; set them the same everywhere).

    measure       time handlers as element load (default True); False: only add_load() counts
    sync_timeout  seconds a collective waits for the other ranks before raising
                  CollectiveMismatchError (default 120, env PILOTFISH_AMT_SYNC_TIMEOUT)
    batch_max     messages per destination batch before it is sent (default 512)
    inband_max    buffers smaller than this many bytes are pickled in-band (default 8192)
    clock         'wall' (default, time.perf_counter) or 'cpu' (time.thread_time: the
                  handler's own CPU time, blind to other processes on a shared machine)
    idle          'sleep' (default: back off up to 1 ms when there is nothing to do -- good
                  when ranks share cores) or 'spin' (poll continuously, like MPI's own waits)
    send_ahead    seconds (default 50e-6): before a handler runs, the batches pending for other
                  ranks are sent unless that handler's last run here took at most this long
                  (0: before every handler; short handlers in a row then no longer share
                  batches)
    """
    _runtime.get().configure(
        measure=measure,
        sync_timeout=sync_timeout,
        batch_max=batch_max,
        inband_max=inband_max,
        clock=clock,
        idle=idle,
        send_ahead=send_ahead,
    )


class epoch:
    """`with amt.epoch():` -- collective. Leaving the block waits until every message sent in
    it, and every message their handlers sent in turn, has been processed on every rank
    (four-counter termination detection). Epochs nest."""

    def __init__(self):
        self.id: int | None = None

    def __enter__(self):
        self.id = _runtime.get().open_epoch()
        return self

    def __exit__(self, et, ev, tb):
        _runtime.get().close_epoch(self.id, wait=et is None)
        return False


def progress() -> bool:
    """Run one scheduler step (receive, run queued handlers, send); True if it did anything."""
    return _runtime.get().progress()


def quiesce() -> None:
    """Collective: wait until every message sent outside epochs has been processed."""
    _runtime.get().quiesce()


def phase() -> PhaseStats:
    """Collective: wait for all top-level messages, then close the load-measurement phase.
    Returns the phase's per-rank loads and their imbalance (max/mean)."""
    return _runtime.get().phase()


def rebalance(
    strategy: str = "greedy", model: str = "last", collections=None, **options
) -> LBStats:
    """Collective: predict each element's load with `model` ('last', 'median:N', 'mean:N',
    'linear:N')
    from the closed phases, place elements with `strategy` ('greedy', 'greedy_refine',
    'hierarchical', 'tempered', or 'home' to send all back home) and migrate them.
    collections: only these collections' elements (default: every migratable collection).
    Options go to the strategy (see docs/amt.md). Returns LBStats."""
    return _runtime.get().rebalance(
        strategy=strategy, model=model, collections=collections, **options
    )


def finalize() -> None:
    """Collective: wait for all messages, then stop (amt.run and interpreter exit call it)."""
    _runtime.get().finalize()


def stats() -> dict:
    """This rank's counters (handlers run, messages forwarded, batches, bytes, waves ...)."""
    rt = _runtime.get()
    return {
        **rt.stats,
        **rt.messenger.stats,
        "waves": rt.td.waves,
        "rank": rt.rank,
        "size": rt.size,
    }


def strategies() -> list[str]:
    from .lb import STRATEGIES

    return sorted(STRATEGIES)


def run(main, *args, **kwargs):
    """Run main(*args, **kwargs) on every rank, then finalize. An exception on any rank is
    printed with its rank and aborts all ranks (MPI_Abort), so a failure never hangs."""
    import sys
    import traceback

    rt = _runtime.get()
    try:
        result = main(*args, **kwargs)
        rt.finalize()
        return result
    except BaseException as exc:
        if isinstance(exc, SystemExit) and not exc.code:
            rt.finalize()
            raise
        rt.failed = True
        sys.stderr.write(
            f"[pilotfish.amt rank {rt.rank}/{rt.size}] "
            f"{type(exc).__name__} in main; aborting all ranks\n"
        )
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        if rt.size > 1:
            rt.abort(1)
        raise
