"""Function tasks whose callable closes over a large array: the callable sent once per pilot
vs with every call (as before), side by side in one run.

    python bench/bench_closure.py [--calls 100] [--mib 8]

Each variant on its own fresh local pilot (1 node, 2 cores): submit `calls` calls of a function
that closes over an `mib` MiB numpy array, wait for all results; reports the wall time from
submit to the last result and the agent's peak resident memory (VmHWM). "every call" is the
old wire behaviour, restored by making every task carry the pickled callable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish.client import submit as submit_mod  # noqa: E402


def _closure(big):
    def pick(i):
        return float(big[i % len(big)])
    return pick


def run(calls: int, mib: int, every_call: bool, base: str) -> dict:
    once = submit_mod.first_carries_function
    if every_call:
        submit_mod.first_carries_function = lambda specs, sent: None
    try:
        pick = _closure(np.random.default_rng(0).random(mib * 131072))
        with pf.Session(path=os.path.join(base, "every" if every_call else "once")) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                nodes=1, cores_per_node=2, runtime="30m"))
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
            agent = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
            t0 = time.perf_counter()
            tasks = tm.submit_tasks([pf.TaskDescription(function=pick, args=(i,))
                                     for i in range(calls)])
            tm.wait_tasks(timeout=3600)
            dt = time.perf_counter() - t0
            with open(f"/proc/{agent}/status") as f:
                hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
            done = sum(t.state == pf.DONE for t in tasks)
    finally:
        submit_mod.first_carries_function = once
    return {"variant": "every call" if every_call else "once per pilot", "calls": calls,
            "mib": mib, "seconds": round(dt, 2), "agent_peak_mib": hwm // 1024, "done": done}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--mib", type=int, default=8)
    a = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as base:
        rows = [run(a.calls, a.mib, every, base) for every in (True, False)]
    for r in rows:
        print(json.dumps(r))
    print(json.dumps({"time_ratio": round(rows[0]["seconds"] / rows[1]["seconds"], 1),
                      "memory_ratio": round(rows[0]["agent_peak_mib"] /
                                            rows[1]["agent_peak_mib"], 1)}))


if __name__ == "__main__":
    main()
