"""A staging server: one member of a staging area's service group.

    python -m pilotfish.insitu._server      (started by StagingArea; a pilot task)

One ZeroMQ ROUTER socket, announced as the member's endpoint, takes both clients' requests
(frames: b"req", msgpack header, data frames) and the other servers' collective messages
(b"coll", ...). Staged arrays stay in the frames they arrived in (no copy). While a pipeline
waits in a collective, client requests that arrive are kept for after.
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
import time
import traceback

import msgspec
import zmq

from .. import service
from .._sockets import host_address
from ._collectives import Collectives, MPICollectives, build_mpi_comm
from ._pipeline import InsituError, lookup

PEER_TIMEOUT_S = 60.0
VIEW_WAIT_S = 5.0

_enc = msgspec.msgpack.encode
_dec = msgspec.msgpack.decode


class Active:
    __slots__ = ("iteration", "blocks", "comm")

    def __init__(self, iteration: int, comm: Collectives):
        self.iteration = iteration
        self.blocks: set = set()
        self.comm = comm


class Server:
    def __init__(self):
        self.uid = os.environ["PILOTFISH_MEMBER_UID"]
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        host = host_address()
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self.peers: dict[str, zmq.Socket] = {}
        self.inbox: dict[tuple, list] = {}
        self.backlog: collections.deque = collections.deque()
        self.pipelines: dict[str, object] = {}
        self.configs: dict[str, tuple] = {}
        self.active: dict[str, Active] = {}
        # an area on MPI: each server is an MPI job of its own (mpiexec -n 1); per view, the
        # servers connect into one Intracomm (kept while the view stays the same)
        self.use_mpi = os.environ.get("PILOTFISH_INSITU_MPI") == "1"
        self.mpi_key: tuple | None = None
        self.mpi_comm = None
        if self.use_mpi:
            from .._mpi import mpi

            mpi()  # MPI_Init now (not in the first iteration), on the launcher's libmpi
        self.group = service.Group(os.environ["PILOTFISH_SERVICE_GROUP"])
        self.me = service.announce(self.endpoint, role="staging")

    # -- peers (collectives) -------------------------------------------------------------
    def peer_send(self, endpoint: str, frames: list) -> None:
        s = self.peers.get(endpoint)
        if s is None:
            s = self.peers[endpoint] = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 1000)
            s.setsockopt(zmq.IDENTITY, f"peer:{self.uid}".encode())
            s.connect(endpoint)
        s.send_multipart(frames, copy=False)

    def peer_recv(self, tag: str, seq: int, frm: int) -> list:
        key = (tag, seq, frm)
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while key not in self.inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InsituError(f"server rank {frm} sent nothing for {PEER_TIMEOUT_S:g}s "
                                  f"({tag}, step {seq})")
            if self.sock.poll(min(left, 1.0) * 1000):
                self._take(self.sock.recv_multipart(copy=False), during_collective=True)
        return self.inbox.pop(key)

    def _take(self, frames: list, during_collective: bool = False) -> None:
        kind = frames[1].bytes
        if kind == b"coll":
            tag, seq, frm, _ = _dec(frames[2].bytes)
            self.inbox[(tag, seq, frm)] = [f.buffer for f in frames[3:]]
        elif during_collective:
            self.backlog.append(frames)
        else:
            self._request(frames)

    # -- clients -----------------------------------------------------------------------------
    def run(self) -> int:
        while True:
            while self.backlog:
                self._request(self.backlog.popleft())
            if self.sock.poll(100):
                while True:
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._take(frames)
            elif self.me.leaving.is_set() and not self.active:
                return 0

    def _request(self, frames: list) -> None:
        ident = frames[0]
        try:
            hdr = _dec(frames[2].bytes)
        except Exception as e:  # noqa: BLE001
            self.sock.send_multipart([ident, b"rep", _enc([None, False, f"bad request: {e}"])])
            return
        rid = hdr.get("id") if isinstance(hdr, dict) else None
        try:
            result = self._do(hdr, frames[3:])
            reply = [rid, True, None]
            payload = [pickle.dumps(result, protocol=5)] if result is not None else []
        except InsituError as e:
            reply, payload = [rid, False, str(e)], []
        except Exception as e:  # noqa: BLE001 -- a pipeline's error: the client learns it
            tb = traceback.format_exc(limit=6)
            reply, payload = [rid, False, f"{type(e).__name__}: {e}\n{tb}"], []
        self.sock.send_multipart([ident, b"rep", _enc(reply)] + payload)

    def _pipeline(self, name: str):
        p = self.pipelines.get(name)
        if p is None:
            raise InsituError(f"no pipeline {name!r} on {self.uid} (create_pipeline first)")
        return p

    def _do(self, hdr: dict, data: list):
        op = hdr["op"]
        name = hdr.get("pipeline")
        if op == "create":
            config, module = hdr.get("config") or {}, hdr.get("module")
            if name in self.pipelines:
                if self.configs[name] != (config, module):
                    raise InsituError(f"pipeline {name!r} exists with another config")
                return None
            cls = lookup(hdr.get("type") or name, module)
            self.pipelines[name] = cls(config)
            self.pipelines[name]._type = hdr.get("type")
            self.configs[name] = (config, module)
            return None
        if op == "destroy":
            p = self.pipelines.pop(name, None)
            self.active.pop(name, None)
            self.configs.pop(name, None)
            if p is not None:
                p.destroy()
            return None
        if op == "warm":
            t0 = time.perf_counter()
            for p in self.pipelines.values():
                p.warm()
            return time.perf_counter() - t0
        if op == "abandon":  # a resumed client: iterations its killed predecessor left active
            active, self.active = self.active, {}
            for n, a in active.items():
                try:
                    self.pipelines[n].deactivate(a.iteration)
                except Exception as e:  # noqa: BLE001 -- the pipeline's own code
                    print(f"abandoning {n} iteration {a.iteration}: {e}", file=sys.stderr)
            return None
        if op == "ping":  # what this server runs, as the requests that made it
            return {"uid": self.uid, "pipelines": {
                n: {"op": "create", "pipeline": n, "config": c, "module": m,
                    "type": getattr(self.pipelines[n], "_type", None)}
                for n, (c, m) in self.configs.items()}}
        p = self._pipeline(name)
        it = hdr.get("iteration")
        a = self.active.get(name)
        if op == "activate":
            if a is not None:
                raise InsituError(f"pipeline {name!r}: iteration {a.iteration} is active "
                                  f"(deactivate it first)")
            epoch, members = hdr["epoch"], hdr["members"]
            self._check_view(epoch)
            uids = [m[0] for m in members]
            if self.uid not in uids:
                raise InsituError(f"stale view: {self.uid} is not in the client's view "
                                  f"(epoch {epoch})")
            comm = Collectives(self, uids.index(self.uid), [m[1] for m in members],
                               f"{name}/{it}/{epoch}")
            if self.use_mpi:
                comm = self._mpi_for(tuple(uids), comm)
            p.comm = comm
            p.activate(it)
            self.active[name] = Active(it, comm)
            return None
        if a is None or a.iteration != it:
            raise InsituError(f"pipeline {name!r}: {op} of iteration {it}, which is not "
                              f"active" + (f" (iteration {a.iteration} is)" if a else
                                           " (activate it first)"))
        p.comm = a.comm
        if op == "stage":
            block = hdr["block"]
            key = block if not isinstance(block, list) else tuple(block)
            if key in a.blocks:
                raise InsituError(f"block {block!r} staged twice in iteration {it}")
            import numpy as np

            array = np.frombuffer(data[0].buffer, dtype=np.dtype(hdr["dtype"])).reshape(hdr["shape"])
            a.blocks.add(key)
            p.stage(block, array, hdr.get("meta") or {})
            return None
        if op == "execute":
            return p.execute(it)
        if op == "deactivate":
            p.deactivate(it)
            del self.active[name]
            return None
        raise InsituError(f"unknown request {op!r}")

    def _mpi_for(self, key: tuple, zmq_comm: Collectives) -> MPICollectives:
        if self.mpi_key != key:
            old, self.mpi_comm = self.mpi_comm, None
            if old is not None:
                old.Free()
            self.mpi_comm = build_mpi_comm(zmq_comm)
            self.mpi_key = key
        return MPICollectives(self.mpi_comm)

    def _check_view(self, epoch: int) -> None:
        """The client's view must be the group's current one (Colza: a stale view fails
        activate cleanly; the client refreshes and retries)."""
        try:
            view = self.group.wait(lambda v: v.epoch >= epoch, VIEW_WAIT_S)
        except service.ServiceError:
            raise InsituError(f"stale view: the server never saw epoch {epoch}") from None
        if view.epoch != epoch:
            raise InsituError(f"stale view: epoch {epoch}, the group is at {view.epoch}")


def main() -> int:
    return Server().run()


if __name__ == "__main__":
    sys.exit(main())
