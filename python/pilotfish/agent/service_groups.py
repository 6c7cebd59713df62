"""Service groups' members and groups: their states, and the view a group's peers get.

The registry (services.py) owns them; this is the data it keeps per member and per group.
"""

from __future__ import annotations

import enum
import secrets

import zmq

from .. import _wire


class MemberState(enum.Enum):
    """A member's state: started, its endpoint not announced yet; announced (in the view);
    asked to leave (out of the view, its process not ended yet); ended."""

    STARTING = "starting"
    READY = "ready"
    LEAVING = "leaving"
    GONE = "gone"


STARTING, READY, LEAVING, GONE = (
    MemberState.STARTING,
    MemberState.READY,
    MemberState.LEAVING,
    MemberState.GONE,
)


class Member:
    __slots__ = (
        "uid",
        "k",
        "group",
        "slot",
        "restarts",
        "state",
        "endpoint",
        "info",
        "node",
        "ident",
        "run_since",
        "offset",
        "last_pong",
        "ping_due",
        "leave_at",
        "why",
        "told",
    )

    def __init__(self, uid: str, k: int, group: "Group", slot: int, restarts: int):
        self.uid = uid
        self.k = k  # its number in the group (newer members have higher ones)
        self.told = False  # asked to leave (message or SIGTERM)
        self.group = group
        self.slot = slot  # members replace one another in a slot (restart counts per slot)
        self.restarts = restarts
        self.state: MemberState = STARTING
        self.endpoint: str | None = None
        self.info: dict = {}
        self.node = ""
        self.ident: bytes | None = None  # its helper's connection, once it announced through it
        self.run_since: float | None = None  # when its task was first seen running (mono)
        self.offset = 0  # how far its stdout was scanned
        self.last_pong = 0.0
        self.ping_due = 0.0
        self.leave_at: float | None = None  # asked to leave: stopped at this time (mono)
        self.why: str | None = None  # why we stopped it


class Group:
    def __init__(self, spec: _wire.ServiceSpec):
        self.spec = spec
        self.name = spec.name
        self.target = spec.replicas
        self.members: dict[str, Member] = {}  # live (not gone), by uid
        self.view: dict[str, Member] = {}  # in join order
        self.epoch = 0
        self.holds: dict[str, str | None] = {}  # token -> the task that holds it (None: client)
        self.pending: list[tuple[str, Member]] = []  # ("join" | "leave", member) while held
        self.subscribers: set[bytes] = set()
        self.next_k = 0
        self.next_slot = 0
        self.dirty = False
        self.fn_path: str | None = None
        self.short: str | None = None  # why it last fell short of its target for good
        # the key pair its clients prove themselves with: made here, handed out only with
        # views (to the client and to subscribed tasks, over their CURVE connections)
        self.client_key = [k.decode() for k in zmq.curve_keypair()]
        # what its members alone share (they prove themselves to one another with it):
        # handed to each member in the answer to its announcement
        self.member_secret = secrets.token_hex(32)

    def live(self) -> list[Member]:
        return [m for m in self.members.values() if m.state in (STARTING, READY)]

    def view_msg(self, t: float) -> _wire.GroupView:
        return _wire.GroupView(
            self.name,
            self.epoch,
            [_wire.MemberInfo(m.uid, m.endpoint or "", m.node, m.info) for m in self.view.values()],
            t,
            self.target,
            self.client_key,
        )


def changed_field(new: _wire.ServiceSpec, old: _wire.ServiceSpec) -> tuple | None:
    """The first field a resumed program changed in a group's description: (name, new value,
    running value), or None. Not compared: replicas (the group keeps its size), a function
    member's callable and arguments (their pickles need not be equal from run to run)."""
    for f in new.__struct_fields__:
        if f in ("replicas", "template"):
            continue
        if getattr(new, f) != getattr(old, f):
            return f, getattr(new, f), getattr(old, f)
    for f in new.template.__struct_fields__:
        if f in ("function", "call"):
            continue
        a, b = getattr(new.template, f), getattr(old.template, f)
        if a != b:
            return f, a, b
    return None


def peer_view(msg: _wire.GroupView) -> list:
    """A view as peers get it (pilotfish.service reads it)."""
    return [
        "view",
        msg.name,
        msg.epoch,
        [[x.uid, x.endpoint, x.node, x.info] for x in msg.members],
        msg.target,
        msg.client_key,
    ]
