"""Tasks an allocation policy holds (client/autoalloc.py): submitted to a TaskManager it
serves, kept in the client until one of its pilots has room, then sent there -- the submit
pipeline of submit.py, in two halves.

    hold(descriptions, ...)      check them (and the policy's own check: a task no allocation
                                 within its limits can hold is refused, naming the field),
                                 give uids, register them with no pilot (SCHEDULING, counted,
                                 their events) and hand them to the policy. Nothing is
                                 journaled or sent yet.
    release(tasks, pilot, ...)   route them to that pilot (what submit.Routing.route checks:
                                 the pilot's partitions, a simulated pilot's durations), check
                                 their user-side paths, encode, journal, move their cores
                                 from no pilot's load to the pilot's, record ROUTED, send.
                                 A task that fails a check there fails alone, with the reason.

All or nothing, as submit.py: hold raises before anything is registered.
"""

from __future__ import annotations

import time

from .. import _events as E
from .. import states as S
from .._errors import DescriptionError
from ..descriptions import TaskDescription, check_descriptions
from . import submit
from ._ports import EventSink, PilotPort, SubmitOwner, SubmitPlane, TaskHolder

NO_PILOT = ""  # a held task's pilot (Task.pilot), and its cores' key in the routing's load


def hold(
    descriptions: list,
    owner: SubmitOwner,
    plane: SubmitPlane,
    events: EventSink,
    routing: submit.Routing,
    holder: TaskHolder,
) -> list:
    """Register these tasks with no pilot and hand them to the holder; returns them."""
    plane.check_open()
    descs = check_descriptions(descriptions, TaskDescription)
    holder.check(descs)
    n = len(descs)
    plan = submit.Plan(descs, plane.next_task_uids(n), [NO_PILOT] * n, {}, [], {}, {})
    tasks = submit.register(plan, owner, plane, events, routing)
    holder.held(owner, tasks)
    return tasks


def release(
    tasks: list,
    pilot: PilotPort,
    owner: SubmitOwner,
    plane: SubmitPlane,
    events: EventSink,
    routing: submit.Routing,
    spec_extra: submit.SpecExtra | None,
) -> list:
    """Send held tasks (still in SCHEDULING) to `pilot`; returns those sent (a task that
    fails a check is FAILED with its reason instead)."""
    ok, bad = [], []
    for i, t in enumerate(tasks):
        if t.state != S.SCHEDULING:  # (canceled while held: it goes nowhere)
            continue
        try:
            routing.route(t.description, i, [pilot])
            submit.check_outer_paths(t.description, i, pilot)
        except DescriptionError as e:
            bad.append((t, f"cannot run on {pilot.uid}: {e}"))
            continue
        ok.append(t)
    sent: list = []
    while ok:
        try:
            encoded = _encode(ok, pilot, plane, spec_extra)
        except DescriptionError as e:  # (a function that does not pickle): that task fails
            culprit = ok[e.index or 0]
            bad.append((culprit, f"cannot be sent to {pilot.uid}: {e}"))
            ok = [t for t in ok if t is not culprit]
            continue
        submit.write_journal(encoded, plane)
        load = routing.load
        now = time.time()
        for t in ok:
            cores = submit.cores(t.description)
            load[NO_PILOT] -= cores
            load[pilot.uid] += cores
            t.pilot = pilot.uid
        if events.enabled:
            events.record_many([(now, t.uid, E.ROUTED, pilot.uid) for t in ok])
        submit.send(encoded, ok, plane, owner)
        sent = ok
        break
    for t, why in bad:
        owner.finish_locally([t], S.FAILED, why, journal=False)
    return sent


def _encode(tasks: list, pilot: PilotPort, plane: SubmitPlane, spec_extra) -> submit.Encoded:
    idx = list(range(len(tasks)))
    plan = submit.Plan(
        [t.description for t in tasks],
        [t.uid for t in tasks],
        [pilot.uid] * len(tasks),
        {},
        idx,
        {pilot.uid: idx},
        {pilot.uid: pilot},
    )
    return submit.encode(plan, spec_extra, plane.journal.enabled)
