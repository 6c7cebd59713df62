"""RP's callbacks, as its managers take them: the metrics, RADICAL_PILOT_BULK_CB's form,
a registered callback (its relay goes off once unregistered), unregister_callback's
matching -- and `listify`, RP's one-or-many argument. The managers (_pilot_manager.py,
_api.py's TaskManager) register with pilotfish's managers through these.
"""

from __future__ import annotations

import os
from typing import Any, Callable

TASK_STATE = "TASK_STATE"  # callback metrics
PILOT_STATE = "PILOT_STATE"


def listify(x):
    """RP's one-or-many argument: (a list, whether x was one)."""
    return (x, True) if isinstance(x, (list, tuple)) else ([x], False)


def _bulk() -> bool:
    """RADICAL_PILOT_BULK_CB (RP's switch, read when a callback is registered): callbacks
    get a list of objects, cb([objs]) or cb([objs], cb_data), without the state."""
    return os.environ.get("RADICAL_PILOT_BULK_CB", "").lower() in ("true", "yes", "1")


def wrap_callback(cb: Callable, cb_data: Any) -> Callable:
    """The user's cb as pilotfish calls it, f(obj, state): RP's bulk and cb_data forms."""
    if _bulk():  # (pilotfish reports each change as it comes: a list of one)
        if not cb_data:
            return lambda obj, state: cb([obj])
        return lambda obj, state: cb([obj], cb_data)
    if not cb_data:  # RP passes cb_data only when it is truthy
        return cb
    return lambda obj, state: cb(obj, state, cb_data)


class Registered:
    """A callback registered through the RP API: cb, its metric and uid filter, and the
    relay given to pilotfish (off once unregistered: a change already being reported may
    still reach it, none after that)."""

    __slots__ = ("cb", "metric", "uid", "relay", "on")

    def __init__(self, cb, metric, uid):
        self.cb, self.metric, self.uid, self.relay, self.on = cb, metric, uid, None, True


def unregister(registered: list, pf_unregister: Callable, cb, metrics, uid) -> None:
    """RP's unregister_callback(cb=None, metrics=None, uid=None): every callback matching
    all that are given (none given: all of them)."""
    metrics = None if metrics is None else set(listify(metrics)[0])
    for r in list(registered):
        if (
            (cb is None or r.cb == cb)
            and (metrics is None or r.metric in metrics)
            and (uid is None or r.uid == uid)
        ):
            r.on = False
            registered.remove(r)
            try:
                pf_unregister(r.relay)
            except ValueError:
                pass  # (not registered there: nothing to take back)
