#!/usr/bin/env python3
"""Waiting for intermediate states, canceling tasks and pilots."""

import os
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 2,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        tasks = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/sleep",
                                                       "arguments": ["600"]})
                                   for _ in range(4)])
        states = tmgr.wait_tasks([t.uid for t in tasks[:2]], state=rp.AGENT_EXECUTING,
                                 timeout=60)
        assert states == [rp.AGENT_EXECUTING] * 2, states
        assert tasks[2].state not in rp.FINAL
        tmgr.cancel_tasks([t.uid for t in tasks])
        assert tmgr.wait_tasks(timeout=60) == [rp.CANCELED] * 4
        assert tasks[0].wait(timeout=10) == rp.CANCELED
        pmgr.cancel_pilots(pilot.uid)
        assert pmgr.wait_pilots(pilot.uid, timeout=60) == rp.CANCELED
        assert pilot.state == rp.CANCELED
        try:
            tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true"}))
        except rp.PilotfishError as e:
            print("no pilot left:", e)
        else:
            raise AssertionError("a task was accepted without a live pilot")
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
    assert pilot.state == rp.CANCELED  # and stays so after close
