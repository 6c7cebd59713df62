"""TaskManager.unregister_callback and PilotManager.unregister_callback on a real local pilot:
an unregistered callback sees no later change; one never registered is named."""

from __future__ import annotations

import pytest

import pilotfish as pf


def test_an_unregistered_callback_sees_nothing_more(session):
    pmgr = pf.PilotManager(session)
    pilot_seen, kept, dropped = [], [], []
    pmgr.register_callback(lambda p, s: pilot_seen.append(s))

    def drop(t, s):
        dropped.append((t.uid, s))

    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
    tmgr.register_callback(lambda t, s: kept.append((t.uid, s)))
    tmgr.register_callback(drop)
    first = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    assert first.wait(timeout=30) == pf.DONE
    tmgr.unregister_callback(drop)
    second = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    assert second.wait(timeout=30) == pf.DONE
    assert (first.uid, pf.DONE) in dropped and (first.uid, pf.DONE) in kept
    assert (second.uid, pf.DONE) in kept
    assert not [u for u, _ in dropped if u == second.uid]
    with pytest.raises(ValueError, match="'test_an_unregistered_callback_sees_nothing_more."
                                         "<locals>.drop' is not a callback of this TaskManager"):
        tmgr.unregister_callback(drop)

    def on_pilot(p, s):
        pilot_seen.append(("dropped", s))

    pmgr.register_callback(on_pilot)
    pmgr.unregister_callback(on_pilot)
    with pytest.raises(ValueError, match="not a callback of this PilotManager"):
        pmgr.unregister_callback(on_pilot)
    pmgr.cancel_pilots(pilot.uid)
    assert pilot.wait(timeout=30) == pf.CANCELED
    assert pf.CANCELED in pilot_seen and ("dropped", pf.CANCELED) not in pilot_seen
