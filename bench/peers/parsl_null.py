#!/usr/bin/env python3
"""Peer baseline: N `/bin/true` tasks through Parsl's HighThroughputExecutor.

Usage: bench/peers/.venv/bin/python bench/peers/parsl_null.py N

HTEX with a LocalProvider (one block on this machine), max_workers_per_node =
number of cores, otherwise Parsl defaults (incl. encrypted=True ZMQ).  The app
is a @bash_app returning "/bin/true"; /bin/true prints nothing and no
stdout/stderr redirection files are requested.  Parsl's run directory (logs,
submit scripts) goes to a temporary directory that is removed at the end.

Timing: from the first app invocation (submit) until all N futures are done
(result() is then collected to check exit codes).  Startup (DFK load,
interchange + worker pool launch, and a 1-task warm-up that ensures the
workers have connected) is reported separately as startup_s.

Prints ONE final JSON line.
"""
import argparse
import concurrent.futures
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import time

# The worker pool is launched as `process_worker_pool.py ...` through a shell:
# make sure this interpreter's bin/ (the venv) is on PATH even when the venv
# is not activated.
os.environ["PATH"] = os.path.join(sys.prefix, "bin") + os.pathsep + os.environ.get("PATH", "")

import parsl  # noqa: E402
from parsl.app.app import bash_app  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.executors import HighThroughputExecutor  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402


@bash_app
def null_task():
    return "/bin/true"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=2000)
    ap.add_argument("--unencrypted", action="store_true",
                    help="HTEX encrypted=False (default is Parsl's own default, encrypted=True)")
    opts = ap.parse_args()
    n = opts.n
    cores = multiprocessing.cpu_count()
    load1 = round(os.getloadavg()[0], 2)

    with tempfile.TemporaryDirectory(prefix="parsl-peer-") as tmp:
        config = Config(
            executors=[
                HighThroughputExecutor(
                    label="htex_local",
                    max_workers_per_node=cores,
                    encrypted=not opts.unencrypted,
                    provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
                )
            ],
            run_dir=os.path.join(tmp, "runinfo"),
            usage_tracking=0,
        )
        # Parsl logs to <run_dir>/.../parsl.log; keep the console quiet.
        logging.getLogger("parsl").propagate = False

        t0 = time.perf_counter()
        dfk = parsl.load(config)
        try:
            null_task().result()  # warm-up: workers connected and ready
            startup_s = time.perf_counter() - t0

            t_submit = time.perf_counter()
            futures = [null_task() for _ in range(n)]
            submit_s = time.perf_counter() - t_submit
            concurrent.futures.wait(futures)
            seconds = time.perf_counter() - t_submit

            failed = 0
            for f in futures:
                try:
                    if f.result() != 0:
                        failed += 1
                except Exception:
                    failed += 1
        finally:
            dfk.cleanup()
            parsl.clear()

    if failed:
        print(f"warning: {failed} tasks failed", file=sys.stderr)
    print(json.dumps({
        "system": "parsl",
        "version": parsl.__version__,
        "tasks": n,
        "seconds": round(seconds, 4),
        "rate": round(n / seconds, 1),
        "startup_s": round(startup_s, 4),
        "submit_s": round(submit_s, 4),
        "loadavg_1m_at_start": load1,
        "cores": cores,
        "executor": "HighThroughputExecutor",
        "encrypted": not opts.unencrypted,
        "failed": failed,
    }))


if __name__ == "__main__":
    main()
