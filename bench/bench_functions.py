"""Function tasks (issue 15): pilotfish beside Parsl, Dask and concurrent.futures, one run.

    .venv/bin/python bench/bench_functions.py [--n 20000] [--peer-n 5000] [--json OUT]
    (Dask: pip install -e ".[bench]")

Every system gets 2 workers (this machine's 2 cores) and is warmed up first (its workers
started), then timed on:
  noop       N no-op calls submitted at once, until every result is back: calls/s
  sleep      1 ms and 10 ms sleeps (2 s of ideal work each): ideal time / measured time
  roundtrip  one call at a time on idle workers: submit -> result, median of 50
Systems: pilotfish through TaskManager.submit_tasks (a list) and through pf.Executor
(one submit per call), Parsl HTEX and ThreadPool (python_app), Dask LocalCluster
(client.map / submit), concurrent.futures.ProcessPoolExecutor. Each runs in its own process,
one after the other.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

WORKERS = 2


def noop():
    return None


def sleep_for(s):
    import time  # (Parsl sends a script's functions without their module's globals)

    time.sleep(s)


# -- each system: run(calls) where calls is a list of (fn, args); returns results ---------

class PfTaskManager:
    name = "pilotfish TaskManager"

    def __enter__(self):
        import pilotfish as pf

        self.pf = pf
        self.s = pf.Session(path=tempfile.mkdtemp() + "/s")
        pilot = pf.PilotManager(self.s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=WORKERS, runtime="1h"))
        self.tmgr = pf.TaskManager(self.s)
        self.tmgr.add_pilots(pilot)
        pilot.wait(pf.ACTIVE, timeout=60)
        return self

    def map(self, fn, args_list):
        ts = self.tmgr.submit_tasks([self.pf.TaskDescription(function=fn, args=a)
                                     for a in args_list])
        self.tmgr.wait_tasks([t.uid for t in ts])
        bad = [t for t in ts if t.state != self.pf.DONE]
        assert not bad, bad[0].reason
        return [t.result for t in ts]

    def one(self, fn, args):
        t = self.tmgr.submit_tasks(self.pf.TaskDescription(function=fn, args=args))
        t.wait()
        return t.result

    def __exit__(self, *exc):
        self.s.close()


class FuturesLike:
    """Systems with a concurrent.futures-style submit."""

    def map(self, fn, args_list):
        fs = [self.submit(fn, *a) for a in args_list]
        return [f.result() for f in fs]

    def one(self, fn, args):
        return self.submit(fn, *args).result()


class PfExecutor(FuturesLike):
    name = "pilotfish Executor"

    def __enter__(self):
        import pilotfish as pf

        self.ex = pf.Executor(session_path=tempfile.mkdtemp() + "/s",
                              pilot=pf.PilotDescription(nodes=1, cores_per_node=WORKERS,
                                                        runtime="1h"))
        self.submit = self.ex.submit
        return self

    def __exit__(self, *exc):
        self.ex.shutdown()


class ProcPool(FuturesLike):
    name = "concurrent.futures ProcessPool"

    def __enter__(self):
        import concurrent.futures as cf

        self.ex = cf.ProcessPoolExecutor(WORKERS)
        self.submit = self.ex.submit
        return self

    def __exit__(self, *exc):
        self.ex.shutdown()


class Parsl(FuturesLike):
    def __init__(self, kind: str):
        self.kind = kind
        self.name = "Parsl " + ("HTEX" if kind == "htex" else "ThreadPool")

    def __enter__(self):
        import parsl
        from parsl.config import Config

        if self.kind == "htex":
            from parsl.executors import HighThroughputExecutor
            from parsl.providers import LocalProvider

            ex = HighThroughputExecutor(label="htex", max_workers_per_node=WORKERS,
                                        provider=LocalProvider(init_blocks=1, max_blocks=1))
        else:
            from parsl.executors.threads import ThreadPoolExecutor

            ex = ThreadPoolExecutor(max_threads=WORKERS)
        self.dfk = parsl.load(Config(executors=[ex], run_dir=tempfile.mkdtemp()))
        self.apps = {}
        self.parsl = parsl
        return self

    def submit(self, fn, *args):
        app = self.apps.get(fn)
        if app is None:
            app = self.apps[fn] = self.parsl.python_app(fn)
        return app(*args)

    def __exit__(self, *exc):
        self.dfk.cleanup()


class Dask(FuturesLike):
    name = "Dask LocalCluster"

    def __enter__(self):
        from dask.distributed import Client, LocalCluster

        self.cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                                    dashboard_address=None)
        self.client = Client(self.cluster)
        return self

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def map(self, fn, args_list):
        fs = self.client.map(fn, *zip(*args_list), pure=False) if args_list and args_list[0] \
            else [self.client.submit(fn, pure=False) for _ in args_list]
        return self.client.gather(fs)

    def __exit__(self, *exc):
        self.client.close()
        self.cluster.close()


SYSTEMS = {"pf_tmgr": PfTaskManager, "pf_executor": PfExecutor,
           "htex": lambda: Parsl("htex"), "threads": lambda: Parsl("threads"),
           "dask": Dask, "procpool": ProcPool}


def measure(key: str, n: int, sleeps: bool) -> dict:
    with SYSTEMS[key]() as sys_:
        sys_.map(noop, [()] * (4 * WORKERS))  # warm: every worker up
        t0 = time.perf_counter()
        sys_.map(noop, [()] * n)
        noop_s = time.perf_counter() - t0
        out = {"system": sys_.name, "n": n, "noop_per_s": n / noop_s}
        rtts = []
        for _ in range(50):
            t = time.perf_counter()
            sys_.one(noop, ())
            rtts.append(time.perf_counter() - t)
        out["roundtrip_ms"] = statistics.median(rtts) * 1e3
        if sleeps:
            for d, m in ((0.001, 4000), (0.010, 400)):
                t = time.perf_counter()
                sys_.map(sleep_for, [(d,)] * m)
                out[f"eff_{int(d * 1000)}ms"] = (m * d / WORKERS) / (time.perf_counter() - t)
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="no-op calls for fast systems")
    ap.add_argument("--peer-n", type=int, default=5000, help="no-op calls for Parsl, Dask")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.n, True)))
        return
    rows = []
    for key in a.systems.split(","):
        n = a.n if key in ("pf_tmgr", "pf_executor", "procpool") else a.peer_n
        env = dict(os.environ)  # (HTEX starts interchange.py and its workers from PATH)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        r = subprocess.run([sys.executable, __file__, "--one", key, "--n", str(n)],
                           capture_output=True, text=True, timeout=900, cwd=tempfile.mkdtemp(),
                           env=env)
        if r.returncode != 0:
            print(f"{key}: failed\n{r.stderr[-1500:]}", file=sys.stderr)
            continue
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    htex = next((r for r in rows if r["system"] == "Parsl HTEX"), None)
    print(f"| system | no-op calls/s | × HTEX | 1 ms sleeps: efficiency | 10 ms sleeps: "
          f"efficiency | round trip (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['noop_per_s'] / htex['noop_per_s']:.1f}×" if htex else "—"
        print(f"| {r['system']} | {r['noop_per_s']:,.0f} ({r['n']:,}) | {ratio} | "
              f"{r['eff_1ms']:.2f} | {r['eff_10ms']:.2f} | {r['roundtrip_ms']:.2f} ms |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
