"""The imbalance floor of a machine: identical work on every rank, timed per phase.

    mpiexec -n 2 python bench/amt/noise_floor.py [--phases 60] [--size 90000] [--clock cpu]

Each phase every rank runs the same numpy kernel (the PIC push's kind of arithmetic) on the
same data after a barrier; max/mean of the ranks' times is the imbalance a perfect load
balancer would still see there. Prints one JSON line (rank 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    from pilotfish import amt
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from pilotfish import amt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", type=int, default=60)
    ap.add_argument("--size", type=int, default=90_000)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    a = ap.parse_args()
    if a.phases < 1 or a.size < 1:
        ap.error("--phases and --size must be >= 1")
    comm = amt.mpi().COMM_WORLD
    clock = time.thread_time if a.clock == "cpu" else time.perf_counter
    x = np.random.default_rng(1).random(a.size)
    times = []
    for _ in range(2):            # warm-up phases, not counted
        x = np.mod(x + np.sin(x) * np.cos(2.0 * x) * 0.01, 1.0)
    for _ in range(a.phases):
        comm.Barrier()
        t0 = clock()
        for _ in range(8):
            x = np.mod(x + np.sin(x) * np.cos(2.0 * x) * 0.01, 1.0)
        times.append(clock() - t0)
    rows = comm.gather(times, root=0)
    if comm.Get_rank() == 0:
        t = np.array(rows)                                  # ranks x phases
        imb = t.max(axis=0) / t.mean(axis=0)
        print(json.dumps({
            "ranks": len(rows), "phases": a.phases, "clock": a.clock,
            "phase_ms_median": [round(float(np.median(r)) * 1e3, 2) for r in t],
            "phase_ms_p10_p90": [[round(float(np.percentile(r, q)) * 1e3, 2) for q in (10, 90)]
                                 for r in t],
            "imbalance_mean": round(float(imb.mean()), 3),
            "imbalance_median": round(statistics.median(imb.tolist()), 3)}))


if __name__ == "__main__":
    main()
