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

    .venv/bin/python bench/bench_insitu.py --auth [--iterations 40] [--json OUT]

auth  what authentication costs the data plane (issue 32): three areas of 2 servers on one
      pilot -- authenticated (the default: PLAIN handshakes checked by ZAP, nothing
      encrypted), encrypted (encrypt=True: CURVE) and open (secure=False) -- the same
      iteration (8 blocks staged, statistics, deactivate) run on each in turn, the order
      rotating every round, at several block sizes; median per iteration and the ratios to
      the open area.
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


MODES = {"auth": dict(secure=True), "curve": dict(secure=True, encrypt=True),
         "open": dict(secure=False)}


def auth_cost(tmgr, iterations: int, sizes: list[int]) -> list[dict]:
    areas = {}
    for mode, kw in MODES.items():
        area = insitu.StagingArea(tmgr, servers=2, mpi=False, name=f"auth-{mode}", **kw)
        area.create_pipeline("statistics", {"bins": 16, "range": [0, 1]})
        areas[mode] = (area, area.pipeline("statistics"))
    rows = []
    rng = np.random.default_rng(0)
    it = 0
    order = list(MODES)
    for size in sizes:  # bytes per block
        blocks = [rng.random(size // 8) for _ in range(8)]
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for k in range(iterations + 2):  # the order rotates: none goes first more often
            for mode in order[k % 3:] + order[:k % 3]:
                _, h = areas[mode]
                t0 = time.perf_counter()
                h.activate(it)
                for b, a in enumerate(blocks):
                    h.stage(b, a)
                stats = h.execute(it)
                h.deactivate(it)
                dt = time.perf_counter() - t0
                assert stats["count"] == 8 * (size // 8), stats
                if k >= 2:  # (the first two: connections, warm-up)
                    times[mode].append(dt)
                it += 1
        med = {m: statistics.median(t) for m, t in times.items()}
        rows.append({"block_bytes": size, **{f"{m}_ms": v * 1e3 for m, v in med.items()},
                     "auth/open": med["auth"] / med["open"],
                     "curve/open": med["curve"] / med["open"]})
        print(f"  8 x {size / 1024:8.0f} KiB: authenticated {med['auth'] * 1e3:8.2f} ms  "
              f"encrypted {med['curve'] * 1e3:8.2f} ms  open {med['open'] * 1e3:8.2f} ms  "
              f"auth/open {med['auth'] / med['open']:.3f}  "
              f"curve/open {med['curve'] / med['open']:.3f}", flush=True)
    for area, h in areas.values():
        h.close()
        area.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--auth", action="store_true", help="only the authentication cost")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--sizes", default="8192,131072,1048576,4194304",
                    help="bytes per block, comma-separated (--auth)")
    ap.add_argument("--json")
    a = ap.parse_args()
    result = {}
    if a.auth:
        with pf.Session() as s:
            _, tmgr, _ = start_pilot(s, nodes=1, cores_per_node=8, runtime="1h")
            print(f"auth: per iteration, median of {a.iterations} (alternating)")
            result["auth"] = auth_cost(tmgr, a.iterations,
                                       [int(x) for x in a.sizes.split(",")])
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)
        return 0
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
