"""Parsl python_apps then bash_apps (issue 41, papercut 9): pilotfish beside Parsl HTEX, one run.

    .venv/bin/python bench/bench_parsl_mixed.py [--python 1000] [--bash 200] [--rounds 3]
                                                [--json bench/results/parsl_mixed.json]

The program: N python_apps (`x * x`) submitted at once, all results awaited; then M bash_apps
(`true`) submitted at once, all awaited. Timed from the first submit to the last result
(python phase, bash phase, and both: the wall time), after a warm-up python_app that
ensures the workers are up (startup is reported apart).

Systems, with 2 workers each (this machine's 2 cores):
  pilotfish  pilotfish.parsl.PilotfishExecutor on a local pilot of 1 node x 2 cores (python
             apps: function tasks on persistent workers; bash apps: executable tasks)
  htex       Parsl's HighThroughputExecutor, LocalProvider (one block), max_workers_per_node
             2, Parsl's defaults otherwise (both kinds of app run on its workers)
Each round runs each system in a process of its own, one after the other (alternating
which goes first); the figures are the medians over the rounds. Before papercut 9's fix,
pilotfish's bash phase waited for the python apps' idle workers to give their cores back
(idle_s, 5 s): 200 bash_apps at ~33/s.

Prints a table and the ratio pilotfish / HTEX (wall time; the issue asks for <= 1.5), and
writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

WORKERS = 2
SYSTEMS = ("pilotfish", "htex")


def square(x):
    return x * x


def true_cmd():
    return "true"


def run_one(system: str, n_python: int, n_bash: int) -> dict:
    """One system, in this process: the program once; its figures."""
    # HTEX starts its worker pool as `process_worker_pool.py ...` through a shell: this
    # interpreter's bin/ (the venv) on PATH even when the venv is not activated
    os.environ["PATH"] = os.path.join(sys.prefix, "bin") + os.pathsep + os.environ["PATH"]
    import logging

    import parsl
    from parsl import bash_app, python_app
    from parsl.config import Config

    logging.getLogger("parsl").propagate = False
    tmp = tempfile.mkdtemp(prefix="parsl-mixed-")
    t0 = time.perf_counter()
    if system == "pilotfish":
        import pilotfish as pf
        from pilotfish.parsl import PilotfishExecutor

        ex = PilotfishExecutor(
            label="pf",
            pilot=pf.PilotDescription(nodes=1, cores_per_node=WORKERS, runtime="1h"),
            session_path=os.path.join(tmp, "session"),
        )
    else:
        from parsl.executors import HighThroughputExecutor
        from parsl.providers import LocalProvider

        ex = HighThroughputExecutor(
            label="htex",
            max_workers_per_node=WORKERS,
            provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
        )
    dfk = parsl.load(Config(executors=[ex], run_dir=os.path.join(tmp, "runinfo"), usage_tracking=0))
    try:
        sq = python_app(square)
        tr = bash_app(true_cmd)
        assert sq(3).result() == 9  # warm-up: the workers are up
        startup = time.perf_counter() - t0
        t_py = time.perf_counter()
        futs = [sq(i) for i in range(n_python)]
        assert [f.result() for f in futs] == [i * i for i in range(n_python)]
        t_bash = time.perf_counter()
        futs = [tr() for _ in range(n_bash)]
        assert [f.result() for f in futs] == [0] * n_bash
        t_end = time.perf_counter()
    finally:
        dfk.cleanup()
        parsl.clear()
    return {
        "system": system,
        "startup_s": round(startup, 3),
        "python_s": round(t_bash - t_py, 3),
        "bash_s": round(t_end - t_bash, 3),
        "wall_s": round(t_end - t_py, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", type=int, default=1000, help="python_apps (default 1000)")
    ap.add_argument("--bash", type=int, default=200, help="bash_apps after them (default 200)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "parsl_mixed.json"))
    ap.add_argument("--one", choices=SYSTEMS, help=argparse.SUPPRESS)  # (a child's run)
    opts = ap.parse_args()
    if opts.one:
        print(json.dumps(run_one(opts.one, opts.python, opts.bash)))
        return 0

    import parsl

    import pilotfish

    runs: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    load = os.getloadavg()[0]
    for r in range(opts.rounds):
        order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    system,
                    "--python",
                    str(opts.python),
                    "--bash",
                    str(opts.bash),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0:
                print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"{system} failed (exit {out.returncode})")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            runs[system].append(res)
            print(f"round {r + 1} {system:9s} {res}", flush=True)

    def med(system: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[system])

    summary = {}
    for s in SYSTEMS:
        summary[s] = {k: med(s, k) for k in ("startup_s", "python_s", "bash_s", "wall_s")}
        summary[s]["python_per_s"] = round(opts.python / summary[s]["python_s"], 1)
        summary[s]["bash_per_s"] = round(opts.bash / summary[s]["bash_s"], 1)
    ratio = summary["pilotfish"]["wall_s"] / summary["htex"]["wall_s"]
    print()
    print(
        f"{opts.python} python_apps, then {opts.bash} bash_apps; {WORKERS} workers; "
        f"medians of {opts.rounds} rounds"
    )
    print("| system | python_apps/s | bash_apps/s | wall (s) | startup (s) |")
    print("|---|---:|---:|---:|---:|")
    names = {"pilotfish": "pilotfish (PilotfishExecutor)", "htex": "Parsl HTEX"}
    for s in SYSTEMS:
        m = summary[s]
        print(
            f"| {names[s]} | {m['python_per_s']:.0f} | {m['bash_per_s']:.0f} | "
            f"{m['wall_s']:.2f} | {m['startup_s']:.2f} |"
        )
    print(f"\npilotfish / HTEX wall time: {ratio:.2f}x (issue 41: within 1.5x)")
    doc = {
        "bench": "bench/bench_parsl_mixed.py",
        "python_apps": opts.python,
        "bash_apps": opts.bash,
        "workers": WORKERS,
        "rounds": opts.rounds,
        "ratio_wall_pilotfish_over_htex": round(ratio, 3),
        "summary": summary,
        "runs": runs,
        "versions": {
            "parsl": parsl.__version__,
            "pilotfish": pilotfish.__version__,
            "python": platform.python_version(),
        },
        "machine": {"cores": os.cpu_count(), "loadavg_1m_at_start": round(load, 2)},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if opts.json:
        os.makedirs(os.path.dirname(os.path.abspath(opts.json)), exist_ok=True)
        with open(opts.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {opts.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
