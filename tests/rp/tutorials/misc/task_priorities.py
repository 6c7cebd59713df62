#!/usr/bin/env python3
# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), examples/misc/task_priorities.py at commit f9549f6f0e9c.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The script as it is.
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

import pilotfish.rp as rp
def state_cb(task, state):
    if state in rp.FINAL:
        print('%s [%d]: %s' % (task.uid, task.description.priority, task.state))


if __name__ == '__main__':

    session = rp.Session()
    try:

        pmgr  = rp.PilotManager(session=session)
        tmgr  = rp.TaskManager(session=session)
        pdesc = rp.PilotDescription({'resource': 'local.localhost',
                                     'runtime' : 1024 * 1024,
                                     'nodes'   : 1})
        pilot = pmgr.submit_pilots(pdesc)

        tmgr.add_pilots(pilot)
        tmgr.register_callback(state_cb)

        n   = 200
        tds = list()
        for i in range(n):
            td = rp.TaskDescription({'executable': 'true',
                                     'priority'  : i % 3})
            tds.append(td)

        tasks = tmgr.submit_tasks(tds)

        tmgr.wait_tasks()

    finally:
        session.close(download=True)


# ------------------------------------------------------------------------------

