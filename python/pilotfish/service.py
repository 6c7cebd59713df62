"""What a service member imports -- and any task of the pilot that uses a service group.

In a member (a process the pilot started for a service group)::

    from pilotfish import service
    me = service.announce("tcp://10.0.0.5:5555", role="staging")   # READY from now on
    while not me.leaving.is_set():
        serve_one_request()          # then finish what you have, and return / exit 0

A plain executable may print instead: ``PILOTFISH_ANNOUNCE <endpoint> [json info]`` on its
stdout (flushed); it is told to leave with SIGTERM.

In any task of the pilot (a simulation that uses a staging area)::

    group = service.Group("staging")
    view = group.wait(lambda v: len(v.members) >= 4)
    with group.hold() as view:       # no join or leave takes effect in here
        talk_to(view.members)

Each process has one connection to the pilot's agent (a thread with a ZeroMQ socket, CURVE
with the key the pilot gives its tasks). Leave requests and health checks come through it;
`probe=` (a callable returning True, or False / raising when unhealthy) is run on each health
check of a group with a health_interval.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import uuid
from typing import Any, Callable

ANNOUNCE_PREFIX = "PILOTFISH_ANNOUNCE"


class ServiceError(Exception):
    """A refusal by the pilot (endpoint announced twice, no such group), or no pilot here."""


class _Peer:
    """This process's connection to the agent's service registry (one thread owns it)."""

    _instance: "_Peer | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "_Peer":
        with cls._lock:
            if cls._instance is None or cls._instance._pid != os.getpid():
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        import zmq

        address = os.environ.get("PILOTFISH_SERVICES")
        key_file = os.environ.get("PILOTFISH_SERVICES_KEYFILE")
        if not address or not key_file:
            raise ServiceError(
                "not in a pilotfish task: PILOTFISH_SERVICES is not set (service "
                "groups are reached from tasks of the pilot that runs them)"
            )
        self._pid = os.getpid()
        from ._sockets import curve_dealer

        self._ctx = zmq.Context()
        self._sock = curve_dealer(self._ctx, key_file, address)
        self._wake_addr = f"inproc://pilotfish-peer-{id(self):x}"
        self._wake_recv = self._ctx.socket(zmq.PAIR)
        self._wake_recv.bind(self._wake_addr)
        self._outbox: list[bytes] = []
        self._out_lock = threading.Lock()
        self._wake_send = self._ctx.socket(zmq.PAIR)
        self._wake_send.connect(self._wake_addr)
        self._wake_lock = threading.Lock()
        self._answers: dict[tuple, list] = {}
        self._cond = threading.Condition()
        self.members: dict[str, Membership] = {}
        self.groups: dict[str, list[Group]] = {}
        self._thread = threading.Thread(target=self._run, name="pilotfish-service", daemon=True)
        self._thread.start()

    def send(self, msg: list) -> None:
        import msgspec

        with self._out_lock:
            self._outbox.append(msgspec.msgpack.encode(msg))
        with self._wake_lock:
            self._wake_send.send(b"")

    def ask(self, msg: list, key: tuple, timeout: float) -> list:
        with self._cond:
            self._answers.pop(key, None)
        self.send(msg)
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._answers, timeout):
                raise ServiceError(f"the pilot did not answer {msg[0]!r} within {timeout:g}s")
            return self._answers.pop(key)

    def _run(self) -> None:
        import msgspec
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_recv, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if self._wake_recv in ready:
                while True:
                    try:
                        self._wake_recv.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                with self._out_lock:
                    out, self._outbox = self._outbox, []
                for frame in out:
                    self._sock.send(frame)
            if self._sock in ready:
                while True:
                    try:
                        frame = self._sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        self._on(msgspec.msgpack.decode(frame))
                    except Exception as e:  # noqa: BLE001 -- a user callback's error
                        print(f"pilotfish.service: {type(e).__name__}: {e}", file=sys.stderr)

    def _on(self, msg: list) -> None:
        kind = msg[0]
        if kind in ("announced", "refused"):
            self._answer(("announce", msg[1]), msg)
        elif kind in ("held", "released"):
            self._answer((kind, msg[1], msg[2]), msg)
        elif kind == "view":
            for g in self.groups.get(msg[1], ()):
                g._on_view(
                    View(
                        msg[2],
                        [Member(*m) for m in msg[3]],
                        msg[4],
                        client_key(msg[5] if len(msg) > 5 else None),
                    )
                )
        elif kind == "leave":
            m = self.members.get(msg[1])
            if m is not None:
                m._on_leave()
        elif kind == "ping":
            m = self.members.get(msg[1])
            ok, detail = True, ""
            if m is not None and m._probe is not None:
                try:
                    ok = bool(m._probe())
                    detail = "" if ok else "probe returned False"
                except Exception as e:  # noqa: BLE001 -- an unhealthy member says why
                    ok, detail = False, f"probe raised {type(e).__name__}: {e}"
            self.send(["pong", msg[1], ok, detail])

    def _answer(self, key: tuple, msg: list) -> None:
        with self._cond:
            self._answers[key] = msg
            self._cond.notify_all()


class Membership:
    """A member's side of its group: `leaving` is set when the pilot asks it to leave (it
    finishes what it has, then exits)."""

    def __init__(self, uid: str, group: str, endpoint: str, probe: Callable | None):
        self.uid = uid
        self.group = group
        self.endpoint = endpoint
        # what the group's members alone share (bytes; from the pilot, with the answer to
        # the announcement): members prove themselves to one another with it
        self.secret: bytes | None = None
        self.leaving = threading.Event()
        self._probe = probe
        self._on_leave_cbs: list[Callable[[], Any]] = []

    def wait_leave(self, timeout: float | None = None) -> bool:
        return self.leaving.wait(timeout)

    def on_leave(self, cb: Callable[[], Any]) -> None:
        """cb() when asked to leave (on the connection's thread: keep it short)."""
        self._on_leave_cbs.append(cb)
        if self.leaving.is_set():
            cb()

    def _on_leave(self) -> None:
        self.leaving.set()
        for cb in self._on_leave_cbs:
            cb()


def announce(
    endpoint: str, *, probe: Callable[[], bool] | None = None, timeout: float = 30.0, **info: Any
) -> Membership:
    """Say where this member serves; the member is READY (and joins the group's view) now.

    Only rank 0 of a multi-rank member announces (the others get a Membership that is never
    asked to leave: rank 0 tells them). Raises ServiceError when the pilot refuses (the
    endpoint is announced already, by this member or another) or when this process is no
    service member."""
    uid = os.environ.get("PILOTFISH_MEMBER_UID")
    group = os.environ.get("PILOTFISH_SERVICE_GROUP", "")
    if not uid:
        raise ServiceError(
            "announce: this process is not a member of a service group "
            "(PILOTFISH_MEMBER_UID is not set)"
        )
    m = Membership(uid, group, endpoint, probe)
    if os.environ.get("PILOTFISH_RANK", "0") != "0":  # (every launch method sets it)
        return m
    peer = _Peer.get()
    if uid in peer.members:
        raise ServiceError(f"{uid} announced its endpoint already ({peer.members[uid].endpoint!r})")
    peer.members[uid] = m
    reply = peer.ask(["announce", uid, endpoint, info], ("announce", uid), timeout)
    if reply[0] == "refused":
        peer.members.pop(uid, None)
        raise ServiceError(f"announce {endpoint!r}: {reply[2]}")
    if len(reply) > 2 and isinstance(reply[2], str):
        m.secret = reply[2].encode()
    return m


def announce_line(endpoint: str, **info: Any) -> str:
    """The stdout line that announces a plain executable's endpoint."""
    return (
        f"{ANNOUNCE_PREFIX} {endpoint} {json.dumps(info)}"
        if info
        else f"{ANNOUNCE_PREFIX} {endpoint}"
    )


class Member:
    """One member in a view."""

    __slots__ = ("uid", "endpoint", "node", "info")

    def __init__(self, uid: str, endpoint: str, node: str, info: dict | None = None):
        self.uid = uid
        self.endpoint = endpoint
        self.node = node
        self.info = info or {}

    def __repr__(self) -> str:
        return f"<Member {self.uid} {self.endpoint} on {self.node}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Member) and (self.uid, self.endpoint) == (
            other.uid,
            other.endpoint,
        )

    def __hash__(self) -> int:
        return hash((self.uid, self.endpoint))


def view_hash(epoch: int, members) -> str:
    """The same for every client that sees the same view (agent/services.py computes it too)."""
    h = hashlib.sha1(str(epoch).encode())
    for uid, endpoint in sorted((m.uid, m.endpoint) for m in members):
        h.update(f"\0{uid}\0{endpoint}".encode())
    return h.hexdigest()[:16]


def client_key(pair: Any) -> tuple[bytes, bytes] | None:
    """The group's client key pair from a view message ([z85 public, z85 secret]), or None."""
    if (
        isinstance(pair, (list, tuple))
        and len(pair) == 2
        and all(isinstance(k, str) and len(k) == 40 for k in pair)
    ):
        return pair[0].encode(), pair[1].encode()
    return None


class View:
    """A group's membership at one epoch. client_key: the (public, secret) CURVE key pair the
    group's clients prove themselves with (its members admit it); the agent gives it with
    every view, only over authenticated connections."""

    __slots__ = ("epoch", "members", "target", "client_key")

    def __init__(
        self,
        epoch: int,
        members: list[Member],
        target: int = 0,
        client_key: tuple[bytes, bytes] | None = None,
    ):
        self.epoch = epoch
        self.members = members
        self.target = target
        self.client_key = client_key

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def hash(self) -> str:
        return view_hash(self.epoch, self.members)

    def __repr__(self) -> str:
        return f"<View epoch={self.epoch} members={len(self.members)}>"


class Group:
    """A service group as a task of the pilot sees it: its view (kept current), holds."""

    def __init__(self, name: str):
        self.name = name
        self._peer = _Peer.get()
        self._view: View | None = None
        self._cond = threading.Condition()
        self._cbs: list[Callable[[View], Any]] = []
        self._holds: list[str] = []
        self._peer.groups.setdefault(name, []).append(self)
        self._peer.send(["subscribe", name])

    @property
    def view(self) -> View | None:
        """The latest view (None until the group exists and the agent said it)."""
        return self._view

    def wait(
        self, until: Callable[[View], bool] | None = None, timeout: float | None = None
    ) -> View:
        """Block until a view satisfies `until` (default: any view); raises ServiceError on
        timeout."""
        until = until or (lambda v: True)
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._view is not None and until(self._view), timeout
            ):
                raise ServiceError(
                    f"group {self.name!r}: no such view within {timeout}s (now {self._view})"
                )
            return self._view  # type: ignore[return-value]  # set once a view arrived

    def on_change(self, cb: Callable[[View], Any]) -> None:
        """cb(view) on every new view (on the connection's thread: keep it short)."""
        self._cbs.append(cb)

    def hold(self, timeout: float = 30.0) -> "Hold":
        """Pin the view: returns a context manager whose value is the pinned View; joins and
        leaves wait until the last hold of the group is released."""
        token = uuid.uuid4().hex[:12]
        try:
            reply = self._peer.ask(
                ["hold", self.name, token, os.environ.get("PILOTFISH_TASK_UID") or ""],
                ("held", self.name, token),
                timeout,
            )
        except ServiceError:  # it may be in place: never leave a hold nobody will release
            self._peer.send(["release", self.name, token])
            raise
        if reply[4] is not None:
            raise ServiceError(f"hold of {self.name!r}: {reply[4]}")
        self._holds.append(token)
        view = self.wait(lambda v: v.epoch >= reply[3], timeout)
        return Hold(self, token, view)

    def release(self, token: str | None = None, timeout: float = 30.0) -> None:
        if token is None:
            if not self._holds:
                return
            token = self._holds[-1]
        if token in self._holds:
            self._holds.remove(token)
        self._peer.ask(["release", self.name, token], ("released", self.name, token), timeout)

    def _on_view(self, view: View) -> None:
        with self._cond:
            if self._view is not None and view.epoch < self._view.epoch:
                return
            changed = self._view is None or view.epoch != self._view.epoch
            self._view = view
            self._cond.notify_all()
        if changed:
            for cb in self._cbs:
                cb(view)


class Hold:
    """A pinned view (`.view`), released by release() or at the end of a with block. The
    group is anything with release(token): a task's Group, the client's ServiceGroup."""

    def __init__(self, group: Any, token: str, view: View):
        self.group = group
        self.token = token
        self.view = view

    def release(self) -> None:
        self.group.release(self.token)

    def __enter__(self) -> View:
        return self.view

    def __exit__(self, *exc) -> None:
        self.release()


def _run_function(path: str) -> int:
    """A function service's member: run function(*args, **kwargs) from the group's file."""
    import pickle
    import traceback

    import msgspec

    with open(path, "rb") as f:
        fn_bytes, call_bytes = msgspec.msgpack.decode(f.read())
    try:
        fn = pickle.loads(fn_bytes)
        args, kwargs = pickle.loads(call_bytes)
        fn(*args, **kwargs)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 -- the member fails, with the traceback on stderr
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m pilotfish.service FUNCTION_FILE", file=sys.stderr)
        sys.exit(2)
    sys.exit(_run_function(sys.argv[1]))
