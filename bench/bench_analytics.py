"""Benchmark: load + metrics + full report of a synthetic 1M-task session.

    PYTHONPATH=python python bench/bench_analytics.py [--tasks 1000000] [--dir DIR] [--keep]

The session (events of a simulated run on 256 nodes x 64 cores x 4 GPUs, written as
EventWriter frames, tasks.msgpack, pilot.json) is generated first -- not timed -- and reused
from DIR if it is already there. Prints one JSON object with the seconds of each stage; the
target is total <= 30 s for 1M tasks on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from pilotfish.analytics import analyze, load_session  # noqa: E402
from pilotfish.analytics.report import write_report  # noqa: E402
from pilotfish.analytics.synthetic import write_synthetic_session  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--dir", default=None, help="session directory (reused if present)")
    ap.add_argument("--keep", action="store_true", help="keep a generated session")
    args = ap.parse_args()

    root = args.dir or os.path.join(tempfile.gettempdir(), f"pilotfish-bench-{args.tasks}")
    marker = os.path.join(root, "tasks.msgpack")
    generated = not os.path.exists(marker)
    t = time.perf_counter()
    if generated:
        write_synthetic_session(root, n_tasks=args.tasks, nodes=args.nodes, cores_per_node=64,
                                gpus_per_node=4, mean_runtime=20.0, schedule_rate=20_000.0)
    t_generate = time.perf_counter() - t
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)

    out_dir = tempfile.mkdtemp(prefix="pilotfish-bench-report-")
    times = {}
    t0 = time.perf_counter()
    data = load_session(root)
    times["load_s"] = time.perf_counter() - t0
    t = time.perf_counter()
    analysis = analyze(data)
    metrics = analysis.to_json()
    times["metrics_s"] = time.perf_counter() - t
    t = time.perf_counter()
    paths = write_report(analysis, out_dir, as_json=True)
    times["report_s"] = time.perf_counter() - t
    times["total_s"] = time.perf_counter() - t0

    result = {
        "tasks": len(data.tasks),
        "events": len(data.events),
        "session_bytes": size,
        "generated": generated,
        "generate_s": round(t_generate, 2),
        **{k: round(v, 2) for k, v in times.items()},
        "target_s": 30,
        "ok": times["total_s"] <= 30,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "ttx_s": round(metrics["ttx_s"], 2),
        "core_ru_exec_cmd": round(metrics["utilization"]["cores"]["phases"]["exec_cmd"]["share"], 4),
        "report_bytes": os.path.getsize(paths["report"]),
    }
    shutil.rmtree(out_dir, ignore_errors=True)
    if generated and not args.keep and not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
