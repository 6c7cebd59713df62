"""Clients of a staging area: the user program (StagingArea) and tasks in the pilot
(connect), each driving pipelines through a PipelineHandle.

Per iteration: activate (holds the group's view: membership cannot change until
deactivate; a stale view is refreshed and retried) -> stage (blocks go to servers by a
placement over the view; arrays travel as ZeroMQ frames, not copied) -> execute (every
server runs the pipeline; rank 0's result comes back) -> deactivate (releases the view).

Every connection to a server is authenticated (_auth.py): the client proves itself with the
group's client secret (in the view; the agent gives views only to the program that started
the area and to tasks of its pilot), and a reply is unpickled only once it proved to come
from the server the view names (its reply proof; with encrypt=True, its CURVE key).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import sys
import threading
import time
import zlib
from typing import Any, Callable

import msgspec
import zmq

from . import _auth
from ._pipeline import InsituError

REPLY_TIMEOUT_S = 120.0
STALE_RETRIES = 3
_enc = msgspec.msgpack.encode
_dec = msgspec.msgpack.decode


def hash_placement(block_id: Any, n: int) -> int:
    """Default placement: a stable hash of the block id modulo the view's size."""
    return zlib.crc32(repr(block_id).encode()) % n


class _Channel:
    """Request/reply with the servers: a DEALER per server endpoint (not thread-safe).
    keys(endpoint): how to speak to the server there (the area's _keys): (mode, server uid,
    server CURVE key or None, the group's client key pair), or None for a server that takes
    anyone (secure=False)."""

    def __init__(self, keys: Callable[[str], tuple | None] | None = None):
        self.keys = keys
        self.proofs: dict[str, bytes] = {}  # endpoint -> what its replies must carry
        self.ctx = zmq.Context()
        self.socks: dict[str, zmq.Socket] = {}
        self.ids = itertools.count()
        self.outstanding: dict[str, list[int]] = {}  # endpoint -> request ids not answered

    def sock(self, endpoint: str) -> zmq.Socket:
        s = self.socks.get(endpoint)
        if s is None:
            keys = self.keys(endpoint) if self.keys is not None else None
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)
            if keys is not None:
                mode, server_uid, server_key, (public, secret) = keys
                if mode == _auth.CURVE:
                    s.setsockopt(zmq.CURVE_SERVERKEY, server_key)
                    s.setsockopt(zmq.CURVE_PUBLICKEY, public)
                    s.setsockopt(zmq.CURVE_SECRETKEY, secret)
                else:
                    s.setsockopt(zmq.PLAIN_USERNAME, b"client")
                    s.setsockopt(zmq.PLAIN_PASSWORD, _auth.request_password(secret, server_uid))
                    self.proofs[endpoint] = _auth.reply_proof(secret, server_uid)
            s.connect(endpoint)
            self.socks[endpoint] = s
        return s

    def send(self, endpoint: str, hdr: dict, data: list | None = None) -> int:
        for i, d in enumerate(data or ()):
            n = memoryview(d).nbytes
            if n > _auth.MAX_FRAME:  # the server would drop the connection at its header
                raise InsituError(
                    f"data[{i}] of {hdr.get('op', 'a request')} is {n} bytes: a staging "
                    f"server takes frames of at most {_auth.MAX_FRAME} bytes (split the block, or "
                    f"set PILOTFISH_INSITU_FRAME_MB for the client and the servers alike)"
                )
        rid = next(self.ids)
        hdr["id"] = rid
        self.sock(endpoint).send_multipart([b"req", _enc(hdr)] + (data or []), copy=False)
        self.outstanding.setdefault(endpoint, []).append(rid)
        return rid

    def collect(self, endpoints: list[str] | None = None) -> dict[int, tuple]:
        """Every outstanding reply of these servers: {request id: (ok, error, result)}."""
        out = {}
        for ep in list(self.outstanding) if endpoints is None else endpoints:
            waiting = self.outstanding.get(ep) or []
            s = self.sock(ep)
            deadline = time.monotonic() + REPLY_TIMEOUT_S
            while waiting:
                left = deadline - time.monotonic()
                if left <= 0 or not s.poll(int(left * 1000)):  # (as pyzmq truncates a float)
                    raise InsituError(f"server {ep} did not answer within {REPLY_TIMEOUT_S:g}s")
                frames = s.recv_multipart()
                proof = self.proofs.get(ep)
                if len(frames) < 3 or (proof is not None and not _auth.same(frames[1], proof)):
                    print(
                        f"pilotfish.insitu: a reply from {ep} without the server's proof dropped",
                        file=sys.stderr,
                    )  # (not what the view's server sent)
                    continue
                rid, ok, err = _dec(frames[2])
                result = None
                if ok and len(frames) > 3:
                    import pickle

                    result = pickle.loads(frames[3])
                out[rid] = (ok, err, result)
                if rid in waiting:
                    waiting.remove(rid)
            self.outstanding.pop(ep, None)
        return out

    def broadcast(self, endpoints, hdr: dict) -> str | None:
        """The same request to each server; every answer waited for; the first refusal."""
        for ep in endpoints:
            self.send(ep, dict(hdr))
        return first_error(self.collect())

    def close(self) -> None:
        for s in self.socks.values():
            s.close(0)
        self.ctx.term()


def first_error(replies: dict) -> str | None:
    return next((e for ok, e, _ in replies.values() if not ok), None)


class PipelineHandle:
    """One pipeline of an area, driven by this client. With comm (an mpi4py communicator of
    the client's ranks): every rank stages its own blocks; rank 0 holds the view and drives
    activate/execute/deactivate (all ranks call them: they are collective)."""

    def __init__(
        self,
        area: "_AreaBase",
        name: str,
        comm: Any = None,
        placement: Callable[[Any, int], int] = hash_placement,
    ):
        self.area = area
        self.name = name
        self.comm = comm
        self.placement = placement
        self.ch = _Channel(area._keys)
        self.iteration: int | None = None
        self.members: list = []  # [(uid, endpoint)] of the held view
        self.epoch: int | None = None
        self._hold = None
        self._root = comm is None or comm.Get_rank() == 0
        self.times: list[dict] = []  # per iteration: activate/stage/execute/deactivate seconds
        self._t: dict = {}

    # -- the iteration -----------------------------------------------------------------------
    def activate(self, iteration: int) -> None:
        if self.iteration is not None:
            raise InsituError(f"pipeline {self.name!r}: iteration {self.iteration} is active")
        t0 = time.perf_counter()
        err = None
        view: tuple[int, list] | None = None
        if self._root:
            try:
                view = self._activate_root(iteration)
            except InsituError as e:
                err = str(e)
        if self.comm is not None:
            view, err = self.comm.bcast((view, err), root=0)
        if err is not None:
            raise InsituError(err)
        assert view is not None  # no error: the root's view (here or by bcast)
        self.epoch, self.members = view
        self.iteration = iteration
        self._t = {
            "iteration": iteration,
            "servers": len(self.members),
            "activate": time.perf_counter() - t0,
            "stage": 0.0,
        }

    def _activate_root(self, iteration: int) -> tuple[int, list]:
        why = None
        for attempt in range(STALE_RETRIES + 1):
            hold = self.area._views.hold()
            view = hold.view
            members = [(m.uid, m.endpoint) for m in view.members]
            if not members:
                hold.release()
                raise InsituError(f"staging area {self.area.name!r} has no servers")
            endpoints = [ep for _, ep in members]
            try:
                self.area._ensure_pipelines(self.ch, members)
                why = self.ch.broadcast(
                    endpoints,
                    {
                        "op": "activate",
                        "pipeline": self.name,
                        "iteration": iteration,
                        "epoch": view.epoch,
                        "members": [list(m) for m in members],
                    },
                )
            except InsituError as e:
                why = str(e)
            if why is None:
                self._hold = hold
                return view.epoch, members
            # undo on the servers that activated, then refresh and retry if stale
            self.ch.broadcast(
                endpoints, {"op": "deactivate", "pipeline": self.name, "iteration": iteration}
            )
            hold.release()
            if not why.startswith("stale view"):
                raise InsituError(f"activate {iteration}: {why}")
            time.sleep(0.05 * (attempt + 1))
        raise InsituError(
            f"activate {iteration}: the view stayed stale after {STALE_RETRIES} refreshes: {why}"
        )

    def stage(self, block_id: Any, array: Any, meta: dict | None = None) -> None:
        """Send one block (a numpy array, sent from its own buffer) to its server."""
        import numpy as np

        if self.iteration is None:
            raise InsituError(f"pipeline {self.name!r}: stage before activate")
        t0 = time.perf_counter()
        a = np.ascontiguousarray(array)
        try:
            json.dumps(block_id)
            if meta is not None:
                json.dumps(meta)
        except (TypeError, ValueError) as e:
            raise InsituError(
                f"block {block_id!r}: block_id and meta must be JSON-able: {e}"
            ) from None
        _, ep = self.members[self.placement(block_id, len(self.members))]
        self.ch.send(
            ep,
            {
                "op": "stage",
                "pipeline": self.name,
                "iteration": self.iteration,
                "block": block_id,
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "meta": meta or {},
            },
            [a.data.cast("B") if a.size else b""],  # (a.data: memoryview(a))
        )
        self._t["stage"] += time.perf_counter() - t0

    def _flush_stages(self) -> str | None:
        """Wait for every stage acknowledgement; the first refusal, or None."""
        t0 = time.perf_counter()
        try:
            why = first_error(self.ch.collect())
        except InsituError as e:
            why = str(e)
        self._t["stage"] += time.perf_counter() - t0
        return why

    def execute(self, iteration: int) -> Any:
        """Run the pipeline on every server of the view; rank 0's result (None on client
        ranks other than 0)."""
        self._check(iteration, "execute")
        t0 = time.perf_counter()
        err = self._flush_stages()
        if self.comm is not None:  # every rank's blocks are in before anyone executes
            errs = self.comm.allgather(err)
            err = next((e for e in errs if e), None)
        if err is not None:
            raise InsituError(err)
        result = None
        if self._root:
            rids = [
                self.ch.send(ep, {"op": "execute", "pipeline": self.name, "iteration": iteration})
                for _, ep in self.members
            ]
            replies = self.ch.collect()
            errors = [replies[r][1] for r in rids if not replies[r][0]]
            if errors:
                err = errors[0]
            else:
                result = replies[rids[0]][2]
        if self.comm is not None:
            err = self.comm.bcast(err, root=0)
        if err is not None:
            raise InsituError(f"execute {iteration}: {err}")
        self._t["execute"] = time.perf_counter() - t0
        return result

    def execute_async(self, iteration: int) -> concurrent.futures.Future:
        """execute() in a thread: the simulation computes on while the area analyses (stage
        nothing for this pipeline until the future is done)."""
        pool = self.area._pool()
        return pool.submit(self.execute, iteration)

    def deactivate(self, iteration: int) -> None:
        self._check(iteration, "deactivate")
        t0 = time.perf_counter()
        err = self._flush_stages()
        if self.comm is not None:
            self.comm.Barrier()
        if self._root:
            err = err or self.ch.broadcast(
                [ep for _, ep in self.members],
                {"op": "deactivate", "pipeline": self.name, "iteration": iteration},
            )
            hold, self._hold = self._hold, None
            if hold is not None:
                hold.release()
        self.iteration = None
        self._t["deactivate"] = time.perf_counter() - t0
        self.times.append(self._t)
        if err is not None:
            raise InsituError(f"deactivate {iteration}: {err}")

    def _check(self, iteration: int, what: str) -> None:
        if self.iteration is None or self.iteration != iteration:
            raise InsituError(
                f"pipeline {self.name!r}: {what} of iteration {iteration}, "
                f"which is not active"
                + (
                    f" (iteration {self.iteration} is)"
                    if self.iteration is not None
                    else " (activate it first)"
                )
            )

    def close(self) -> None:
        if self.iteration is not None:
            try:
                self.deactivate(self.iteration)
            except InsituError:
                pass
        self.ch.close()


class _AreaBase:
    name: str
    _views: Any

    def __init__(self):
        self._pipelines: dict[str, dict] = {}  # name -> create request
        self._created: dict[str, set[str]] = {}  # member uid -> pipelines made there
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # endpoint -> (mode, uid, CURVE key or None) of the server there, from views and news
        self._servers: dict[str, tuple] = {}

    def _learn_server(self, uid: str, endpoint: str, info: dict | None) -> None:
        info = info if isinstance(info, dict) else {}
        key = info.get("curve")
        self._servers[endpoint] = (
            info.get("auth", _auth.NONE),
            uid,
            key.encode() if isinstance(key, str) else None,
        )

    def _keys(self, endpoint: str) -> tuple | None:
        """How to speak to the server at endpoint (see _Channel), as its view says."""
        view = self._views.view
        if view is not None:
            for m in view.members:
                self._learn_server(m.uid, m.endpoint, m.info)
        if endpoint not in self._servers:
            raise InsituError(f"staging area {self.name!r}: {endpoint} is no server of it")
        mode, uid, key = self._servers[endpoint]
        if mode == _auth.NONE:
            return None  # the area runs with secure=False
        if mode not in _auth.MODES or (mode == _auth.CURVE and key is None):
            raise InsituError(
                f"staging area {self.name!r}: server {uid} announced "
                f"{mode!r}, which this client does not speak"
            )
        if view is None or view.client_key is None:
            raise InsituError(
                f"staging area {self.name!r}: its client key did not come with its view"
            )
        return mode, uid, key, view.client_key

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(4, "pilotfish-insitu")
        return self._executor

    def _ensure_pipelines(self, ch: _Channel, members: list) -> None:
        """Make every known pipeline on members that joined since (they start bare)."""
        sent = []
        for uid, ep in members:
            have = self._created.setdefault(uid, set())
            for name, req in self._pipelines.items():
                if name not in have:
                    ch.send(ep, dict(req))
                    sent.append((uid, name))
        if not sent:
            return
        why = first_error(ch.collect())
        if why is not None:
            raise InsituError(why)
        for uid, name in sent:
            self._created[uid].add(name)

    @property
    def members(self) -> list:
        """The servers of the current view."""
        return self._views.view.members

    @property
    def epoch(self) -> int:
        return self._views.view.epoch

    def wait_for_servers(self, n: int, timeout: float | None = 120.0) -> None:
        """Block until the area's view has n servers."""
        self._views.wait(lambda v: len(v.members) == n, timeout)

    def _learn(self) -> None:
        """Adopt the pipelines another client created (a server says what it runs)."""
        view = self._views.view
        if view is None or not view.members:
            return
        ch = _Channel(self._keys)
        try:
            m = view.members[0]
            ch.send(m.endpoint, {"op": "ping"})
            ((ok, _, result),) = ch.collect().values()
        finally:
            ch.close()
        if ok and result:
            for name, req in result["pipelines"].items():
                self._pipelines.setdefault(name, req)
                self._created.setdefault(m.uid, set()).add(name)

    def create_pipeline(
        self,
        name: str,
        config: dict | None = None,
        module: str | None = None,
        type: str | None = None,
    ) -> None:
        """Create pipeline `name` (of registered type `type`, default `name`) with a JSON-able
        config on every server, now and on servers that join later. InsituError with the
        servers' reason if it cannot be made (nothing is left half-made)."""
        try:
            config = json.loads(json.dumps(config or {}))
        except (TypeError, ValueError) as e:
            raise InsituError(f"pipeline {name!r}: config must be JSON-able: {e}") from None
        if name in self._pipelines:
            raise InsituError(f"pipeline {name!r} exists in this area")
        req = {"op": "create", "pipeline": name, "config": config, "module": module, "type": type}
        ch = _Channel(self._keys)
        with self._views.hold() as view:
            members = [(m.uid, m.endpoint) for m in view.members]
            endpoints = [ep for _, ep in members]
            why = ch.broadcast(endpoints, req)
            if why is not None:
                ch.broadcast(endpoints, {"op": "destroy", "pipeline": name})
                ch.close()
                raise InsituError(f"pipeline {name!r}: {why}")
        ch.close()
        self._pipelines[name] = req
        for uid, _ in members:
            self._created.setdefault(uid, set()).add(name)

    def destroy_pipeline(self, name: str) -> None:
        if self._pipelines.pop(name, None) is None:
            raise InsituError(f"no pipeline {name!r} in this area")
        ch = _Channel(self._keys)
        with self._views.hold() as view:
            ch.broadcast([m.endpoint for m in view.members], {"op": "destroy", "pipeline": name})
            for m in view.members:
                self._created.get(m.uid, set()).discard(name)
        ch.close()

    def pipeline(
        self, name: str, comm: Any = None, placement: Callable[[Any, int], int] = hash_placement
    ) -> PipelineHandle:
        """A client handle of pipeline `name` (see PipelineHandle)."""
        if comm is None or comm.Get_rank() == 0:
            if name not in self._pipelines:
                self._learn()
            if name not in self._pipelines:
                raise InsituError(
                    f"unknown pipeline {name!r} in this area "
                    f"(create_pipeline first; known: {sorted(self._pipelines)})"
                )
        return PipelineHandle(self, name, comm, placement)


_AREAS_MADE = [0]  # unnamed staging areas this process started
_AREAS_LOCK = threading.Lock()


class StagingArea(_AreaBase):
    """A staging area: a service group of staging servers on a pilot (the user program's
    side). servers: how many; member_resources: ServiceDescription fields for each
    (cores_per_rank, mem_per_rank, ...)."""

    def __init__(
        self,
        tmgr: Any,
        servers: int = 1,
        name: str | None = None,
        ready_timeout: float = 120.0,
        mpi: bool | None = None,
        secure: bool = True,
        encrypt: bool = False,
        **member_resources: Any,
    ):
        """mpi: the servers' collectives over MPI (each server its own `mpiexec -n 1` job,
        connected per view with MPI_Comm_accept/connect + merge; pipelines get the
        communicator as self.comm.mpi); None (default): where MPICH's mpiexec and mpi4py
        are installed; False: ZeroMQ only. Every connection to a server is authenticated
        (insitu/_auth.py); encrypt=True: and encrypted (CURVE; it moves ~0.7 GB/s here against
        ~2.7 GB/s); secure=False: the servers take requests and collective messages from any
        process that reaches their port (for measurements: never on a machine shared with
        other users)."""
        super().__init__()
        import pilotfish as pf

        if mpi is None:
            mpi = mpi_available()
        self.mpi = bool(mpi)
        self.secure = bool(secure)
        self.encrypt = bool(encrypt) and self.secure
        env = dict(member_resources.pop("environment", {}) or {})
        if self.mpi:
            env["PILOTFISH_INSITU_MPI"] = "1"
            member_resources.setdefault("launcher", "mpiexec")
        if not self.secure or self.encrypt:
            env[_auth.ENV] = _auth.CURVE if self.encrypt else _auth.NONE
        if env:
            member_resources["environment"] = env
        with _AREAS_LOCK:
            # the default name is the area's number among those this program made: the same
            # program run again on a resumed session names it alike, and re-attaches it (its
            # servers live on); an area that failed to start takes no number
            self.name = name or f"staging-{_AREAS_MADE[0]}"
            desc = pf.ServiceDescription(
                name=self.name,
                executable=sys.executable,
                arguments=["-m", "pilotfish.insitu._server"],
                **member_resources,
            )
            self.group = tmgr.submit_service_group(desc, replicas=servers)
            if name is None:
                _AREAS_MADE[0] += 1
        self._views = self.group
        self.group.wait_ready(timeout=ready_timeout)
        if self.group.reattached:  # a resumed program: what its killed run left active goes
            ch = _Channel(self._keys)
            try:
                why = ch.broadcast(self.group.endpoints, {"op": "abandon"})
            finally:
                ch.close()
            if why is not None:
                raise InsituError(f"staging area {self.name!r}, resumed: {why}")

    def resize(self, n: int, wait: bool = True, warm: bool = False, timeout: float = 120.0) -> None:
        """n servers. Joins and leaves take effect between iterations (an active iteration
        holds the view); with wait, returns once the view has n servers. warm: new servers
        create every pipeline and warm it up (VTK's first render...) before they join, so
        the iteration after a join is no slower than its neighbours (implies wait)."""
        if not warm:
            self.group.resize(n)
            if wait:
                self.group.wait(lambda v: len(v.members) == n, timeout)
            return
        seen = {x.uid for x in self.group.news}
        grow = n - len(self.group.members)
        with self.group.hold():  # the spares may not join before they are warm
            self.group.resize(n)
            deadline = time.monotonic() + timeout
            while True:
                fresh = [x for x in self.group.news if x.state == "ready" and x.uid not in seen]
                if len(fresh) >= grow:
                    break
                if time.monotonic() > deadline:
                    raise InsituError(
                        f"resize to {n}: {len(fresh)} of {grow} new servers "
                        f"ready within {timeout:g}s"
                    )
                time.sleep(0.01)
            for x in fresh:  # not in the view yet: how to speak to them came with their news
                self._learn_server(x.uid, x.endpoint, x.info)
            ch = _Channel(self._keys)
            try:
                members = [(x.uid, x.endpoint) for x in fresh]
                self._ensure_pipelines(ch, members)
                why = ch.broadcast([ep for _, ep in members], {"op": "warm"})
            finally:
                ch.close()
            if why is not None:
                raise InsituError(f"warming new servers: {why}")
        self.group.wait(lambda v: len(v.members) == n, timeout)

    def close(self) -> None:
        self.group.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def mpi_available() -> bool:
    """MPICH's mpiexec (hydra: separately launched jobs can connect) and mpi4py here."""
    import importlib.util

    if importlib.util.find_spec("mpi4py") is None:
        return False
    from ..launch import installed_mpi_launcher

    return installed_mpi_launcher() == "mpiexec"


class _TaskArea(_AreaBase):
    def __init__(self, name: str, timeout: float):
        super().__init__()
        from .. import service

        self.name = name
        self._views = service.Group(name)
        self._views.wait(lambda v: len(v.members) > 0, timeout)


def connect(name: str, timeout: float = 120.0) -> _TaskArea:
    """The staging area `name` as a task of the pilot sees it (a simulation's side): the
    same create_pipeline / pipeline(...) API as StagingArea."""
    return _TaskArea(name, timeout)
