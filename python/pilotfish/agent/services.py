"""Service groups: members that stay up, announce an endpoint, and share one view.

A member is an agent task (placed, launched, supervised and accounted like any task) whose uid
is <group>.<k>. It is READY once it announces its endpoint: through pilotfish.service.announce
(a connection to this registry's socket, which then also carries leave requests and health
pings) or, for a plain executable, a line "PILOTFISH_ANNOUNCE <endpoint> [json]" on its
stdout (scanned every SCAN_S while it starts).

The view of a group is its READY members and an epoch that grows by one per join or leave.
Holds pin it: while a group has a hold (from the client, or from a task through the same
socket), joins and leaves wait in order and take effect at the last release -- Colza's
"membership changes only between iterations". A member removed by a resize leaves the view
first and only then is told to leave: no client is left with a view naming a member that
already went. A member that fails leaves the view (at once, or at the release) and is
replaced per the group's restart policy.

The members and groups themselves (their states, the view peers get): service_groups.py.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Collection
from typing import Any

import msgspec
import zmq

from .. import _events as E
from .. import _wire, service
from .. import states as S
from .._door import Door
from .._sockets import bind_tcp, curve_router
from .._util import hostname, write_private
from .inbox import router_messages
from .loop import Pollable
from .service_groups import GONE, LEAVING, READY, STARTING, Group, Member, changed_field, peer_view

log = logging.getLogger("pilotfish.agent")

ANNOUNCE_PREFIX = f"{service.ANNOUNCE_PREFIX} ".encode()  # a plain executable's stdout line
SCAN_S = 0.01  # stdout scan (and ready-timeout check) interval while members start
HEALTH_MISSES = 3  # health intervals without an answer before a member has failed
MAX_ENDPOINT = 1024
MAX_INFO = 65536  # bytes of a member's info, encoded
MAX_REPLICAS = 100_000  # members of one group (the wire is an API: a bound on one message)

_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode


class ServiceRegistry(Pollable):
    """The agent's service groups, and the socket their members and clients talk to."""

    def __init__(self, agent, ctx: zmq.Context):
        self.agent = agent
        self.clock = agent.clock
        self.dir = os.path.join(agent.sandbox, "services")
        os.makedirs(self.dir, exist_ok=True)
        # only the pilot's own tasks may speak here (every task gets the key file's path)
        self.key_file = os.path.join(self.dir, "server.key")
        self.sock, self.address = curve_router(ctx, self.key_file, "services")
        self.door = Door(self.sock, "service registry")  # before login: bounded (_door.py)
        from ..launch import may_span_hosts

        if may_span_hosts(agent.desc["resource"], agent.resources):
            # members on other hosts, now or once the pilot grows: TCP on this host's name
            try:
                self.address = bind_tcp(self.sock)
            except (OSError, zmq.ZMQError) as e:
                log.warning("service registry: no TCP endpoint (%s): this host only", e)
        self.groups: dict[str, Group] = {}
        self.members: dict[str, Member] = {}  # live members of every group, by uid
        self.endpoints: dict[str, str] = {}  # endpoint -> the member that announced it
        self.waiting_subs: dict[str, set[bytes]] = {}  # subscribers of groups not started yet
        self.hold_owners: dict[str, set[tuple[str, str]]] = {}  # task uid -> (group, token)
        self.due = float("inf")  # mono time check_members() wants to run next
        self.restarts: list[tuple[Group, int, int, str]] = []  # (group, slot, restarts, replaces)
        self.fds = (self.sock,)

    # -- the loop (loop.Pollable; its views are flushed at the round's end: flush) ----------
    def due_in(self) -> float:
        return self.due - self.clock.mono()

    def on_ready(self, ready: Collection[Any]) -> None:
        if self.sock in ready:
            self.on_readable()
        if self.clock.mono() >= self.due:
            self.check_members()

    @property
    def env(self) -> dict[str, str]:
        """What every task of the pilot gets: where the registry is, and its key file."""
        return {"PILOTFISH_SERVICES": self.address, "PILOTFISH_SERVICES_KEYFILE": self.key_file}

    # -- from the client ---------------------------------------------------------------------
    def on_client(self, msg) -> None:
        """GroupStart, GroupResize, GroupHold or GroupRelease from the client."""
        if isinstance(msg, _wire.GroupStart):
            self.start(msg.spec, msg.resume)
        elif isinstance(msg, _wire.GroupResize):
            self.resize(msg.name, msg.replicas)
        elif isinstance(msg, _wire.GroupHold):
            epoch, why = self.hold(msg.name, msg.token, None)
            self.agent.send(_wire.GroupAck(msg.name, msg.token, epoch, why))
        else:
            self.release(msg.name, msg.token)

    def start(self, spec: _wire.ServiceSpec, resume: bool = False) -> None:
        now = self.clock.now()
        g = self.groups.get(spec.name)
        if resume and g is not None:
            self._reattach(g, spec)
            return
        why = self._spec_problem(spec)
        if why is not None:
            self._ack(spec.name, "start", -1, why)
            return
        g = self.groups[spec.name] = Group(spec)
        if spec.template.function is not None:  # run by `python -m pilotfish.service PATH`
            g.fn_path = os.path.join(self.dir, f"{spec.name}.call")
            write_private(g.fn_path, _encode([spec.template.function, spec.template.call]))
        g.subscribers |= self.waiting_subs.pop(spec.name, set())
        self.agent.events.record(spec.name, E.GROUP_RESIZE, str(spec.replicas), now)
        self._ack(spec.name, "start", 0, None)
        self._start_members(g, spec.replicas)
        g.dirty = True  # (epoch 0, empty: subscribers learn the group exists)

    def _reattach(self, g: Group, spec: _wire.ServiceSpec) -> None:
        """A resumed client starts a group this agent runs already: the same group (members
        are not disturbed; its size stays what it is) -- unless the program changed it. The
        client that held its view is gone: its holds are released."""
        changed = changed_field(spec, g.spec)
        if changed is not None:
            field, new, old = changed
            self._ack(
                g.name,
                "start",
                -1,
                f"resume: service group {g.name!r} runs in this "
                f"pilot with another description ({field} = {old!r}, not {new!r}); "
                f"start it as it was"[:1000],
            )
            return
        for token, owner in list(g.holds.items()):
            if owner is None:
                self.release(g.name, token)
        live = g.live()
        if g.target == 0 and not live:  # stopped before the client was killed: started again
            g.target = spec.replicas
            self._start_members(g, spec.replicas)
        self._ack(g.name, "start", g.epoch, None, g.target)
        g.dirty = True  # its view goes to the client now
        if g.short is not None and len(live) + self._restarts_for(g) < g.target:
            self._news(g, g.name, "short", reason=g.short)  # the killed client had it

    def _spec_problem(self, spec: _wire.ServiceSpec) -> str | None:
        """Why the agent will not start this group (the client checked; the wire is an API)."""
        import math

        from ..descriptions import RESTART_POLICIES, service_name_problem

        name = spec.name
        why = service_name_problem(name)
        if why is not None:
            return f"name = {name[:80]!r}: {why}"
        if name in self.groups:
            return f"a service group named {name!r} exists in this pilot already"
        if not 0 <= spec.replicas <= MAX_REPLICAS:
            return f"replicas = {spec.replicas}: must be 0..{MAX_REPLICAS}"
        if spec.restart not in RESTART_POLICIES:
            return f"restart = {spec.restart!r}: one of {', '.join(RESTART_POLICIES)}"
        if not 0 <= spec.max_restarts <= 1000:
            return f"max_restarts = {spec.max_restarts}: must be 0..1000"
        for field in ("ready_timeout", "leave_timeout", "health_interval"):
            v = getattr(spec, field)
            if (v is not None or field != "health_interval") and not (
                isinstance(v, (int, float)) and 0 < v < 1e9 and math.isfinite(v)
            ):
                return f"{field} = {v!r}: must be > 0 and finite"
        probe = msgspec.structs.replace(
            spec.template,
            uid=f"{name}.0000",
            executable=spec.template.executable or sys.executable,
            function=None,
            call=None,
        )
        try:
            return self.agent.check(probe)
        except Exception as e:  # noqa: BLE001 -- whatever the template holds
            return f"cannot run its members: {type(e).__name__}: {e}"

    def resize(self, name: str, n: int) -> None:
        g = self.groups.get(name)
        if g is None:
            self._ack(name, "resize", -1, f"no service group named {name!r}")
            return
        if not 0 <= n <= MAX_REPLICAS:
            self._ack(name, "resize", g.epoch, f"replicas = {n}: must be 0..{MAX_REPLICAS}")
            return
        now = self.clock.now()
        self.agent.events.record(name, E.GROUP_RESIZE, str(n), now)
        g.target = n
        live = g.live()
        if n > len(live):
            self._start_members(g, n - len(live))
        elif n < len(live):
            # the ones that are not serving yet first, then the newest
            order = sorted(live, key=lambda m: (m.state == READY, -m.k))
            for m in order[: len(live) - n]:
                self._ask_leave(m, f"group {name} resized to {n}")
        g.dirty = True  # (the target changed)
        self._ack(name, "resize", g.epoch, None)

    def explain(self, uid: str) -> dict | None:
        """What the registry knows of a live member (read only; agent/explain.py words it),
        or None: its group, state, endpoint, the view's epoch, size and target, and -- while
        its join or leave waits for the view's holds -- pending ("join" or "leave") and
        holders (None for the client, else the holding task's uid)."""
        m = self.members.get(uid)
        if m is None:
            return None
        g = m.group
        out: dict[str, Any] = {
            "group": g.name,
            "state": m.state.value,
            "endpoint": m.endpoint,
            "epoch": g.epoch,
            "view": len(g.view),
            "target": g.target,
        }
        if g.holds and any(mm is m for _, mm in g.pending):
            out["pending"] = "join" if uid not in g.view else "leave"
            out["holders"] = list(g.holds.values())
        return out

    def hold(self, name: str, token: str, owner: str | None) -> tuple[int, str | None]:
        """(epoch now, None) -- the view is pinned until release -- or (-1, why not)."""
        g = self.groups.get(name)
        if g is None:
            return -1, f"no service group named {name!r}"
        if token in g.holds:
            return -1, f"hold {token!r} is held already"
        g.holds[token] = owner
        if owner is not None:
            self.hold_owners.setdefault(owner, set()).add((name, token))
        if g.dirty:  # the view this hold pins goes out before the answer
            self._send_view(g)
        return g.epoch, None

    def release(self, name: str, token: str) -> None:
        g = self.groups.get(name)
        if g is None or token not in g.holds:
            return
        owner = g.holds.pop(token)
        if owner is not None:
            held = self.hold_owners.get(owner)
            if held is not None:
                held.discard((name, token))
                if not held:
                    del self.hold_owners[owner]
        if not g.holds:
            pending, g.pending = g.pending, []
            for kind, m in pending:
                self._apply(g, kind, m)

    # -- members -----------------------------------------------------------------------------
    def _start_members(self, g: Group, n: int) -> None:
        specs = []
        for _ in range(n):
            specs.append(self._member_spec(g, g.next_slot, 0))
            g.next_slot += 1
        self.agent.accept(specs)

    def _member_spec(
        self, g: Group, slot: int, restarts: int, replaces: str | None = None
    ) -> _wire.TaskSpec:
        """A new member of g in `slot`, as the task to accept (callers accept a batch: a
        spec the agent refuses comes back through member_exited)."""
        # ".m" keeps members apart from other agent tasks (task.*, worker.*) whatever the name
        uid = f"{g.name}.m{g.next_k:04d}"
        m = Member(uid, g.next_k, g, slot, restarts)
        g.next_k += 1
        g.members[uid] = m
        self.members[uid] = m
        tpl = g.spec.template
        env = dict(tpl.environment)
        env.update(self.env)
        env["PILOTFISH_SERVICE_GROUP"] = g.name
        env["PILOTFISH_MEMBER_UID"] = uid
        extra = {}
        if g.fn_path is not None:
            extra = {
                "executable": sys.executable,
                "arguments": ("-m", "pilotfish.service", g.fn_path),
                "function": None,
                "call": None,
            }
        spec = msgspec.structs.replace(
            tpl, uid=uid, environment=env, stdout=True, stderr=True, **extra
        )
        now = self.clock.now()
        events = self.agent.events
        if replaces:
            events.record(uid, E.MEMBER_RESTART, replaces, now)
        events.record(uid, E.MEMBER_START, g.name, now)
        self._news(g, uid, "restarting" if replaces else "starting", reason=replaces)
        self.due = min(self.due, self.clock.mono())
        return spec

    def _ask_leave(self, m: Member, why: str) -> None:
        """Take m out of the group: out of the view first (now, or when the holds go), then
        told to leave (it finishes what it has and exits)."""
        g = m.group
        was = m.state
        m.state = LEAVING
        self.agent.events.record(m.uid, E.MEMBER_LEAVE, why)
        self._news(g, m.uid, "leaving", reason=why)
        if was == STARTING:  # not serving anyone yet: stopped now
            self._stop(m, why, S.CANCELED)
            return
        if m.uid not in g.view:  # its join waits for a release: no view names it, so it goes
            g.pending = [(kind, x) for kind, x in g.pending if x is not m]
            self._tell_leave(m)
            return
        self._change(g, "leave", m)

    def _tell_leave(self, m: Member) -> None:
        """Ask m to leave: a message to its helper, else SIGTERM (a plain executable); then
        it has leave_timeout to finish before it is stopped."""
        if m.told:
            return
        m.told = True
        sent = False
        if m.ident is not None:
            try:
                self.sock.send_multipart([m.ident, _encode(["leave", m.uid])], zmq.NOBLOCK)
                sent = True
            except zmq.ZMQError:
                pass
        if not sent:
            t = self.agent.tasks.get(m.uid)
            if t is not None and t.running:
                self.agent.signal([t], signal.SIGTERM)
        m.leave_at = self.clock.mono() + m.group.spec.leave_timeout
        self.due = min(self.due, m.leave_at)

    def _stop(self, m: Member, why: str, state: str) -> None:
        m.why = m.why or why
        self.agent.cancel([m.uid], why, running_state=state, waiting_state=state)

    def member_exited(self, t, state: str, stderr: str | None) -> None:
        """Its task ended (task_ended)."""
        m = self.members.pop(t.spec.uid, None)
        if m is None:
            return
        g = m.group
        g.members.pop(m.uid, None)
        if m.endpoint is not None and self.endpoints.get(m.endpoint) == m.uid:
            del self.endpoints[m.endpoint]
        was, m.state = m.state, GONE
        now = self.clock.now()
        if was == LEAVING:
            self.agent.events.record(m.uid, E.MEMBER_LEFT, None, now)
            self._news(g, m.uid, "left", node=m.node or None)
            self._change(g, "leave", m)  # (if a failure overtook the leave)
            return
        why = m.why or t.reason or f"ended ({state}, exit code {t.exit_code})"
        if m.why and stderr and "stderr:" not in why:
            why += f"; stderr: {stderr[-300:].strip()}"
        self.agent.events.record(m.uid, E.MEMBER_FAIL, why[:500], now)
        self._news(g, m.uid, "failed", reason=why[:1000], node=m.node or None)
        self._change(g, "leave", m)
        if self.agent.stopping is not None:
            return
        failed = state != S.DONE or m.why is not None
        if (
            failed
            and g.spec.restart == "on-failure"
            and m.restarts < g.spec.max_restarts
            and len(g.live()) + self._restarts_for(g) < g.target
        ):
            # started from check_members(): a replacement refused at once must not recurse back here
            self.restarts.append((g, m.slot, m.restarts + 1, m.uid))
            self.due = self.clock.mono()
        elif len(g.live()) + self._restarts_for(g) < g.target:
            more = (
                f"restarted {m.restarts} times already (max_restarts = {g.spec.max_restarts})"
                if failed and g.spec.restart == "on-failure"
                else "restart = 'never'"
                if failed
                else "it exited by itself"
            )
            g.short = f"member {m.uid} is not replaced ({more}): {why}"[:1000]
            self._news(g, g.name, "short", reason=g.short)

    def _restarts_for(self, g: Group) -> int:
        return sum(1 for x in self.restarts if x[0] is g)

    def drain_node_members(self, uids: set[str], why: str) -> None:
        """Members on nodes that go away: they leave, and others start in their slots."""
        specs = []
        for uid in uids:
            m = self.members.get(uid)
            if m is None or m.state not in (STARTING, READY):
                continue
            g = m.group
            self._ask_leave(m, why)
            if len(g.live()) < g.target:
                specs.append(self._member_spec(g, m.slot, m.restarts, replaces=m.uid))
        self.agent.accept(specs)

    def task_ended(self, t, state: str, stderr: str | None) -> None:
        """A task of the pilot ended (ports.TaskEnded): a member's end, a holder's holds."""
        uid = t.spec.uid
        if uid in self.members:
            self.member_exited(t, state, stderr)
        if uid in self.hold_owners:
            for name, token in list(self.hold_owners.get(uid, ())):
                self.release(name, token)

    def owns(self, uid: str) -> bool:  # ports.NodeLeaving
        return uid in self.members

    def leave(self, uids: set[str], why: str) -> None:
        self.drain_node_members(uids, why)

    def _ready(self, m: Member, endpoint: str, info: dict) -> None:
        g = m.group
        m.state = READY
        m.endpoint = endpoint
        m.info = info
        self.endpoints[endpoint] = m.uid
        t = self.agent.tasks.get(m.uid)
        m.node = t.slots[0].node if t is not None and t.slots else hostname()
        mono = self.clock.mono()
        m.last_pong = mono
        if g.spec.health_interval and m.ident is not None:
            m.ping_due = mono + g.spec.health_interval
            self.due = min(self.due, m.ping_due)
        self.agent.events.record(m.uid, E.MEMBER_READY, endpoint)
        self._news(g, m.uid, "ready", node=m.node, endpoint=endpoint, info=info or None)
        self._change(g, "join", m)

    def _endpoint_problem(self, m: Member | None, uid: str, endpoint) -> str | None:
        if m is None or not isinstance(uid, str):
            return f"{uid} is not a live member of a service group"
        if m.endpoint is not None:
            return f"{uid} announced its endpoint already ({m.endpoint!r})"
        if m.state != STARTING:
            return f"{uid} is {m.state.value}"
        if (
            not isinstance(endpoint, str)
            or not endpoint
            or len(endpoint) > MAX_ENDPOINT
            or any(c.isspace() for c in endpoint)
        ):
            return (
                f"endpoint {str(endpoint)[:80]!r}: must be a non-empty string without "
                f"spaces, at most {MAX_ENDPOINT} characters"
            )
        other = self.endpoints.get(endpoint)
        if other is not None:
            return f"endpoint {endpoint!r} is announced by {other} already"
        return None

    # -- the view ----------------------------------------------------------------------------
    def _change(self, g: Group, kind: str, m: Member) -> None:
        if g.holds:
            g.pending.append((kind, m))
        else:
            self._apply(g, kind, m)

    def _apply(self, g: Group, kind: str, m: Member) -> None:
        if kind == "join":
            if m.state != READY or m.uid in g.view:
                return
            g.view[m.uid] = m
        else:
            if g.view.pop(m.uid, None) is None:
                return
        g.epoch += 1
        g.dirty = True
        self.agent.events.record(g.name, E.GROUP_EPOCH, f"{g.epoch} {len(g.view)}")
        if kind == "leave" and m.state == LEAVING:
            self._tell_leave(m)

    def _send_view(self, g: Group) -> None:
        g.dirty = False
        msg = g.view_msg(self.clock.now())
        self.agent.send(msg)
        if g.subscribers:
            frame = _encode(peer_view(msg))
            for ident in g.subscribers:
                self._reply(ident, frame)

    def flush(self) -> None:
        for g in self.groups.values():
            if g.dirty:
                self._send_view(g)

    def _news(
        self,
        g: Group,
        uid: str,
        state: str,
        reason: str | None = None,
        node: str | None = None,
        endpoint: str | None = None,
        info: dict | None = None,
    ) -> None:
        if g.dirty:  # news never overtakes the view it follows (a client woken by a "short"
            self._send_view(g)  # must find the members that did join)
        self.agent.send(
            _wire.MemberNews(g.name, uid, state, self.clock.now(), reason, node, endpoint, info)
        )

    def _ack(self, name: str, token: str, epoch: int, error: str | None, target: int = -1) -> None:
        self.agent.send(_wire.GroupAck(name, token, epoch, error, target))

    # -- the socket --------------------------------------------------------------------------
    def on_readable(self) -> None:
        for ident, payload in router_messages(self.sock):
            try:
                msg = _decode(payload)
                self._on_peer(ident, msg[0], msg)
            except Exception:  # a peer's bad message costs nothing
                log.exception("service registry: bad message")

    def _reply(self, ident: bytes, msg: list | bytes) -> None:
        """To one peer; one that is gone is dropped by the ROUTER (no error to handle)."""
        try:
            self.sock.send_multipart(
                [ident, msg if isinstance(msg, bytes) else _encode(msg)], zmq.NOBLOCK
            )
        except zmq.ZMQError:  # (its queue is full: it is not reading)
            pass

    def _on_peer(self, ident: bytes, kind: str, msg: list) -> None:
        if kind == "announce":
            _, uid, endpoint, info = msg[:4]
            m = self.members.get(uid) if isinstance(uid, str) else None
            why = self._endpoint_problem(m, uid, endpoint)  # an unknown uid: a why
            if why is None:
                try:
                    if not isinstance(info, dict) or len(_encode(info)) > MAX_INFO:
                        why = f"info must be a dict of at most {MAX_INFO} bytes (msgpack)"
                except Exception as e:  # noqa: BLE001 -- whatever the info holds: refused, with why
                    why = f"info cannot be encoded: {e}"
            if why is not None:
                self.agent.events.record(str(uid)[:200], E.ANNOUNCE_REFUSED, why[:300])
                self._reply(ident, ["refused", uid, why])
                return
            assert m is not None  # (_endpoint_problem refuses an unknown uid)
            m.ident = ident
            self._ready(m, endpoint, info)
            self._reply(ident, ["announced", uid, m.group.member_secret])
        elif kind == "pong":
            m = self.members.get(msg[1])
            if m is None or m.state != READY:
                return
            if msg[2]:
                m.last_pong = self.clock.mono()
            else:
                self._fail(m, f"health check failed: {msg[3] if len(msg) > 3 else ''}"[:500])
        elif kind == "subscribe":
            name = msg[1]
            g = self.groups.get(name)
            if g is None:
                self.waiting_subs.setdefault(name, set()).add(ident)
                return
            g.subscribers.add(ident)
            self._reply(ident, peer_view(g.view_msg(self.clock.now())))  # it alone needs it
        elif kind == "hold":
            _, name, token, owner = msg[:4]
            epoch, why = self.hold(name, token, owner or None)
            self._reply(ident, ["held", name, token, epoch, why])
        elif kind == "release":
            self.release(msg[1], msg[2])
            self._reply(ident, ["released", msg[1], msg[2]])

    def _fail(self, m: Member, why: str) -> None:
        if m.why is None:
            self._stop(m, why, S.FAILED)

    # -- time --------------------------------------------------------------------------------
    def check_members(self) -> None:
        """Stdout announcements, ready timeouts, health checks, leave deadlines."""
        if self.restarts and self.agent.stopping is None:
            restarts, self.restarts = self.restarts, []
            self.agent.accept(
                [
                    self._member_spec(g, slot, n, replaces=replaces)
                    for g, slot, n, replaces in restarts
                    if len(g.live()) < g.target
                ]
            )
        mono = self.clock.mono()
        due = float("inf")
        tasks = self.agent.tasks
        for m in list(self.members.values()):
            g = m.group
            if m.state == STARTING:
                t = tasks.get(m.uid)
                if t is None or not t.running:
                    due = min(due, mono + 0.1)  # queued: looked at now and then
                    continue
                if m.run_since is None:
                    m.run_since = mono
                if self._scan(m, t):
                    continue
                if mono - m.run_since > g.spec.ready_timeout:
                    self._fail(
                        m,
                        f"did not announce its endpoint within "
                        f"{g.spec.ready_timeout:g}s (ready_timeout)",
                    )
                    continue
                due = min(due, mono + SCAN_S)
            elif m.state == READY and g.spec.health_interval and m.ident is not None:
                interval = g.spec.health_interval
                if mono - m.last_pong > HEALTH_MISSES * interval:
                    self._fail(m, f"health check: no answer for {mono - m.last_pong:.1f}s")
                    continue
                if mono >= m.ping_due:
                    self._reply(m.ident, ["ping", m.uid])
                    m.ping_due = mono + interval
                due = min(due, m.ping_due)
            elif m.state == LEAVING and m.leave_at is not None:
                if mono >= m.leave_at:
                    m.leave_at = None
                    self._stop(
                        m, f"did not leave within {g.spec.leave_timeout:g}s (leave_timeout)", S.DONE
                    )
                else:
                    due = min(due, m.leave_at)
        self.due = due

    def _scan(self, m: Member, t) -> bool:
        """Look for the announcement line in a starting member's stdout; True once found."""
        path = t.out_paths[0] if t.out_paths else None
        if not path:
            return False
        try:
            with open(path, "rb") as f:
                f.seek(m.offset)
                data = f.read(1 << 16)
        except OSError:
            return False
        end = data.rfind(b"\n")
        if end < 0:
            return False
        m.offset += end + 1
        for line in data[:end].split(b"\n"):
            if not line.startswith(ANNOUNCE_PREFIX):
                continue
            parts = line[len(ANNOUNCE_PREFIX) :].decode(errors="replace").strip().split(None, 1)
            endpoint = parts[0] if parts else ""
            info: dict = {}
            why = self._endpoint_problem(m, m.uid, endpoint)
            if why is None and len(parts) > 1:
                try:
                    info = json.loads(parts[1])
                    if not isinstance(info, dict):
                        raise ValueError("not a JSON object")
                except ValueError as e:
                    why = f"announcement info is not a JSON object: {e}"
            if why is not None:
                self.agent.events.record(m.uid, E.ANNOUNCE_REFUSED, why[:300])
                self._fail(m, f"bad announcement: {why}")
                return True
            self._ready(m, endpoint, info)
            return True
        return False

    def close(self) -> None:
        self.door.close()
        self.sock.close(0)
        for path in [self.key_file] + [g.fn_path for g in self.groups.values() if g.fn_path]:
            try:
                os.unlink(path)
            except OSError:
                pass
