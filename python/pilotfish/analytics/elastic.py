"""Elasticity over time: each pilot's nodes (grow, shrink) and each service group's members
(its view, epoch by epoch), from the agents' events (names in pilotfish._events)."""

from __future__ import annotations

import numpy as np

from pilotfish import _events as E


DETAIL_EVENTS = (E.PILOT_GROW, E.PILOT_SHRINK, E.GROUP_EPOCH, E.RESOURCES_OK)


def elastic_series(data) -> tuple[dict[str, list], dict[str, list]]:
    """({pilot uid: [(t, nodes)]}, {group name: [(t, members)]}), t relative to the session
    start, in time order. Empty when nothing grew, shrank or served."""
    ev = data.events
    codes = {name: ev.name_code(name) for name in DETAIL_EVENTS}
    wanted = [c for c in codes.values() if c >= 0]
    if not len(ev) or not any(codes[n] >= 0 for n in DETAIL_EVENTS[:3]):
        return {}, {}
    rows = np.flatnonzero(np.isin(ev.name, wanted))
    rows = rows[np.argsort(ev.t[rows], kind="stable")]
    details = ev.details(rows)
    nodes: dict[str, list] = {}
    members: dict[str, list] = {}
    for r, d in zip(rows, details):
        if d is None:
            continue
        name = ev.names[ev.name[r]]
        uid = ev.uids[ev.uid[r]]
        t = float(ev.t[r] - data.t0)
        try:
            if name == E.RESOURCES_OK:
                nodes.setdefault(uid, []).append((t, int(d.split()[0])))
            elif name in (E.PILOT_GROW, E.PILOT_SHRINK):
                nodes.setdefault(uid, []).append((t, int(d.split()[2])))
            else:
                members.setdefault(uid, []).append((t, int(d.split()[1])))
        except (ValueError, IndexError):
            continue
    if not members and not any(len(v) > 1 for v in nodes.values()):
        nodes = {}  # flat lines only beside groups
    return nodes, members
