#!/usr/bin/env python3
"""MPI tasks: ranks x threads, every rank reports its rank from MPI's own variables and its
OpenMP thread count (RP's 09)."""

import os
import sys

import pilotfish.rp as rp

SCRIPT = """#!/bin/sh
r=${PMI_RANK:-${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-${ALPS_APP_PE:-x}}}}
for t in $(seq 0 $((OMP_NUM_THREADS - 1))); do echo "$r:$t/$OMP_NUM_THREADS"; done
"""

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": resource, "cores": 8,
                                                        "runtime": 10}))
        tmgr.add_pilots(pilot)
        with open("09_mpi_tasks.sh", "w") as f:
            f.write(SCRIPT)
        tds = []
        for i in range(2):
            td = rp.TaskDescription()
            td.executable = "/bin/sh"
            td.arguments = ["09_mpi_tasks.sh"]
            td.input_staging = ["09_mpi_tasks.sh"]
            td.ranks = 3
            td.cores_per_rank = 2
            td.threading_type = rp.OpenMP
            tds.append(td)
        tasks = tmgr.submit_tasks(tds)
        tmgr.wait_tasks()
        for t in tasks:
            assert t.state == rp.DONE, (t.state, t.exception_detail)
            got = sorted(t.stdout.split())
            assert got == sorted("%d:%d/2" % (r, th) for r in range(3) for th in range(2)), got
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
