#!/usr/bin/env python3
"""Peer baseline: N `/bin/true` tasks through HyperQueue's Python API.

Usage: bench/peers/.venv/bin/python bench/peers/hq_null.py N [--wait api|poll]

A LocalCluster (server + one worker with all cores of this machine) runs
in-process.  All N tasks go into ONE job (the natural HQ way: one submit of a
task graph with N independent tasks).  stdout/stderr are discarded
(stdout=None/stderr=None -> StdioDef::Null in HQ: no files are written).

Timing: from just before `client.submit(job)` (job construction excluded)
until the server reports the job terminated.  Cluster startup (server +
worker + client connect + a 1-task warm-up job, which makes sure the worker
has registered) is measured separately as startup_s.

--wait poll (default): HyperQueue's `wait_for_jobs` polls the server once a
  second, which would add up to 1 s of slack to a ~5 s run.  We call the same
  FFI entry point but abort each call from its progress callback right after
  its first JobInfo RPC unless the job is done, then retry after POLL_S; so
  completion is seen with ~POLL_S resolution through the same API.
--wait api: plain `client.wait_for_jobs([job])` (1 s poll granularity).

Prints ONE final JSON line.
"""
import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time

import hyperqueue
from hyperqueue import Job, LocalCluster
from hyperqueue.cluster import WorkerConfig

POLL_S = 0.02


class _NotDone(Exception):
    pass


def wait_fine(client, submitted):
    """Poll job status every POLL_S via the FFI wait call; returns #failed tasks."""
    state = {}

    def cb(jobs):
        st = jobs[submitted.id]
        state.update(st)
        if not st["completed"]:
            raise _NotDone()

    while True:
        try:
            client.connection.wait_for_jobs([submitted.id], cb)
            return state["failed"], state["finished"]
        except _NotDone:
            time.sleep(POLL_S)


@contextlib.contextmanager
def _stdout_to_stderr():
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=2000)
    ap.add_argument("--wait", choices=("poll", "api"), default="poll")
    opts = ap.parse_args()
    n, wait_mode = opts.n, opts.wait
    cores = multiprocessing.cpu_count()
    load1 = round(os.getloadavg()[0], 2)

    with tempfile.TemporaryDirectory(prefix="hq-peer-") as tmp:
        server_dir = os.path.join(tmp, "server")
        workdir = os.path.join(tmp, "work")
        os.makedirs(workdir)

        t0 = time.perf_counter()
        with _stdout_to_stderr():  # HQ prints its server info table on fd 1
            cluster = LocalCluster(server_dir=server_dir)
            cluster.start_worker(WorkerConfig(cores=cores))
            client = cluster.client()
        try:
            # The worker registers asynchronously: run a 1-task warm-up job so
            # the timed part starts with a connected, idle worker.
            warm = Job(default_workdir=workdir)
            warm.program(["/bin/true"], stdout=None, stderr=None)
            wait_fine(client, client.submit(warm))
            startup_s = time.perf_counter() - t0

            job = Job(default_workdir=workdir, max_fails=None)
            for _ in range(n):
                # stdout/stderr None -> discarded (no per-task files)
                job.program(["/bin/true"], stdout=None, stderr=None)

            t_submit = time.perf_counter()
            submitted = client.submit(job)
            if wait_mode == "api":
                ok = client.wait_for_jobs([submitted], raise_on_error=False)
                failed = 0 if ok else -1
                finished = n if ok else -1
            else:
                failed, finished = wait_fine(client, submitted)
            seconds = time.perf_counter() - t_submit
            leftover = os.listdir(workdir)
        finally:
            cluster.stop()

    if failed:
        print(f"warning: {failed} tasks failed", file=sys.stderr)
    print(json.dumps({
        "system": "hyperqueue",
        "version": hyperqueue.get_version(),
        "tasks": n,
        "seconds": round(seconds, 4),
        "rate": round(n / seconds, 1),
        "startup_s": round(startup_s, 4),
        "loadavg_1m_at_start": load1,
        "cores": cores,
        "finished": finished,
        "failed": failed,
        "wait": "api(1s poll)" if wait_mode == "api" else f"poll({POLL_S}s)",
        "output_files_written": len(leftover),
    }))


if __name__ == "__main__":
    main()
