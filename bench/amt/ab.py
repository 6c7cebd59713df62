"""Interleaved before/after runs of one JSON-printing amt benchmark on a shared machine.

    python bench/amt/ab.py --before /tmp/amt_before/python --after python [--rounds 4] \\
        [--ranks 2] -- bench/amt/bcast_lb.py --phases 8

Runs `mpiexec -n RANKS python SCRIPT ARGS` with PYTHONPATH set to each tree's python/ in ABBA
order (round i: before then after when i is even, after then before when odd), so that drifts
in the machine's load hit both alike. The script must print one JSON object as its last line
and import pilotfish from PYTHONPATH (bench/amt/bcast_lb.py, msgrate_amt.py do). Prints, per
numeric top-level field, the median (min-max) of each side and the ratio of the medians, the
load average before and after each run, and writes every run's JSON to --json if given.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))


def run_once(a, tree: str, script: list[str]) -> dict:
    from bench_amt import find_mpiexec

    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(tree).resolve())
    argv = [a.mpiexec or find_mpiexec(), "-n", str(a.ranks), sys.executable, *script]
    load0 = os.getloadavg()[0]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=a.timeout)
    if p.returncode != 0:
        raise SystemExit(f"failed (rc={p.returncode}): {shlex.join(argv)}\n{p.stdout}\n"
                         f"{p.stderr}")
    row = json.loads(p.stdout.strip().splitlines()[-1])
    row["_load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the python/ dir of the 'before' tree")
    ap.add_argument("--after", required=True, help="the python/ dir of the 'after' tree")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", default=None, help="write every run's JSON here")
    ap.add_argument("script", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    script = a.script[1:] if a.script[:1] == ["--"] else a.script
    if not script or a.rounds < 1:
        ap.error("give --rounds >= 1 and a script after --")
    runs = {"before": [], "after": []}
    for i in range(a.rounds):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            row = run_once(a, getattr(a, side), script)
            runs[side].append(row)
            print(f"  round {i + 1} {side}: load {row['_load'][0]} -> {row['_load'][1]}",
                  file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1))
    print(f"<!-- python bench/amt/ab.py --rounds {a.rounds} -- {shlex.join(script)}; "
          f"{os.cpu_count()} cores -->")
    print("| field | before: median (min-max) | after: median (min-max) | after/before |")
    print("|---|---|---|---|")
    keys = [k for k, v in runs["before"][0].items()
            if isinstance(v, int | float) and not isinstance(v, bool)]
    for k in keys:
        cells = []
        meds = []
        for side in ("before", "after"):
            xs = [r[k] for r in runs[side]]
            meds.append(statistics.median(xs))
            cells.append(f"{meds[-1]:.4g} ({min(xs):.4g}-{max(xs):.4g})")
        ratio = meds[1] / meds[0] if meds[0] else float("nan")
        print(f"| {k} | {cells[0]} | {cells[1]} | {ratio:.3f} |")
    loads = [x for side in runs.values() for r in side for x in r["_load"]]
    print(f"\nload average (1 min) over the runs: {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
