"""The messenger: batched per-destination active messages over MPI point-to-point.

Outgoing messages (plain tuples) are appended to one list per destination rank. A list is
sent when it reaches `batch_max` messages or about `batch_bytes` of array payload (so large
arrays leave at once and overlap with computation), and every list is sent when the scheduler
finishes a progress step (`flush`). Sending a batch:

    data = pickle.dumps(batch, protocol=5, buffer_callback=...)   # buffers >= inband_max
    Isend(header = [n_buffers, sizes..., data], tag=HDR)        #   go out-of-band:
    Isend(buffer_i, tag=BUF) for each out-of-band buffer         #   no copy into the stream

so a numpy array inside a message is sent straight from its memory (pickle protocol 5
out-of-band buffers) and received into a fresh bytearray that the unpickled array then uses:
one copy in total (the network's), none by pickle. The sender's arrays are referenced until the
Isend completes: a message's arrays must not be modified after sending (as with MPI_Isend).

Receiving polls with Improbe(ANY_SOURCE, HDR) (a matched probe, safe with any number of
messages in flight), receives the header with Mrecv, then the announced buffers from the same
source with tag BUF: MPI's non-overtaking rule between one pair of ranks on one communicator
and tag guarantees they are this header's buffers, because a sender posts a batch's Isends
together, in order.
"""

from __future__ import annotations

import pickle
import struct

HDR_TAG = 71
BUF_TAG = 72


def _raise(msg, exc):
    raise exc


def _out_of_band(buf):
    return False  # probing picklability: large buffers are not copied


class Messenger:
    def __init__(
        self, MPI, comm, batch_max: int = 512, inband_max: int = 8192, batch_bytes: int = 1 << 20
    ):
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.batch_max = batch_max
        self.inband_max = inband_max
        self.batch_bytes = batch_bytes
        self.out: list[list] = [[] for _ in range(self.size)]
        self.out_bytes = [0] * self.size
        self.dirty: set[int] = set()
        self.pending: list[tuple[list, tuple]] = []
        self._status = MPI.Status()
        # called with (message, exception) for a message that cannot be pickled: it is left
        # out of its batch (the others still go) and the owner reports it
        self.on_unpicklable = _raise
        self.stats = {
            "batches_sent": 0,
            "messages_sent": 0,
            "bytes_sent": 0,
            "oob_buffers_sent": 0,
            "batches_received": 0,
            "messages_received": 0,
        }

    # -- sending ------------------------------------------------------------------------------
    def post(self, dest: int, msg: tuple, nbytes: int = 0) -> None:
        """Queue msg for dest; the batch goes when it holds batch_max messages or about
        batch_bytes of array data (nbytes: the caller's estimate), else at the next flush."""
        box = self.out[dest]
        box.append(msg)
        if nbytes:
            self.out_bytes[dest] += nbytes
        if len(box) >= self.batch_max or self.out_bytes[dest] >= self.batch_bytes:
            self._send(dest)
        else:
            self.dirty.add(dest)

    def flush(self) -> None:
        if self.dirty:
            for dest in list(self.dirty):
                self._send(dest)
            self.dirty.clear()

    def _send(self, dest: int) -> None:
        batch = self.out[dest]
        if not batch:
            return
        self.out[dest] = []
        self.out_bytes[dest] = 0
        self.dirty.discard(dest)
        bufs: list = []
        inband_max = self.inband_max

        def callback(pb):
            m = pb.raw()
            if m.nbytes < inband_max:
                return True  # small: in the stream
            bufs.append(m)
            return False  # large: its own Isend, no copy

        try:
            data = pickle.dumps(batch, protocol=5, buffer_callback=callback)
        except Exception:  # noqa: BLE001 - find the culprits; the rest of the batch still goes
            bufs.clear()
            good = []
            for msg in batch:
                try:
                    pickle.dumps(msg, protocol=5, buffer_callback=_out_of_band)
                except Exception as exc:  # noqa: BLE001 -- the culprit named to the sender
                    self.on_unpicklable(msg, exc)
                else:
                    good.append(msg)
            if not good:
                return
            batch = good
            data = pickle.dumps(batch, protocol=5, buffer_callback=callback)
        sizes = [m.nbytes for m in bufs]
        head = struct.pack(f"<I{len(sizes)}Q", len(sizes), *sizes) + data
        MPI = self.MPI
        reqs = [self.comm.Isend([head, MPI.BYTE], dest, HDR_TAG)]
        for m in bufs:
            reqs.append(self.comm.Isend([m, MPI.BYTE], dest, BUF_TAG))
        self.pending.append((reqs, (head, bufs, batch)))
        st = self.stats
        st["batches_sent"] += 1
        st["messages_sent"] += len(batch)
        st["bytes_sent"] += len(head) + sum(sizes)
        st["oob_buffers_sent"] += len(bufs)

    def test_sends(self) -> None:
        if self.pending:
            Testall = self.MPI.Request.Testall
            self.pending = [p for p in self.pending if not Testall(p[0])]

    def sends_pending(self) -> bool:
        return bool(self.pending) or bool(self.dirty)

    # -- receiving ----------------------------------------------------------------------------
    def poll(self, max_batches: int = 32) -> list[tuple[int, list]]:
        """Up to max_batches received batches as (source, [messages])."""
        MPI = self.MPI
        comm = self.comm
        st = self._status
        got = []
        for _ in range(max_batches):
            m = comm.Improbe(MPI.ANY_SOURCE, HDR_TAG, st)
            if m is None:
                break
            src = st.Get_source()
            head = bytearray(st.Get_count(MPI.BYTE))
            m.Recv([head, MPI.BYTE])
            (n,) = struct.unpack_from("<I", head, 0)
            sizes = struct.unpack_from(f"<{n}Q", head, 4)
            bufs = []
            for size in sizes:
                b = bytearray(size)
                comm.Recv([b, MPI.BYTE], src, BUF_TAG)
                bufs.append(b)
            batch = pickle.loads(memoryview(head)[4 + 8 * n :], buffers=bufs)
            got.append((src, batch))
            self.stats["batches_received"] += 1
            self.stats["messages_received"] += len(batch)
        return got
