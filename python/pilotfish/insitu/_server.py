"""A staging server: one member of a staging area's service group.

    python -m pilotfish.insitu._server      (started by StagingArea; a pilot task)

One ZeroMQ ROUTER socket, announced as the member's endpoint, takes both clients' requests
(frames: b"req", msgpack header, data frames) and the other servers' collective messages
(b"coll", ...). Staged arrays stay in the frames they arrived in (no copy). While a pipeline
waits in a collective, client requests that arrive are kept for after.

Who may speak (_auth.py says how each mode proves it): every connection is authenticated in
ZeroMQ's handshake -- PLAIN with passwords derived from the group's secrets (the default), or
CURVE (encrypt=True) -- and a ZAP handler labels it:
  - a *client* (it proved it holds the group's client secret or key, which the agent hands
    out only with the group's views, to the program that started the area and to tasks of
    the pilot, over their own CURVE connections): its frames may only be requests;
  - a *peer* "peer <uid>" (another server of the group): its frames may only be collective
    messages -- and only those are unpickled, once the sender proved to be the rank that the
    message says sent it.
Anything else is refused in the handshake, counted and logged (a monitor on the socket sees
every failed handshake). Every reply carries the server's proof to the client (plain-auth).
Every frame that gets in is
checked: a bad one is dropped, counted and logged, never fatal. Collective messages not yet
consumed are bounded in bytes (INBOX_MAX) and dropped with their iteration. An activate whose
view this server has not seen yet is parked (not waited for): the server keeps serving.
PILOTFISH_INSITU_SECURE=none (StagingArea(secure=False)) turns all of this off: a ROUTER that
any process reaching the port may drive (for measurements; never on a shared machine).
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
import threading
import time
import traceback
from typing import Any

import msgspec
import zmq
from zmq.utils import z85

from .. import service
from .._door import Door, harden
from .._sockets import host_address
from . import _auth
from ._collectives import Collectives, MPICollectives, build_mpi_comm
from ._pipeline import InsituError, Pipeline, lookup

PEER_TIMEOUT_S = 60.0
VIEW_WAIT_S = 5.0  # an activate may wait this long for the view it names (parked)
INBOX_MAX = int(os.environ.get("PILOTFISH_INSITU_INBOX_MB", "1024")) << 20
MAX_FRAME = _auth.MAX_FRAME
LOG_FIRST = 20  # drops and refusals logged one by one; then every LOG_EVERY-th
LOG_EVERY = 1000

_enc = msgspec.msgpack.encode
_dec = msgspec.msgpack.decode
_coll_header = msgspec.msgpack.Decoder(tuple[str, int, int, int]).decode


class _Park(Exception):
    """This request waits (for a view): it is answered later, the server serves on."""


class Active:
    __slots__ = ("iteration", "blocks", "comm")

    def __init__(self, iteration: int, comm: Collectives):
        self.iteration = iteration
        self.blocks: set = set()
        self.comm = comm


class _Gate(threading.Thread):
    """The server's ZAP handler (RFC 27), in a thread of its own: it decides who a connection
    is as it is made. CURVE: the client key is "client", a server's key "peer <uid>"; PLAIN:
    the user name is the id ("client" or "peer <uid>"), let in with its password (_auth.py).
    Frames carry the id as their User-Id. Written here, not pyzmq's ThreadAuthenticator: that
    one imports asyncio (40-65 ms more to start every server, on the path of an elastic
    join) and answers one request at a time all the same."""

    def __init__(self, ctx: zmq.Context, server: "Server"):
        super().__init__(name="pilotfish-insitu-zap", daemon=True)
        self.server = server
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("inproc://zeromq.zap.01")  # (before any server socket is bound)

    def run(self) -> None:
        while True:
            try:
                msg = self.sock.recv_multipart()
            except zmq.ZMQError:  # the context is ending
                return
            version, request_id = msg[:2] if len(msg) >= 2 else (b"1.0", b"")
            who = self.decide(msg[5] if len(msg) > 5 else b"", msg[6:])
            ok = who is not None
            try:
                self.sock.send_multipart(
                    [
                        version,
                        request_id,
                        b"200" if ok else b"400",
                        b"OK" if ok else b"not let in",
                        who.encode() if who is not None else b"",
                        b"",
                    ]
                )
            except zmq.ZMQError:
                return

    def decide(self, mechanism: bytes, credentials: list) -> str | None:
        """Who this connection is, or None: not let in. Never waits (one at a time)."""
        srv = self.server
        if mechanism == b"CURVE" and srv.mode == _auth.CURVE and len(credentials) == 1:
            key = z85.encode(credentials[0])
            if key == srv.client_public:
                return "client"
            uid = srv.peer_uids.get(key)
            if uid is None:  # a server newer than our last look at the view: refused now,
                srv.learn_keys()  # it is in the view when ZeroMQ's reconnect comes back
                uid = srv.peer_uids.get(key)
            return None if uid is None else f"peer {uid}"
        if mechanism == b"PLAIN" and srv.mode == _auth.PLAIN_AUTH and len(credentials) == 2:
            user = credentials[0].decode(errors="replace")
            if user == "client":
                return user if _auth.same(credentials[1], srv.request_password) else None
            secret = srv.me.secret if srv.me is not None else None
            if (
                user.startswith("peer ")
                and secret
                and _auth.same(credentials[1], _auth.peer_password(secret, user[5:], srv.uid))
            ):
                return user
        return None  # (refusals are counted by the socket monitor)


class Server:
    def __init__(self):
        self.uid = os.environ["PILOTFISH_MEMBER_UID"]
        mode = os.environ.get(_auth.ENV, _auth.PLAIN_AUTH)
        if mode not in _auth.MODES:
            raise SystemExit(f"pilotfish.insitu: {_auth.ENV}={mode!r}: one of {_auth.MODES}")
        self.mode = mode
        self.secure = mode != _auth.NONE
        self.me: service.Membership | None = None
        self.request_password = self.reply_proof = b""
        self.ctx = zmq.Context()
        self.group = service.Group(os.environ["PILOTFISH_SERVICE_GROUP"])
        self.stats = collections.Counter()  # "dropped", "refused"
        self.peer_uids: dict[bytes, str] = {}  # z85 public key -> server uid (from views)
        self.peer_keys: dict[str, bytes] = {}  # endpoint -> z85 public key (from views)
        self.peer_at: dict[str, str] = {}  # endpoint -> server uid (from views)
        self.client_public: bytes | None = None
        self.gate: _Gate | None = None
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        # before login: frames of at most MAX_FRAME (a staged block or an image per frame),
        # a handshake timeout (_door.py)
        harden(self.sock, MAX_FRAME)
        info: dict = {"role": "staging", "auth": mode}
        if self.secure:
            view = self.group.wait(lambda v: v.client_key is not None, 60.0)
            self.client_public, client_secret = view.client_key
            self.request_password = _auth.request_password(client_secret, self.uid)
            self.reply_proof = _auth.reply_proof(client_secret, self.uid)
            self.learn_keys()
            self.gate = _Gate(self.ctx, self)
            self.gate.start()
            self.sock.setsockopt(zmq.ZAP_DOMAIN, _auth.ZAP_DOMAIN)
            if mode == _auth.CURVE:
                self.public, self.secret = zmq.curve_keypair()
                self.sock.setsockopt(zmq.CURVE_SERVER, 1)
                self.sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
                info["curve"] = self.public.decode()
            else:
                self.sock.setsockopt(zmq.PLAIN_SERVER, 1)
        host = host_address()
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        # unproven connections capped (a few per peer: clients and peers connect once), the
        # refusals counted (_door.py; the "refused" count, logged as they come)
        self.door = Door(
            self.sock, f"staging server {self.uid}", per_peer=4, total=8, proven_bytes=128
        )  # (PLAIN's handshake is shorter than CURVE's)
        self.endpoint = f"tcp://{host}:{port}"
        self.peers: dict[str, zmq.Socket] = {}
        self.inbox: dict[tuple, tuple] = {}  # (tag, seq, frm) -> (sender, buffers, bytes)
        self.inbox_bytes = 0
        self.backlog: collections.deque = collections.deque()
        self.parked: list[tuple[float, list]] = []  # (since, frames) of waiting activates
        self.pipelines: dict[str, Pipeline] = {}
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
        self.me = service.announce(self.endpoint, **info)

    # -- who is who ------------------------------------------------------------------------
    def learn_keys(self) -> None:
        """The servers' keys in the group's latest view (kept: a server that left may still
        have a message on its way)."""
        view = self.group.view
        if view is None:
            return
        for m in view.members:
            self.peer_at[m.endpoint] = m.uid
            key = m.info.get("curve") if isinstance(m.info, dict) else None
            if isinstance(key, str) and len(key) == 40:
                self.peer_uids[key.encode()] = m.uid
                self.peer_keys[m.endpoint] = key.encode()

    def count(self, what: str, why: str) -> None:
        """A frame dropped or a connection refused: counted, and logged (the first ones,
        then one in LOG_EVERY)."""
        self.stats[what] += 1
        n = self.stats[what]
        if n <= LOG_FIRST or n % LOG_EVERY == 0:
            print(f"pilotfish.insitu {self.uid}: {what} #{n}: {why}", file=sys.stderr, flush=True)

    # -- peers (collectives) -------------------------------------------------------------
    def peer_send(self, endpoint: str, frames: list, uid: str | None = None) -> None:
        """Frames to the server at endpoint (uid: its uid, where the caller knows it)."""
        s = self.peers.get(endpoint)
        if s is None:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 1000)
            s.setsockopt(zmq.IDENTITY, f"peer:{self.uid}".encode())
            if self.mode == _auth.PLAIN_AUTH:
                if uid is None:
                    self.learn_keys()
                    uid = self.peer_at.get(endpoint)
                if uid is None or self.me is None or not self.me.secret:
                    s.close(0)
                    raise InsituError(
                        f"cannot prove this server to {endpoint}: "
                        + (
                            "no server there in the group's views"
                            if uid is None
                            else "the pilot gave no member secret"
                        )
                    )
                s.setsockopt(zmq.PLAIN_USERNAME, f"peer {self.uid}".encode())
                s.setsockopt(zmq.PLAIN_PASSWORD, _auth.peer_password(self.me.secret, self.uid, uid))
            elif self.mode == _auth.CURVE:
                key = self.peer_keys.get(endpoint)
                if key is None:
                    self.learn_keys()
                    key = self.peer_keys.get(endpoint)
                if key is None:
                    s.close(0)
                    raise InsituError(f"no key for server {endpoint} in the group's views")
                s.setsockopt(zmq.CURVE_SERVERKEY, key)
                s.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
                s.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
            s.connect(endpoint)
            self.peers[endpoint] = s
        s.send_multipart(frames, copy=False)

    def peer_recv(self, tag: str, seq: int, frm: int, sender: str | None = None) -> list:
        """The buffers server rank `frm` sent for (tag, seq); sender: its uid, which the
        message's connection must have proven (secure areas)."""
        key = (tag, seq, frm)
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while True:
            got = self.inbox.pop(key, None)
            if got is not None:
                who, buffers, size = got
                self.inbox_bytes -= size
                if not self.secure or sender is None or who == f"peer {sender}":
                    return buffers
                self.count(
                    "dropped",
                    f"a collective message for {tag} step {seq} as rank "
                    f"{frm} ({sender}) from {who}",
                )
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise InsituError(
                    f"server rank {frm} sent nothing for {PEER_TIMEOUT_S:g}s ({tag}, step {seq})"
                )
            if self.sock.poll(min(left, 1.0) * 1000):
                self._take(self.sock.recv_multipart(copy=False), during_collective=True)

    def _sender(self, frames: list) -> str | None:
        """Who sent a message: "client", "peer <uid>" (from the handshake), None if not
        secure."""
        if not self.secure:
            return None
        try:
            return frames[1].get("User-Id")
        except (zmq.ZMQError, IndexError):
            return ""

    def _take(self, frames: list, during_collective: bool = False) -> None:
        """One message from the socket: a collective message into the inbox, a request
        served (or kept for after the collective); anything else dropped and counted."""
        if len(frames) < 3:
            self.count("dropped", f"a message of {len(frames) - 1} frames")
            return
        kind = frames[1].bytes
        who = self._sender(frames)
        if kind == b"coll":
            if self.secure and not (who or "").startswith("peer "):
                self.count("dropped", f"a collective message from {who or 'nobody'}")
                return
            try:
                tag, seq, frm, nbuf = _coll_header(frames[2].bytes)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                self.count("dropped", f"a collective message with a bad header: {e}")
                return
            key = (tag, seq, frm)
            size = sum(len(f) for f in frames[3:])
            if len(frames) != 4 + nbuf or key in self.inbox:
                self.count(
                    "dropped",
                    f"a collective message for {tag} step {seq} from rank "
                    f"{frm}: "
                    + (
                        "a duplicate"
                        if key in self.inbox
                        else f"{len(frames) - 3} frames, said {nbuf + 1}"
                    ),
                )
                return
            if self.inbox_bytes + size > INBOX_MAX:
                self.count(
                    "dropped",
                    f"a collective message of {size} bytes for {tag}: "
                    f"{self.inbox_bytes} bytes wait unconsumed already "
                    f"(PILOTFISH_INSITU_INBOX_MB={INBOX_MAX >> 20})",
                )
                return
            self.inbox[key] = (who, [f.buffer for f in frames[3:]], size)
            self.inbox_bytes += size
        elif kind == b"req":
            if self.secure and who != "client":
                self.count("dropped", f"a request from {who or 'nobody'}")
                return
            if during_collective:
                self.backlog.append(frames)
            else:
                self._request(frames)
        else:
            self.count("dropped", f"a message of unknown kind {kind[:16]!r}")

    def _refusals(self) -> None:
        """Count and log the connections refused since (the door's counts: failed handshakes
        -- no credentials, not our key, a key we do not know -- and connections over its
        caps), one line per summary interval."""
        self.stats["refused"] = self.door.counts["handshakes"]
        said = self.door.take_summary()
        if said:
            print(f"pilotfish.insitu {self.uid}: refused: {said}", file=sys.stderr, flush=True)

    def _drop_inbox(self, name: str, it) -> None:
        """Collective messages of pipeline `name`'s iteration `it` nobody will consume."""
        for key in [k for k in self.inbox if k[0].rsplit("/", 2)[:2] == [name, str(it)]]:
            self.inbox_bytes -= self.inbox.pop(key)[2]

    # -- clients -----------------------------------------------------------------------------
    def run(self) -> int:
        me = self.me
        assert me is not None  # __init__ announced this server (or raised)
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while True:
            while self.backlog:
                self._request(self.backlog.popleft())
            if self.parked:
                parked, self.parked = self.parked, []
                for since, frames in parked:
                    self._request(frames, since)
            ready = dict(poller.poll(10 if self.parked else 100))
            self._refusals()
            if self.sock in ready:
                while True:
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._take(frames)
            elif not ready and me.leaving.is_set() and not self.active:
                return 0

    def _request(self, frames: list, since: float | None = None) -> None:
        ident = frames[0]
        try:
            hdr = _dec(frames[2].bytes)
            if not isinstance(hdr, dict) or not isinstance(hdr.get("op"), str):
                raise ValueError("not a map with an 'op'")
        except Exception as e:  # noqa: BLE001 -- any bad header: the client learns why
            self.count("dropped", f"a request with a bad header: {e}")
            self.sock.send_multipart(
                [ident, b"rep", self.reply_proof, _enc([None, False, f"bad request: {e}"])]
            )
            return
        rid = hdr.get("id")
        try:
            result = self._do(hdr, frames[3:], time.monotonic() if since is None else since)
            reply = [rid, True, None]
            payload = [pickle.dumps(result, protocol=5)] if result is not None else []
        except _Park:
            self.parked.append((time.monotonic() if since is None else since, frames))
            return
        except InsituError as e:
            reply, payload = [rid, False, str(e)], []
        except (Exception, SystemExit) as e:  # noqa: BLE001 -- a pipeline's error (even an
            tb = traceback.format_exc(limit=6)  # exit): the client learns it, we serve on
            reply, payload = [rid, False, f"{type(e).__name__}: {e}\n{tb}"], []
        self.sock.send_multipart([ident, b"rep", self.reply_proof, _enc(reply)] + payload)

    def _pipeline(self, name: str):
        p = self.pipelines.get(name)
        if p is None:
            raise InsituError(f"no pipeline {name!r} on {self.uid} (create_pipeline first)")
        return p

    def _do(self, hdr: dict, data: list, since: float):
        op = hdr["op"]
        name: Any = hdr.get("pipeline")  # the client's fields as sent (a missing name: no pipeline)
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
            a = self.active.pop(name, None)
            if a is not None:
                self._drop_inbox(name, a.iteration)
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
                self._drop_inbox(n, a.iteration)
                try:
                    self.pipelines[n].deactivate(a.iteration)
                except Exception as e:  # noqa: BLE001 -- the pipeline's own code
                    print(f"abandoning {n} iteration {a.iteration}: {e}", file=sys.stderr)
            return None
        if op == "ping":  # what this server runs, as the requests that made it
            return {
                "uid": self.uid,
                "pipelines": {
                    n: {
                        "op": "create",
                        "pipeline": n,
                        "config": c,
                        "module": m,
                        "type": getattr(self.pipelines[n], "_type", None),
                    }
                    for n, (c, m) in self.configs.items()
                },
                "dropped": self.stats["dropped"],
                "refused": self.stats["refused"],
                "inbox_bytes": self.inbox_bytes,
            }
        p = self._pipeline(name)
        it: Any = hdr.get("iteration")
        a = self.active.get(name)
        if op == "activate":
            if a is not None:
                raise InsituError(
                    f"pipeline {name!r}: iteration {a.iteration} is active (deactivate it first)"
                )
            epoch, members = hdr["epoch"], hdr["members"]
            self._check_view(epoch, since)
            uids = [m[0] for m in members]
            if self.uid not in uids:
                raise InsituError(
                    f"stale view: {self.uid} is not in the client's view (epoch {epoch})"
                )
            comm = Collectives(
                self, uids.index(self.uid), [m[1] for m in members], f"{name}/{it}/{epoch}", uids
            )
            if self.use_mpi:
                comm = self._mpi_for(tuple(uids), comm)
            p.comm = comm
            p.activate(it)
            self.active[name] = Active(it, comm)
            return None
        if op == "deactivate":
            self._drop_inbox(name, it)
        if a is None or a.iteration != it:
            raise InsituError(
                f"pipeline {name!r}: {op} of iteration {it}, which is not "
                f"active" + (f" (iteration {a.iteration} is)" if a else " (activate it first)")
            )
        p.comm = a.comm
        if op == "stage":
            block = hdr["block"]
            key = block if not isinstance(block, list) else tuple(block)
            if key in a.blocks:
                raise InsituError(f"block {block!r} staged twice in iteration {it}")
            import numpy as np

            array = np.frombuffer(data[0].buffer, dtype=np.dtype(hdr["dtype"])).reshape(
                hdr["shape"]
            )
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

    def _check_view(self, epoch, since: float) -> None:
        """The client's view must be the group's current one (Colza: a stale view fails
        activate cleanly; the client refreshes and retries). One this server has not seen
        yet parks the request (VIEW_WAIT_S at most): the server serves on meanwhile."""
        if type(epoch) is not int:
            raise InsituError(f"bad epoch {epoch!r}")
        view = self.group.view
        if view is None or view.epoch < epoch:
            if time.monotonic() - since < VIEW_WAIT_S:
                raise _Park()
            raise InsituError(f"stale view: the server never saw epoch {epoch}")
        self.learn_keys()
        if view.epoch != epoch:
            raise InsituError(f"stale view: epoch {epoch}, the group is at {view.epoch}")


def main() -> int:
    return Server().run()


if __name__ == "__main__":
    sys.exit(main())
