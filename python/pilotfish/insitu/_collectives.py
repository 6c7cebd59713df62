"""Collectives among the servers of one view, over the servers' own ZeroMQ sockets.

Rebuilt for every epoch (rank = position in the view). Used inside a pipeline's calls:
    total = self.comm.allreduce(local, op=operator.add)
Objects travel pickled (protocol 5: numpy arrays as buffers). MPI-style signatures, so
pipeline code reads as mpi4py's lower-case API. A message is unpickled only once the server
(_server.py) has checked that its connection proved to be the server of the rank it came
from (CURVE key from the group's view): pickles from anyone else are dropped unread.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable

import msgspec

from .._extras import require


class Collectives:
    mpi: Any = None  # an mpi4py Intracomm of the same servers, where the area runs on MPI

    def __init__(
        self, server: Any, rank: int, endpoints: list[str], tag: str, uids: list[str] | None = None
    ):
        self.server = server  # sends to peers, receives what peers sent (buffering the rest)
        self.rank = rank
        self.size = len(endpoints)
        self.endpoints = endpoints
        self.uids = uids  # the servers' uids by rank: who each message must come from
        self.tag = tag  # (pipeline, iteration, epoch): messages of other rounds never mix
        self._seq = 0

    def _send(self, to: int, obj: Any, seq: int) -> None:
        buffers: list = []
        payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        hdr = msgspec.msgpack.encode([self.tag, seq, self.rank, len(buffers)])
        self.server.peer_send(
            self.endpoints[to],
            [b"coll", hdr, payload] + [b.raw() for b in buffers],
            self.uids[to] if self.uids is not None else None,
        )

    def _recv(self, seq: int, frm: int) -> Any:
        frames = self.server.peer_recv(
            self.tag, seq, frm, self.uids[frm] if self.uids is not None else None
        )
        return pickle.loads(frames[0], buffers=frames[1:])

    def gather(self, obj: Any, root: int = 0) -> list | None:
        self._seq += 1
        seq = self._seq
        if self.rank != root:
            self._send(root, obj, seq)
            return None
        out = []
        for r in range(self.size):
            out.append(obj if r == root else self._recv(seq, r))
        return out

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        self._seq += 1
        seq = self._seq
        if self.rank == root:
            for r in range(self.size):
                if r != root:
                    self._send(r, obj, seq)
            return obj
        return self._recv(seq, root)

    def reduce(self, obj: Any, op: Callable[[Any, Any], Any], root: int = 0) -> Any:
        parts = self.gather(obj, root)
        if parts is None:
            return None
        acc = parts[0]
        for p in parts[1:]:
            acc = op(acc, p)
        return acc

    def allreduce(self, obj: Any, op: Callable[[Any, Any], Any]) -> Any:
        return self.bcast(self.reduce(obj, op, 0), 0)

    def allgather(self, obj: Any) -> list:
        return self.bcast(self.gather(obj, 0), 0)

    def barrier(self) -> None:
        self.allreduce(0, lambda a, b: 0)


class MPICollectives(Collectives):
    """The same calls over an mpi4py Intracomm of the view's servers (rank = view order);
    `mpi` is that communicator, for MPI-style pipeline code (Allreduce on buffers...)."""

    def __init__(self, comm: Any):
        self.mpi = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def gather(self, obj: Any, root: int = 0) -> list | None:
        return self.mpi.gather(obj, root=root)

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        return self.mpi.bcast(obj, root=root)

    def barrier(self) -> None:
        self.mpi.Barrier()


def build_mpi_comm(zmq_comm: Collectives) -> Any:
    """An Intracomm of the view's servers, each started as its own MPI job (mpiexec -n 1):
    servers 1..n-1 connect in view order to a port rank 0 opens, the group accepting each
    and merging (MPICH: measured 8-56 ms a step here). Server k gets the port name (over
    ZeroMQ) only when its turn comes: two servers connecting at once could be accepted in
    the wrong step."""
    MPI = require("mpi4py.MPI", "a staging area's MPI communicator")

    rank, size = zmq_comm.rank, zmq_comm.size
    port = MPI.Open_port() if rank == 0 else None
    comm = MPI.COMM_SELF.Dup() if rank == 0 else None
    for k in range(1, size):
        if rank < k:
            if rank == 0:
                zmq_comm._send(k, port, _TURN + k)
            assert comm is not None  # rank 0 dup'ed it, rank r merged it in step r < k
            inter = comm.Accept(port, root=0)
            merged = inter.Merge(high=False)
        elif rank == k:
            inter = MPI.COMM_SELF.Connect(zmq_comm._recv(_TURN + k, 0), root=0)
            merged = inter.Merge(high=True)
        else:
            continue
        inter.Free()
        if comm is not None:
            comm.Free()
        comm = merged
    if rank == 0:
        MPI.Close_port(port)
    return comm


_TURN = 1 << 20  # message numbers of the connect turns (apart from the collectives' own)
