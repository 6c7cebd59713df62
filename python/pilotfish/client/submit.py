"""Submitting tasks: one pipeline, used by every front end (TaskManager.submit_tasks; through
it pf.Executor, pilotfish.parsl and pilotfish.rp).

    descriptions -plan-> Plan -encode-> Encoded -write_journal-> (in the session's journal)
                 -register-> Tasks (in the registry and their manager's books) -send-> frames

    plan(descriptions, routing, plane, resumed)   check them, match a resumed session's journal,
                                                  route each to a pilot (Routing), give uids,
                                                  check the user's side of their paths
    encode(plan, spec_extra, journaled)           per pilot Submit frames (SUBMIT_BATCH tasks
                                                  each) and the journal's records, all of them
    write_journal(encoded, plane)                 written, all or nothing
    register(plan, owner, plane, events, routing) the Tasks, in the session's registry and
                                                  their manager's books
    send(encoded, tasks, plane, owner)            the frames queued to the bridge

Word: the client's word to its simulated pilots -- it waits (TaskManager.wait_tasks), or it
said nothing for a while after a submit -- after which their virtual clocks may run
(agent/simulation.py): a burst of submits is one instant however slowly it is sent.

All or nothing up to register: plan, encode and journal raise (a DescriptionError naming the
task's index, field and value; a PilotfishError; the journal's SessionError) with no task
registered, counted or sent -- what they did leaves no trace but uids given out, a
round-robin turn taken and, resuming, the journal's tasks they matched counted as matched.
register and send do not fail on a description. The stages meet the
TaskManager's books (task_books.TaskBooks) through _ports.SubmitOwner and the session through
_ports.SubmitPlane; routing (which pilot, by the manager's scheduler and its pilots'
outstanding load) is Routing's.

The hot path (a bulk submit of thousands of tasks): per task, each stage does only what it
must (bench/bench_e2e.py null_tasks measures the client's CPU per task).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple, cast

import msgspec

from .. import _wire
from .. import states as S
from .._errors import DescriptionError, PilotfishError
from .._journal import task_record
from ..descriptions import TaskDescription, check_descriptions
from ._calls import pickle_calls
from ._ports import EventSink, PilotPort, SubmitOwner, SubmitPlane

SUBMIT_BATCH = 2048  # tasks per Submit frame

SpecExtra = Callable[[str, TaskDescription, PilotPort], dict]
"""TaskManager.spec_extra: (uid, description, pilot) -> TaskSpec fields to add."""


# -- routing --------------------------------------------------------------------------------
class Routing:
    """Where a TaskManager's tasks may go and where each goes: its scheduler, its pilots (the
    manager's dicts, shared: add/remove_pilots change them), the outstanding cores per pilot
    (`load`: register adds a task's, its manager takes them off as it ends)."""

    SCHEDULERS = ("backfilling", "round_robin")

    __slots__ = ("scheduler", "pilots", "known", "load", "turn")

    def __init__(
        self, scheduler: str, pilots: dict[str, PilotPort], known: dict[str, PilotPort]
    ) -> None:
        if scheduler not in self.SCHEDULERS:
            raise ValueError(
                f"TaskManager scheduler {scheduler!r} is unknown: use one of "
                f"{', '.join(map(repr, self.SCHEDULERS))}"
            )
        self.scheduler = scheduler
        self.pilots = pilots
        """Where new tasks may go (TaskManager.add_pilots, remove_pilots)."""
        self.known = known
        """Every pilot ever added, removed ones too (their tasks still run there)."""
        self.load: dict[str, int] = collections.defaultdict(int)
        """Outstanding cores per pilot uid."""
        self.turn = 0
        """round_robin: the next pilot's turn."""

    def live(self) -> list[PilotPort]:
        """The pilots a submit may route to now; PilotfishError if there is none."""
        pilots = [p for p in self.pilots.values() if p.state not in S.FINAL]
        if not pilots:
            removed = [u for u in self.known if u not in self.pilots]
            raise PilotfishError(
                "no live pilot: add one with TaskManager.add_pilots() first"
                + (f" ({', '.join(removed)}: taken off by remove_pilots)" if removed else "")
            )
        return pilots

    def route(
        self,
        d: TaskDescription,
        index: int,
        pilots: list[PilotPort],
        pending: dict[str, int] | None = None,
    ) -> PilotPort:
        """The least loaded pilot (outstanding cores per core, with `pending`: cores routed
        earlier in the same call) that can hold the request; else a DescriptionError.
        (Per task of every bulk submit: the description's values are read directly.)"""
        v = d.values
        pin = v.get("pilot")
        if pin is not None:  # pinned: that pilot or an error
            pinned = [p for p in pilots if p.uid == pin]
            if not pinned:
                why = (
                    "was removed from this TaskManager (remove_pilots; add_pilots adds it again)"
                    if pin in self.known and pin not in self.pilots
                    else "not a live pilot of this TaskManager"
                )
                raise DescriptionError(
                    "TaskDescription",
                    "pilot",
                    pin,
                    f"{why} (live: {', '.join(p.uid for p in pilots) or 'none'})",
                    index=index,
                )
            pilots = pinned
        env = v.get("named_env")
        if env is not None:
            having = [p for p in pilots if env in p.envs]
            if not having:
                raise DescriptionError(
                    "TaskDescription",
                    "named_env",
                    env,
                    "no environment of that name was prepared on "
                    f"{'pilot ' + pin if pin else 'any live pilot'}"
                    " (Pilot.prepare_env)",
                    index=index,
                )
            pilots = having
        ranks = v.get("ranks", 1)
        cores = v.get("cores_per_rank", 1)
        if len(pilots) == 1:  # the common case: one pilot, a shape it fits (memoized)
            p = pilots[0]
            problem = p.misfit(ranks, cores, v.get("gpus_per_rank", 0), v.get("mem_per_rank", 0))
            if problem is not None:
                raise DescriptionError(
                    "TaskDescription",
                    problem[0],
                    getattr(d, problem[0]),
                    problem[1] + f" of {p.uid}",
                    index=index,
                )
            chosen = p
        else:
            chosen = self._choose(d, index, pilots, pending, ranks, cores)
        if pending is not None:
            pending[chosen.uid] += ranks * cores
        if chosen.simulated and v.get("duration") is None:
            raise DescriptionError(
                "TaskDescription",
                "duration",
                None,
                f"required on a simulated pilot ({chosen.uid}): a simulated "
                "task runs for its duration",
                index=index,
            )
        return chosen

    def _choose(
        self,
        d: TaskDescription,
        index: int,
        pilots: list[PilotPort],
        pending: dict[str, int] | None,
        ranks: int,
        cores: int,
    ) -> PilotPort:
        fitting, unknown, why = [], [], None
        v = d.values
        for p in pilots:
            if p.partition_shapes is None:
                unknown.append(p)
                continue
            problem = p.misfit(ranks, cores, v.get("gpus_per_rank", 0), v.get("mem_per_rank", 0))
            if problem is None:
                fitting.append(p)
            elif why is None:
                why = (problem[0], problem[1] + f" of {p.uid}")
        candidates = fitting or unknown
        if not candidates:
            assert why is not None  # (every pilot said why)
            field, reason = why
            raise DescriptionError("TaskDescription", field, getattr(d, field), reason, index=index)
        if len(candidates) == 1:
            return candidates[0]
        if self.scheduler == "round_robin":
            order = list(self.pilots)
            chosen = min(candidates, key=lambda p: (order.index(p.uid) - self.turn) % len(order))
            self.turn = (order.index(chosen.uid) + 1) % len(order)
            return chosen
        load = self.load
        extra = pending if pending is not None else {}
        return min(
            candidates,
            key=lambda p: (
                (load[p.uid] + extra.get(p.uid, 0))
                / max(1, sum(c for c, _, _ in (p.shape or [(1, 0, 0)])))
            ),
        )


def cores(d: TaskDescription) -> int:
    """A description's cores (ranks x cores per rank), read without attribute lookups: a
    pilot's load counts it for every task at register and at its end (TaskManager)."""
    v = d.values
    return v.get("ranks", 1) * v.get("cores_per_rank", 1)


# -- plan -----------------------------------------------------------------------------------
class Plan(NamedTuple):
    """What a submit will do, decided before anything is encoded."""

    descs: list[TaskDescription]
    """The checked descriptions, in submit order."""
    uids: list[str]
    """Each task's uid (a resumed one's from the journal)."""
    pilot_uids: list[str]
    """Each task's pilot: where it was routed, or where a resumed one still is."""
    resumed: dict[int, tuple[str, str | None]]
    """{index: (uid, the pilot that still has it, or None: sent again)}: the journal's tasks."""
    to_send: list[int]
    """The indices of the tasks to send (the new ones and the resumed ones no agent has)."""
    by_pilot: dict[str, list[int]]
    """to_send per pilot uid, in submit order."""
    pilots: dict[str, PilotPort]
    """The pilots of by_pilot, by uid."""


def plan(
    descriptions: Iterable[Any], routing: Routing, plane: SubmitPlane, resumed: Any = None
) -> Plan:
    """Check the descriptions (TaskDescriptions or dicts), match them with a resumed session's
    journal (`resumed`: the session's Resumed, None for a new session), route each task to
    send to a live pilot -- one after another, each seeing the cores routed before it in this
    call, so a bulk submit spreads over the pilots by their capacity -- give the new ones
    uids, and check that their staging and output paths on the user's side do not name their
    pilot's own files. Raises DescriptionError (index, field, value, why) or PilotfishError
    (no live pilot, a resumed submit that differs from the journal); the uids given out are
    not given again."""
    plane.check_open()
    descs = check_descriptions(descriptions, TaskDescription)
    live = routing.live()
    matched = match_journal(descs, resumed, routing.known) if resumed is not None else {}
    route = routing.route
    pending: dict[str, int] = collections.defaultdict(int)
    # (Any: None for a resumed task until it is known to need sending, then its pilot)
    routes: list[Any] = [
        None if i in matched else route(d, i, live, pending) for i, d in enumerate(descs)
    ]
    if not matched:  # (a new session's submit: every task is new)
        uids = plane.next_task_uids(len(descs))
        to_send = list(range(len(descs)))
    else:
        new_uids = iter(plane.next_task_uids(len(descs) - len(matched)))
        uids, to_send = [], []
        for i in range(len(descs)):
            r = matched.get(i)
            if r is None:
                uids.append(next(new_uids))
                to_send.append(i)
            else:
                uids.append(r[0])
                if r[1] is None:  # known, but never reached an agent that still knows it
                    to_send.append(i)
    by_pilot: dict[str, list[int]] = collections.defaultdict(list)
    pilots: dict[str, PilotPort] = {}
    for i in to_send:
        p = routes[i]
        if p is None:
            p = routes[i] = route(descs[i], i, live, pending)
        _check_outer_paths(descs[i], i, p)
        by_pilot[p.uid].append(i)
        pilots[p.uid] = p
    pilot_uids = [  # (not routed: a resumed task its agent still has, on that pilot)
        p.uid if p is not None else cast(str, matched[i][1]) for i, p in enumerate(routes)
    ]
    return Plan(descs, uids, pilot_uids, matched, to_send, by_pilot, pilots)


def match_journal(
    descs: list[TaskDescription], resumed: Any, known: dict[str, PilotPort]
) -> dict[int, tuple[str, str | None]]:
    """Resumed session: {index: (uid, pilot uid that still has it, or None to send it
    again)} for the descriptions that match the journal's tasks, in submit order (`resumed`:
    the session's Resumed, whose count of tasks used this advances; `known`: the manager's
    pilots by uid)."""
    r = resumed
    out: dict[int, tuple[str, str | None]] = {}
    for i, d in enumerate(descs):
        if r.tasks_used >= len(r.tasks):
            break
        uid, pilot_uid, values = r.tasks[r.tasks_used]
        if _normalized(values) != _normalized(journal_values(d)):
            raise PilotfishError(
                f"resume: task {i} of this submit differs from {uid} in the journal; "
                f"submit the same tasks in the same order (then add new ones)"
            )
        r.tasks_used += 1
        pilot_uid = r.pilot_of.get(uid, pilot_uid)
        live = known.get(pilot_uid)
        if uid in r.finals or uid in r.adopted:  # (adopted: its agent's keeper runs it)
            out[i] = (uid, pilot_uid)
        elif (
            live is not None
            and live.state not in S.FINAL
            and uid not in live.missing
            and live.resync is not None
        ):
            out[i] = (uid, pilot_uid)  # its agent is still on it
        else:
            out[i] = (uid, None)
    return out


# -- encode ---------------------------------------------------------------------------------
class Encoded(NamedTuple):
    """A plan's frames and journal records, encoded."""

    frames: list[tuple[str, bytes, list[int]]]
    """(pilot uid, Submit frame, the indices of its tasks), at most SUBMIT_BATCH tasks each."""
    journal: list[bytes]
    """The tasks' journal records, one payload per frame ([] when the journal is off)."""
    fn_sent: dict[str, set[bytes]]
    """Per pilot uid, the digests of this submit's callables its agent will have been sent
    once the frames are queued ({} without function tasks)."""
    pilots: dict[str, PilotPort]
    """The frames' pilots, by uid."""
    n_send: int
    """How many tasks the frames carry."""


def encode(plan: Plan, spec_extra: SpecExtra | None, journaled: bool) -> Encoded:
    """The plan's tasks to send as Submit frames per pilot (SUBMIT_BATCH tasks a frame) and,
    if `journaled`, their journal records; function tasks' calls pickled, a callable carried
    only by the first of its calls that its pilot's agent was not sent yet (the pilot's
    fn_sent, read here, is not changed: send marks them). spec_extra: TaskManager.spec_extra.
    All or nothing: a description that cannot be pickled or cannot cross the wire raises a
    DescriptionError naming it (index, field, value); nothing is changed then."""
    descs, uids = plan.descs, plan.uids
    calls = pickle_calls(descs, plan.to_send)  # function tasks: DescriptionError if unpicklable
    refs = {c[2] for c in calls.values()}  # their callables' digests
    frames: list[tuple[str, bytes, list[int]]] = []
    records: list[bytes] = []
    fn_sent: dict[str, set[bytes]] = {}  # callables each pilot's agent will have been sent
    for pilot_uid, idx in plan.by_pilot.items():
        pilot = plan.pilots[pilot_uid]
        shared = os.path.join(pilot.sandbox, "tasks", "shared")
        extra = None if spec_extra is None else (lambda u, d, p=pilot, f=spec_extra: f(u, d, p))
        for k in range(0, len(idx), SUBMIT_BATCH):
            part = idx[k : k + SUBMIT_BATCH]
            try:
                specs = [
                    spec(uids[i], descs[i], shared, pilot.envs, extra, calls.get(i)) for i in part
                ]
                if calls:
                    sent = fn_sent.get(pilot_uid)
                    if sent is None:  # (of this submit's callables only)
                        sent = fn_sent[pilot_uid] = refs & pilot.fn_sent
                    first_carries_function(specs, sent)
                frame = _wire.encode(_wire.Submit(specs))
                if journaled:
                    records.append(
                        _journal_encode(
                            [
                                task_record(uids[i], pilot_uid, journal_values(descs[i]))
                                for i in part
                            ]
                        )
                    )
            except Exception:  # noqa: BLE001 -- any failure names the culprit description
                raise _culprit(part, descs) from None
            frames.append((pilot_uid, frame, part))
    return Encoded(frames, records, fn_sent, plan.pilots, len(plan.to_send))


# -- journal, register, send ----------------------------------------------------------------
def write_journal(encoded: Encoded, plane: SubmitPlane) -> None:
    """The encoded tasks' records into the session's journal, before anything is registered
    or sent: a resume knows them all, and a journal that cannot take them (a full disk) fails
    the call with nothing done (the journal takes back a write that fails): the plane's
    journal_error (a SessionError) is raised."""
    try:
        plane.journal.write_encoded(encoded.journal)
    except OSError as e:
        raise plane.journal_error(
            e,
            f"journal the {encoded.n_send} tasks of this submit (none was registered or sent) in",
        ) from e


def register(
    plan: Plan, owner: SubmitOwner, plane: SubmitPlane, events: EventSink, routing: Routing
) -> list:
    """The plan's tasks, made by their manager (owner.make_tasks: in SCHEDULING, at one time),
    entered in the session's task registry with it as their owner, their cores counted on
    their pilots' load (routing.load), their NEW and SCHEDULING events recorded (`events`:
    the session's; not for resumed tasks, whose events were), then kept by the manager
    (owner.keep_tasks: its list, its counts, a resumed task's state, the callbacks of NEW and
    SCHEDULING, before any frame leaves). Returns the tasks in submit order."""
    now = time.time()
    uids, descs, pilot_uids, resumed = plan.uids, plan.descs, plan.pilot_uids, plan.resumed
    tasks = owner.make_tasks(uids, descs, pilot_uids, now)
    entries = plane.registry.entries  # (uid -> (task, its owner))
    load = routing.load
    profile = events.enabled  # off: not even the event tuples are built
    batch: list = []
    for i, t in enumerate(tasks):
        uid = uids[i]
        pilot_uid = pilot_uids[i]
        entries[uid] = (t, owner)
        load[pilot_uid] += cores(descs[i])
        if not profile or (resumed and i in resumed):
            continue
        batch += ((now, uid, S.NEW, None), (now, uid, S.SCHEDULING, pilot_uid))
        if len(batch) >= 8192:  # hand over in slices: no big transient list
            events.record_many(batch)
            batch = []
    events.record_many(batch)
    owner.keep_tasks(tasks, resumed)
    return tasks


def send(encoded: Encoded, tasks: list, plane: SubmitPlane, owner: SubmitOwner) -> None:
    """Queue the frames to the bridge; as each leaves, owner.tasks_sent(its tasks, when) (IO
    thread). The callables these frames carry count as sent (their pilots' fn_sent) once they
    are queued (not before: a submit that fails on the way sends them again next time);
    another thread's frame that only names one is queued after these (the plane's fn_lock),
    and the agent would keep its calls until the callable came anyway. Frames without
    function tasks need no lock."""
    bridge = plane.bridge
    fn_sent = encoded.fn_sent
    with plane.fn_lock if fn_sent else contextlib.nullcontext():
        for pilot_uid, sent in fn_sent.items():
            encoded.pilots[pilot_uid].fn_sent |= sent
        for pilot_uid, frame, part in encoded.frames:
            batch = [tasks[i] for i in part]
            bridge.send(pilot_uid, frame, on_sent=lambda when, b=batch: owner.tasks_sent(b, when))


class Word:
    """The client's word to its manager's simulated pilots (agent/simulation.py): a Submit
    holds a simulated pilot's clock until the client says it waits, so everything submitted
    before a wait -- however slowly, however loaded the machine -- arrives at one virtual
    instant. The word is said
      - by a waiter (TaskManager.wait_tasks), counted before it says so;
      - after a submit made while one waits (from a callback, another thread);
      - SILENCE_S after a submit call that neither a wait nor another submit followed (a
        client that polls states): the client's own silence, between its calls, not the
        time its frames take to arrive.
    Each word follows the frames of the submits before it (the bridge keeps their order)."""

    WAITING = _wire.encode(_wire.Waiting())
    SILENCE_S = 2.0

    def __init__(self, plane: SubmitPlane, pilots: dict[str, PilotPort]) -> None:
        self._plane = plane
        self._pilots = pilots  # the manager's known pilots (shared)
        self._lock = threading.Lock()
        self._waiters = 0
        self._timer: threading.Timer | None = None

    def _simulated(self) -> list[PilotPort]:
        return [p for p in list(self._pilots.values()) if p.simulated and p.state not in S.FINAL]

    def say(self) -> None:
        try:
            self._plane.check_open()
        except PilotfishError:  # (a closed session's timer)
            return
        bridge = self._plane.bridge
        for p in self._simulated():
            bridge.send(p.uid, self.WAITING)

    def _late(self) -> None:
        """The timer's word (its session may be closing under it: nothing to say then)."""
        with contextlib.suppress(Exception):
            self.say()

    def _disarm(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    @contextlib.contextmanager
    def waiting(self):
        """Around a wait: the client waits."""
        self._disarm()
        with self._lock:
            self._waiters += 1
        try:
            self.say()
            yield
        finally:
            with self._lock:
                self._waiters -= 1

    @contextlib.contextmanager
    def submitting(self):
        """Around a submit call (its frames are queued inside it)."""
        self._disarm()
        try:
            yield
        finally:
            if self._waiters:
                self.say()
            elif self._simulated():
                timer = threading.Timer(self.SILENCE_S, self._late)
                timer.daemon = True
                with self._lock:
                    old, self._timer = self._timer, timer
                if old is not None:
                    old.cancel()
                timer.start()


# -- a description as the wire and the journal have it ---------------------------------------
# The wire spec is derived from the description: every TaskSpec field but these is the
# TaskDescription field of the same name (same default; tests/client/test_descriptions.py
# checks it), copied only when set. These are computed from other fields.
SPEC_DERIVED = ("uid", "colocate", "input_staging", "output_staging", "function", "call", "fn_ref")
SPEC_COPIED = frozenset(_wire.TaskSpec.__struct_fields__) - frozenset(SPEC_DERIVED)

# what of a function task's description the agent needs (its worker's shape, mainly)
CALL_COPIED = frozenset(
    ("ranks", "cores_per_rank", "gpus_per_rank", "mem_per_rank", "priority", "timeout", "duration")
)


def spec(
    uid: str,
    d: TaskDescription,
    shared: str | None = None,
    envs: dict | None = None,
    extra: Callable[[str, TaskDescription], dict] | None = None,
    call: tuple | None = None,
) -> _wire.TaskSpec:
    """The wire's TaskSpec of a task: its description's fields set away from their defaults
    (SPEC_COPIED), a named environment's activation before its pre_exec (`envs`: its pilot's),
    the fields `extra(uid, d)` adds (TaskManager.spec_extra; its "environment" under the
    task's own), its colocation tag, the user's side of its staging made absolute (pilot://
    below `shared`, its pilot's shared directory); for a function task (`call`: pickle_calls'
    (function, call, digest)) only its worker's shape (CALL_COPIED) and the call."""
    v = d.values  # only fields set away from their defaults
    if call is not None:  # a function task: its pickled callable and arguments
        kw = {k: v[k] for k in CALL_COPIED.intersection(v)}
        return _wire.TaskSpec(
            uid=uid, executable="", function=call[0], call=call[1], fn_ref=call[2], **kw
        )
    kw = {k: v[k] for k in SPEC_COPIED.intersection(v)}
    if "named_env" in v:  # (the route checked that the pilot has it)
        env = envs[v["named_env"]]  # type: ignore[index]  # the route checked the pilot has it
        activate = (
            [f". {shlex.quote(os.path.join(env['path'], 'bin', 'activate'))}"]
            if env["path"]
            else []
        )
        kw["pre_exec"] = activate + list(env["pre_exec"]) + list(kw.get("pre_exec", ()))
    if extra is not None:
        more = extra(uid, d)
        env = more.pop("environment", None)
        if env:
            kw["environment"] = {**env, **kw.get("environment", {})}
        kw.update(more)
    tags = v.get("tags")
    if tags and "colocate" in tags:
        kw["colocate"] = tags["colocate"]
    if "input_staging" in v:
        kw["input_staging"] = _outer_absolute(v["input_staging"], "source", shared)
    if "output_staging" in v:
        kw["output_staging"] = _outer_absolute(v["output_staging"], "target", shared)
    return _wire.TaskSpec(uid=uid, **kw)


def first_carries_function(specs: list[_wire.TaskSpec], sent: set[bytes]) -> None:
    """Function tasks to one pilot: only the first that names a callable its agent was not
    sent yet carries it; the others name it by digest (a callable that closes over a large
    array used to travel, and sit in the agent's memory, once per call). `sent` (the digests
    the agent has or will have) gains those carried here."""
    for s in specs:  # (fresh specs of this submit: changed in place)
        ref = s.fn_ref
        if ref is None:
            continue
        if ref in sent:
            s.function = None
        else:
            sent.add(ref)


def journal_values(d: TaskDescription) -> dict:
    """A description's values as journaled: a function task's callable by its name (the
    journal is msgpack; resume matches by name; the arguments are not kept)."""
    v = d.values
    if "function" not in v:
        return v
    fn = v["function"]
    out = {k: x for k, x in v.items() if k not in ("function", "args", "kwargs")}
    name = getattr(fn, "__qualname__", None)
    if name is None:  # a callable object: its class's name (its repr has its address)
        name = type(fn).__qualname__
    out["function"] = f"{getattr(fn, '__module__', '?')}.{name}"
    return out


def _outer_absolute(directives: list | None, side: str, shared: str | None = None) -> list:
    """Staging paths on the user's side (input sources, output targets) that are relative are
    relative to where the user is: made absolute here, at submit."""
    if not directives:
        return []
    out = []
    for d in directives:
        p = d[side]
        if p.startswith("pilot://"):  # the pilot's shared directory (Pilot.stage_in)
            if shared is None:
                raise ValueError(f"{p}: pilot:// needs the pilot the task goes to")
            p = os.path.join(shared, p[len("pilot://") :])
            out.append({**d, side: os.path.normpath(p)})
            continue
        out.append(d if os.path.isabs(p) else {**d, side: os.path.abspath(p)})
    return out


_journal_encode = msgspec.msgpack.Encoder().encode


def _normalized(values: dict) -> bytes:
    """A description's values as the journal holds them (tuples become lists)."""
    return _journal_encode(msgspec.msgpack.decode(_journal_encode(values)))


def _culprit(part: list[int], descs: list) -> DescriptionError:
    """Which field of which task of a batch cannot be encoded, as a DescriptionError."""
    for i in part:
        for name, value in descs[i].values.items():
            try:
                _journal_encode(value)  # the wire and the journal encode alike (msgpack)
            except Exception as e:  # noqa: BLE001 -- a value msgpack refuses: a DescriptionError
                return DescriptionError(
                    "TaskDescription", name, value, f"cannot be sent to the agent: {e}", index=i
                )
    return DescriptionError("TaskDescription", "(batch)", None, "cannot be encoded", index=part[0])


def _check_outer_paths(d: TaskDescription, index: int, pilot: PilotPort) -> None:
    """Absolute paths on the user's side of staging (and output files) may not name the
    pilot's own files (its events, journal, keys, configuration)."""
    v = d.values
    if not (
        v.get("input_staging")
        or v.get("output_staging")
        or isinstance(v.get("stdout"), str)
        or isinstance(v.get("stderr"), str)
        or isinstance(v.get("sandbox"), str)
    ):
        return
    from .._paths import protected

    checks = [("input_staging", x["source"]) for x in v.get("input_staging", ())]
    checks += [("output_staging", x["target"]) for x in v.get("output_staging", ())]
    checks += [(f, v[f]) for f in ("stdout", "stderr", "sandbox") if isinstance(v.get(f), str)]
    for field, path in checks:
        if path.startswith("pilot://"):  # below the pilot's tasks/ by construction
            continue
        full = os.path.abspath(path)
        if protected(full, pilot.sandbox):
            raise DescriptionError(
                "TaskDescription",
                field,
                path,
                f"names the files of {pilot.uid} itself ({pilot.sandbox})",
                index=index,
            )


check_outer_paths = _check_outer_paths  # (_held.release: a held task, once it has a pilot)
