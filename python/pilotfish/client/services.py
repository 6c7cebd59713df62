"""Service groups as the client sees them (TaskManager.submit_service_group).

The agent owns the membership (agent/services.py); this object mirrors it from the agent's
GroupView and MemberNews messages, on the client's IO thread. A hold is a round trip: when
hold() returns, the agent has pinned the view, and the view it pinned has arrived here
(it is sent before the answer on the same connection).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from typing import Any, Callable

from .. import _wire
from .. import states as S
from .._errors import DescriptionError
from .._shapes import rank_capacity
from ..descriptions import ServiceDescription, TaskDescription, check_descriptions
from ..service import Hold, Member, ServiceError, View, client_key
from ._calls import pickle_calls
from ._ports import GroupListener, PilotPort

MemberNews = _wire.MemberNews


class ServiceGroup:
    """A group of long-running members on one pilot, and its current view."""

    def __init__(self, tmgr: Any, description: ServiceDescription, pilot: PilotPort, replicas: int):
        self.name: str = description.name
        self.description = description
        self.pilot = pilot
        self.target = replicas
        self._tmgr = tmgr
        self._plane = tmgr.session.plane  # (its bridge: the group's requests to the agent)
        self._view = View(0, [], replicas)
        self._cond = threading.Condition()
        self._cbs: list[Callable[["ServiceGroup", View], Any]] = []
        self._holds: list[str] = []
        self._acks: dict[str, _wire.GroupAck] = {}
        self._short: str | None = None  # why the group cannot reach its target
        self._resize_lock = threading.Lock()
        self.history: list[tuple[float, int, int]] = []  # (t, epoch, members) per view
        self.reattached = False  # a resumed session found it running (members untouched)
        self.news: list[MemberNews] = []  # every member's life, as the agent told it

    # -- the view ----------------------------------------------------------------------------
    @property
    def view(self) -> View:
        """The group's current view: its epoch, its members (uid, node, endpoint), its hash."""
        return self._view

    @property
    def members(self) -> list[Member]:
        """The members in the current view (READY ones), in join order."""
        return list(self._view.members)

    @property
    def epoch(self) -> int:
        """The current view's epoch: one more with every change of members."""
        return self._view.epoch

    @property
    def view_hash(self) -> str:
        """A digest of the current view (clients compare it to know they agree)."""
        return self._view.hash

    @property
    def endpoints(self) -> list[str]:
        """The endpoints the current view's members announced, in member order."""
        return self._view.endpoints

    def on_change(self, cb: Callable[["ServiceGroup", View], Any]) -> None:
        """cb(group, view) on every new view, on the client's IO thread (keep it short)."""
        self._cbs.append(cb)

    def wait(self, until: Callable[[View], bool], timeout: float | None = None) -> View:
        """Block until the view satisfies `until`; ServiceError if the group cannot get there
        (a member failed for good, the pilot ended) or on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not until(self._view):
                if self._short is not None:
                    raise ServiceError(f"service group {self.name!r}: {self._short}")
                if self.pilot.state in S.FINAL:
                    raise ServiceError(
                        f"service group {self.name!r}: pilot {self.pilot.uid} "
                        f"ended ({self.pilot.state}: {self.pilot.reason})"
                    )
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ServiceError(
                        f"service group {self.name!r}: not there within "
                        f"{timeout:g}s (view: {len(self._view.members)} of "
                        f"{self.target} members, epoch {self._view.epoch})"
                    )
                self._cond.wait(1.0 if left is None else min(left, 1.0))
            return self._view

    def wait_ready(self, timeout: float | None = None) -> list[str]:
        """Block until the view holds as many members as asked for; their endpoints."""
        return self.wait(lambda v: len(v.members) >= self.target, timeout).endpoints

    def wait_epoch(self, epoch: int, timeout: float | None = None) -> View:
        """Block until the group's view has reached this epoch (or a later one); returns that
        view (timeout: seconds, as wait())."""
        return self.wait(lambda v: v.epoch >= epoch, timeout)

    # -- changes -----------------------------------------------------------------------------
    def resize(self, replicas: int, grow: bool = False, timeout: float = 60.0) -> None:
        """Ask for `replicas` members: new ones start (and join when ready), extra ones leave
        gracefully (out of the view first). Returns once the agent took the request; watch the
        view (wait_ready, on_change) for the change. grow=True grows the pilot (Pilot.grow)
        when it cannot hold that many members; else that is a DescriptionError."""
        replicas = _check_replicas(replicas, "resize")
        need = _capacity_problem(self.description, self.pilot, replicas)
        if need is not None and grow:
            self.pilot.grow(nodes=need[1], timeout=timeout)
            need = _capacity_problem(self.description, self.pilot, replicas)
        if need is not None:
            raise DescriptionError("ServiceGroup.resize", "replicas", replicas, need[0])
        with self._resize_lock:
            self._short = None
            self.target = replicas
            ack = self._ask(_wire.GroupResize(self.name, replicas), "resize", timeout)
        if ack.error:
            raise ServiceError(f"resize of {self.name!r}: {ack.error}")

    def stop(self, timeout: float = 60.0) -> None:
        """Every member leaves (resize to 0)."""
        self.resize(0, timeout=timeout)

    def hold(self, timeout: float = 30.0) -> Hold:
        """Pin the view until release (a context manager whose value is the pinned View):
        joins and leaves wait until the group's last hold is released."""
        token = uuid.uuid4().hex[:12]
        try:
            ack = self._ask(_wire.GroupHold(self.name, token), token, timeout)
        except ServiceError:  # it may be in place: never leave a hold nobody will release
            self._send(_wire.GroupRelease(self.name, token))
            raise
        if ack.error:
            raise ServiceError(f"hold of {self.name!r}: {ack.error}")
        self._holds.append(token)
        return Hold(self, token, self.wait_epoch(ack.epoch, timeout))

    def release(self, token: str | None = None) -> None:
        """Release a hold (default: the latest)."""
        if token is None:
            if not self._holds:
                return
            token = self._holds[-1]
        if token in self._holds:
            self._holds.remove(token)
        self._send(_wire.GroupRelease(self.name, token))

    def _send(self, msg: Any) -> None:
        self._plane.bridge.send(self.pilot.uid, _wire.encode(msg))

    def _ask(self, msg: Any, token: str, timeout: float) -> _wire.GroupAck:
        with self._cond:
            self._acks.pop(token, None)
        self._send(msg)
        with self._cond:
            if not self._cond.wait_for(
                lambda: token in self._acks or self.pilot.state in S.FINAL, timeout
            ):
                raise ServiceError(
                    f"service group {self.name!r}: the pilot did not answer within {timeout:g}s"
                )
            if token not in self._acks:
                raise ServiceError(f"service group {self.name!r}: pilot {self.pilot.uid} ended")
            return self._acks.pop(token)

    # -- from the agent (IO thread) --------------------------------------------------------
    def _on(self, msg: Any) -> None:
        cbs = []
        with self._cond:
            if isinstance(msg, _wire.GroupView):
                if msg.epoch < self._view.epoch:
                    return
                changed = msg.epoch != self._view.epoch or not self.history
                self._view = View(
                    msg.epoch,
                    [Member(m.uid, m.endpoint, m.node, dict(m.info)) for m in msg.members],
                    msg.target,
                    client_key(msg.client_key),
                )
                if changed:
                    self.history.append((msg.t, msg.epoch, len(msg.members)))
                    cbs = list(self._cbs)
            elif isinstance(msg, _wire.MemberNews):
                self.news.append(msg)
                if msg.uid == self.name and msg.state == "short":
                    self._short = msg.reason
            elif isinstance(msg, _wire.GroupAck):
                self._acks[msg.token] = msg
            self._cond.notify_all()
        view = self._view
        for cb in cbs:
            try:
                cb(self, view)
            except Exception:  # a callback must not stop the IO thread
                import logging

                logging.getLogger("pilotfish.client").exception("on_change callback failed")

    def _pilot_final(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __repr__(self) -> str:
        return (
            f"<ServiceGroup {self.name} {len(self._view.members)}/{self.target} members "
            f"epoch {self._view.epoch}>"
        )


def _check_encodable(start: _wire.GroupStart, d: ServiceDescription) -> None:
    """DescriptionError naming the first field the wire cannot carry (a value of a type
    msgpack does not know), before anything is registered or sent."""
    try:
        _wire.encode(start)
        return
    except (TypeError, ValueError, OverflowError) as e:
        why = str(e)
    for f in ("name", "executable", "arguments", "environment", "pre_exec", "launcher"):
        try:
            _wire.encode(getattr(d, f, None))
        except (TypeError, ValueError, OverflowError) as e:
            raise DescriptionError(
                "ServiceDescription", f, getattr(d, f, None), f"cannot be sent to the pilot: {e}"
            ) from None
    raise DescriptionError(
        "ServiceDescription", "description", d.name, f"cannot be sent to the pilot: {why}"
    )


def _check_replicas(replicas: Any, where: str) -> int:
    if type(replicas) is not int or replicas < (1 if where == "submit" else 0):
        raise DescriptionError(
            "ServiceGroup" if where == "submit" else "ServiceGroup.resize",
            "replicas",
            replicas,
            "must be an integer >= 1"
            if where == "submit"
            else "must be an integer >= 0 (0 stops every member)",
        )
    return replicas


def _capacity_problem(
    d: ServiceDescription, pilot: PilotPort, replicas: int
) -> tuple[str, int] | None:
    """(why, nodes a grow would need) if the pilot cannot hold `replicas` members at once."""
    shapes = pilot.partition_shapes
    if shapes is None or replicas == 0:
        return None
    cores, gpus, mem, ranks = d.cores_per_rank, d.gpus_per_rank, d.mem_per_rank, d.ranks
    cap = sum(rank_capacity(shape, cores, gpus, mem) for shape in shapes) // ranks
    if replicas <= cap:
        return None
    node = shapes[0][0] if shapes and shapes[0] else (1, 0, 0)
    per_node = max(1, rank_capacity([node], cores, gpus, mem)) / ranks
    nodes = max(1, math.ceil((replicas - cap) / per_node)) if per_node > 0 else 1
    return (
        f"{replicas} members of {ranks} rank(s) x {cores} core(s) do not fit {pilot.uid} "
        f"at once (it holds {cap}); resize(..., grow=True) or Pilot.grow() adds nodes",
        nodes,
    )


def submit_group(
    tmgr: Any, pilots: list[PilotPort], description: Any, replicas: int
) -> ServiceGroup:
    """TaskManager.submit_service_group: start a group on the first live one of `pilots` (the
    manager's, in the order they were added) or on description.pilot. Its messages reach it
    through the session's router from its start request on."""
    (d,) = check_descriptions([description], ServiceDescription)
    replicas = _check_replicas(replicas, "submit")
    pilots = [p for p in pilots if p.state not in S.FINAL]
    if d.pilot is not None:
        pilots = [p for p in pilots if p.uid == d.pilot]
        if not pilots:
            raise DescriptionError(
                "ServiceDescription", "pilot", d.pilot, "not a live pilot of this TaskManager"
            )
    if not pilots:
        raise ServiceError("no live pilot: add one with TaskManager.add_pilots() first")
    pilot = pilots[0]
    if pilot.description.resource == "simulated":
        raise DescriptionError(
            "ServiceDescription",
            "pilot",
            pilot.uid,
            "service groups do not run on a simulated pilot",
        )
    router = tmgr.session.router
    if router.has_group(pilot.uid, d.name):
        raise DescriptionError(
            "ServiceDescription",
            "name",
            d.name,
            f"a service group of that name runs on {pilot.uid} already",
        )
    problem = pilot.misfit(d.ranks, d.cores_per_rank, d.gpus_per_rank, d.mem_per_rank)
    if problem is not None:
        raise DescriptionError(
            "ServiceDescription",
            problem[0],
            getattr(d, problem[0]),
            problem[1] + f" of {pilot.uid}",
        )
    need = _capacity_problem(d, pilot, replicas)
    if need is not None:
        raise DescriptionError("ServiceGroup", "replicas", replicas, need[0])
    shape = dict(
        ranks=d.ranks,
        cores_per_rank=d.cores_per_rank,
        gpus_per_rank=d.gpus_per_rank,
        mem_per_rank=d.mem_per_rank,
    )
    if d.function is not None:  # (the agent runs it with python -m pilotfish.service)
        fd = TaskDescription(function=d.function, args=d.args, kwargs=d.kwargs)
        fn, call, _ = pickle_calls([fd], [0])[0]
        what: dict[str, Any] = dict(executable="", function=fn, call=call)
    else:
        what = dict(executable=d.executable, arguments=tuple(d.arguments))
    template = _wire.TaskSpec(
        uid="-",
        environment=dict(d.environment),
        pre_exec=tuple(d.pre_exec),
        launcher=d.launcher,
        **shape,
        **what,
    )
    spec = _wire.ServiceSpec(
        d.name,
        template,
        replicas,
        d.restart,
        d.max_restarts,
        d.ready_timeout,
        d.health_interval,
        d.leave_timeout,
    )
    resume = tmgr.session.resumed is not None  # (a running group is re-attached)
    start = _wire.GroupStart(spec, resume)
    _check_encodable(start, d)
    group = ServiceGroup(tmgr, d, pilot, replicas)
    router.add_group(pilot.uid, d.name, GroupListener(group._on, group._pilot_final))
    try:
        ack = group._ask(start, "start", 60.0)
    except BaseException:
        router.drop_group(pilot.uid, d.name)  # a failed start leaves the name free
        raise
    if ack.error:
        router.drop_group(pilot.uid, d.name)
        raise ServiceError(f"service group {d.name!r}: {ack.error}")
    if ack.target >= 0:  # a resumed session: the agent had it running
        group.target = ack.target
        group.reattached = True
    return group
