#!/usr/bin/env python3
"""Callbacks: every task state in order, pilot states, cb_data -- and a callback that calls
sys.exit() on a failed task, as RP's staging examples do, stops nothing."""

import os
import sys
import time

import pilotfish.rp as rp

seen = {}
pilot_states = []


def task_state_cb(task, state, cb_data):
    seen.setdefault(task.uid, []).append(state)
    cb_data["calls"] += 1
    if state == rp.FAILED:
        print("task %s failed: exiting (in the callback)" % task.uid)
        sys.exit(1)


def pilot_state_cb(pilot, state):
    pilot_states.append(state)


if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        pmgr.register_callback(pilot_state_cb)
        tmgr = rp.TaskManager(session)
        data = {"calls": 0}
        tmgr.register_callback(task_state_cb, cb_data=data)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 2,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        tds = [rp.TaskDescription({"executable": "/bin/sh",
                                   "arguments": ["-c", "exit %d" % (i == 2)]})
               for i in range(6)]
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks(timeout=60)
        later = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true"}))
        assert later.wait(timeout=60) == rp.DONE  # the client still gets updates
        for t in tasks + [later]:
            states = seen[t.uid]
            order = [rp.TASK_STATES.index(s) for s in states]
            assert order == sorted(order) and states[-1] == t.state, states
            assert rp.AGENT_EXECUTING in states or t.state == rp.FAILED, states
        assert [t.state for t in tasks].count(rp.FAILED) == 1
        assert data["calls"] == sum(len(v) for v in seen.values())
    finally:
        t0 = time.time()
        session.close()
        assert time.time() - t0 < 15, "close took %.1f s" % (time.time() - t0)
    order = [rp.PILOT_STATES.index(s) for s in pilot_states]
    assert order == sorted(order), pilot_states
    assert rp.PMGR_ACTIVE in pilot_states and pilot_states[-1] in rp.FINAL, pilot_states
    print("OK", os.path.basename(__file__))
