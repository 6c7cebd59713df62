"""The submit call alone: thread CPU of tmgr.submit_tasks(5000 null tasks) on a local 4x64
pilot, 8 times in one session (each waited out before the next); min and median us/task.
Compare two trees by running it with PYTHONPATH=<tree>/python for each, alternately:

    PYTHONPATH=$TREE/python .venv/bin/python bench/bench_submit_call.py
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e as b

import pilotfish as pf

with tempfile.TemporaryDirectory() as d:
    with pf.Session(path=os.path.join(d, "s")) as s:
        pilot, tmgr, _ = b._pilot(s, nodes=4, cores_per_node=64)
        per = []
        for _ in range(8):
            descs = [
                pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                for _ in range(5000)
            ]
            t0 = time.thread_time()
            tmgr.submit_tasks(descs)
            per.append(1e6 * (time.thread_time() - t0) / 5000)
            tmgr.wait_tasks()
print(pf.__file__.split("/python/")[0], "min %.2f median %.2f" % (min(per), statistics.median(per)))
