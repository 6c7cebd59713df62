"""In situ staging (issue 13): Colza's Figures 4 and 9 on this machine, one run.

    .venv/bin/python bench/bench_insitu.py [--max-n 8] [--reps 3] [--json OUT]

fig4  for n = 1..max-n: a staging area of n servers with the statistics pipeline grown to
      n+1 -- from area.resize(n+1) until an iteration (activate, stage, execute, deactivate)
      has run on the n+1 servers, the new one's pipeline created on the way -- beside a static
      restart: stop the area, start one of n+1 servers, create the pipeline, run the same
      iteration. Median of --reps.
fig9  the Mandelbulb mini-app (examples/insitu_mandelbulb.py, 2 MPI ranks, isosurface
      pipeline) with its area grown 1 -> 4 while it runs, cold and with warm spares:
      per-iteration activate/stage/execute/deactivate and servers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402
from pilotfish import insitu  # noqa: E402
from _pilots import start_pilot  # noqa: E402


def one_iteration(area, it: int) -> None:
    h = area.pipeline("statistics")
    h.activate(it)
    for b in range(8):
        h.stage(b, np.full(1000, float(b)))
    h.execute(it)
    h.deactivate(it)
    h.close()


def fig4(tmgr, max_n: int, reps: int) -> list[dict]:
    rows = []
    for n in range(1, max_n + 1):
        elastic, static = [], []
        for _ in range(reps):
            area = insitu.StagingArea(tmgr, servers=n)
            area.create_pipeline("statistics")
            one_iteration(area, 0)
            t0 = time.perf_counter()
            area.resize(n + 1)
            one_iteration(area, 1)
            elastic.append(time.perf_counter() - t0)
            area.close()
            area.group.wait(lambda v: not v.members, 60)
            area = insitu.StagingArea(tmgr, servers=n)
            area.create_pipeline("statistics")
            one_iteration(area, 0)
            t0 = time.perf_counter()
            area.close()
            area.group.wait(lambda v: not v.members, 60)
            area = insitu.StagingArea(tmgr, servers=n + 1)
            area.create_pipeline("statistics")
            one_iteration(area, 1)
            static.append(time.perf_counter() - t0)
            area.close()
            area.group.wait(lambda v: not v.members, 60)
        row = {"n": n, "elastic_s": statistics.median(elastic),
               "static_s": statistics.median(static)}
        row["ratio"] = row["static_s"] / row["elastic_s"]
        print(f"  n={n}: elastic {row['elastic_s'] * 1000:7.1f} ms   static "
              f"{row['static_s'] * 1000:7.1f} ms   static/elastic {row['ratio']:.1f}x", flush=True)
        rows.append(row)
    return rows


def fig9(warm: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "examples",
                                                     "insitu_mandelbulb.py"),
                        "--out", os.path.join(d, "img"), "--json", out, "--iterations", "12",
                        "--grow-every", "0.8"] + (["--warm"] if warm else []), check=True,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    result = {}
    with pf.Session() as s:
        _, tmgr, _ = start_pilot(s, nodes=1, cores_per_node=32, runtime="1h")
        print(f"fig4: staging area n -> n+1 servers, until an iteration ran on n+1 "
              f"(median of {a.reps})")
        result["fig4"] = fig4(tmgr, a.max_n, a.reps)
    for warm in (False, True):
        rows = fig9(warm)
        result["fig9_warm" if warm else "fig9_cold"] = rows
        print(f"fig9 ({'warm spares' if warm else 'cold joins'}): iteration servers "
              f"execute(ms)")
        for r in rows:
            print(f"  {r['iteration']:3d} {r['servers']:3d} {r['execute'] * 1000:8.1f}  "
                  f"(activate {r['activate'] * 1000:.1f}, stage {r['stage'] * 1000:.1f}, "
                  f"deactivate {r['deactivate'] * 1000:.1f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
