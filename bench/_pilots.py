"""What every bench does first: a pilot in a session, with a TaskManager on it, once ACTIVE."""

from __future__ import annotations

import time

import pilotfish as pf


def start_pilot(session, timeout: float = 60, **description):
    """(pilot, tmgr, seconds from submit to ACTIVE) for a pilot of `description`."""
    t0 = time.time()
    pilot = pf.PilotManager(session).submit_pilots(pf.PilotDescription(**description))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=timeout) == pf.ACTIVE, pilot.reason
    return pilot, tmgr, time.time() - t0
