"""Termination detection per epoch: Mattern's four-counter method, waves as MPI Iallreduce.

Every message carries the id of its epoch: the epoch open in the main program when it was sent,
or, when a handler sends, the epoch of the message that handler is running (so everything a
message causes stays in its epoch: a diffusing computation). Each rank counts per epoch the
messages it *produced* (counted when posted: local queue or outgoing batch) and *consumed*
(counted after the handler returned, so the handler's own sends are counted first).
Forwarding a message to an element's new location is neither: the message is still in flight.

Leaving `with amt.epoch():` runs waves. A wave is one nonblocking MPI_Iallreduce of
(produced, consumed, errors) over all ranks, started when the rank is locally idle (its queue
drained, its batches sent) and completed while the rank keeps serving messages. With sums
P_k, C_k of wave k, the epoch has terminated when

    P_{k-1} == C_{k-1} == P_k == C_k

(two consecutive waves that agree and balance: counters only grow, so no message can have
been in flight across both waves). That is two Iallreduces after the last handler, whatever
the number of messages.

Why four-counter and not Dijkstra–Scholten: DS acknowledges every message (doubling the
messages, and the acks of a batch would have to travel back to each parent) and needs a
spanning tree of engaged ranks per epoch. Our epochs are collective (every rank enters and
leaves them in the same order), so a collective wave costs nothing extra to start, is
independent of the number of messages and rides on MPI's own optimised nonblocking
reduction. DARMA/vt makes the same choice for its collective epochs (and uses DS for rooted
epochs, which pilotfish.amt does not offer).

Nested epochs: each has its own counters; an inner epoch ends when its own messages have, even
while messages of the outer epoch are still running (their handlers are served during the
inner epoch's waves). Handlers never open epochs; every rank opens and closes them in the same
order, so the waves of one epoch are matched collectives on a communicator of their own.
"""

from __future__ import annotations

from collections import defaultdict


class TerminationDetector:
    def __init__(self, MPI, comm):
        import numpy as np

        self.np = np
        self.MPI = MPI
        self.comm = comm
        self.produced: defaultdict[int, int] = defaultdict(int)
        self.consumed: defaultdict[int, int] = defaultdict(int)
        self.errors: defaultdict[int, list] = defaultdict(list)
        self.waves = 0

    def wave(self, epoch: int):
        """Start a wave for `epoch`: (request, result array) -- result = [P, C, errors,
        sum of epochs, sum of squared epochs]."""
        np = self.np
        # epoch and epoch^2 ride along: their sums tell whether every rank waves for the same
        # epoch (a program that opens epochs on some ranks only would mix counters silently)
        send = np.array(
            [
                self.produced[epoch],
                self.consumed[epoch],
                len(self.errors[epoch]),
                epoch,
                epoch * epoch,
            ],
            dtype=np.int64,
        )
        recv = np.zeros(5, dtype=np.int64)
        req = self.comm.Iallreduce(send, recv, op=self.MPI.SUM)
        self.waves += 1
        return req, recv, send

    def forget(self, epoch: int) -> None:
        """Drop the counters of an epoch that has terminated."""
        if epoch != 0:
            self.produced.pop(epoch, None)
            self.consumed.pop(epoch, None)
            self.errors.pop(epoch, None)
