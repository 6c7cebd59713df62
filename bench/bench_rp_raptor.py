"""RAPTOR through pilotfish.rp vs pilotfish's own function tasks (issue 29), one run.

    .venv/bin/python bench/bench_rp_raptor.py [--n 20000] [--rounds 3] [--json OUT]

One session, one local pilot, one RAPTOR master (rp.raptor's default) on it, running during
the whole run so both sides see the same free cores. Each round times, one after the other
(in turn first: ABBA):
  pilotfish   pf.TaskManager.submit_tasks([pf.TaskDescription(function=noop)] * N), wait
  pilotfish.rp raptor.submit_tasks([rp.TaskDescription(mode=TASK_FUNCTION,
                                   function=noop_task())] * N), tmgr.wait_tasks
from building the descriptions to the last result back (calls/s). The workers are warmed up
first. Reported: the median rate of each side over the rounds, and the RP layer's cost,
1 - rp rate / pilotfish rate (target: <= 10 %).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402
import pilotfish.rp as rp  # noqa: E402


def noop():
    return None


noop_task = rp.pythontask(noop)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=3, help="the pilot's (1 for the master)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ.setdefault("PILOTFISH_SESSIONS", tempfile.mkdtemp())
    session = rp.Session()
    try:
        pilot = rp.PilotManager(session).submit_pilots(rp.PilotDescription(
            {"resource": "local.localhost", "cores": a.cores, "runtime": 60}))
        tmgr = rp.TaskManager(session)
        tmgr.add_pilots(pilot)
        raptor = pilot.submit_raptors(rp.TaskDescription({"mode": rp.RAPTOR_MASTER}))[0]
        raptor.submit_workers(rp.TaskDescription({"mode": rp.RAPTOR_WORKER}))
        ptm = pf.TaskManager(session._pf)
        ptm.add_pilots(pilot._pf)

        def run_pf() -> float:
            gc.collect()  # each side starts with the collector's work done (pyperf does so)
            t0 = time.perf_counter()
            ts = ptm.submit_tasks([pf.TaskDescription(function=noop) for _ in range(a.n)])
            ptm.wait_tasks([t.uid for t in ts])
            dt = time.perf_counter() - t0
            bad = [t for t in ts if t.state != pf.DONE]
            assert not bad, [(t.uid, t.state, t.reason) for t in bad[:3]]
            return a.n / dt

        def run_rp() -> float:
            gc.collect()
            t0 = time.perf_counter()
            ts = raptor.submit_tasks([rp.TaskDescription({"mode": rp.TASK_FUNCTION,
                                                          "function": noop_task()})
                                      for _ in range(a.n)])
            tmgr.wait_tasks([t.uid for t in ts])
            dt = time.perf_counter() - t0
            bad = [t for t in ts if t.state != rp.DONE]
            assert not bad, [(t.uid, t.state, t.exception, getattr(t, "exception_detail", None)) for t in bad[:3]]
            return a.n / dt

        n, a.n = a.n, 2000  # warm-up: both sides' workers up
        run_pf(), run_rp()
        a.n = n
        rates: dict[str, list[float]] = {"pilotfish": [], "pilotfish.rp": []}
        for k in range(a.rounds):  # ABBA: neither side always runs second
            if k % 2 == 0:
                rates["pilotfish"].append(run_pf())
                rates["pilotfish.rp"].append(run_rp())
            else:
                rates["pilotfish.rp"].append(run_rp())
                rates["pilotfish"].append(run_pf())
        raptor.rpc("stop")
        med = {k: statistics.median(v) for k, v in rates.items()}
        cost = 1 - med["pilotfish.rp"] / med["pilotfish"]
        # each round's pair ran back to back: the median of the pairs' ratios is steadier
        paired = statistics.median(1 - r / p for r, p in zip(rates["pilotfish.rp"],
                                                               rates["pilotfish"]))
        print(f"| side | calls/s (median of {a.rounds}) | rounds |")
        print("|---|---|---|")
        for k, v in rates.items():
            print(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
        print(f"\nRP layer's cost: {cost:.1%} (medians), {paired:.1%} (median of the rounds' "
              f"paired ratios) ({a.n} no-op calls per round)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"n": a.n, "rates": rates, "median": med, "cost": cost,
                           "paired_cost": paired}, f)
    finally:
        session.close()


if __name__ == "__main__":
    main()
