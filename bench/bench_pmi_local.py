"""An MPI job of N ranks on this host through pilotfish's PMI server (agent/pmi/) vs. MPICH's
own launcher, same program, same run.

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_pmi_local.py \
        [--ranks 2] [--runs 20] [--mpi4py] [--json OUT]

The program: tests/agent/pmi_progs/mpi_hello.c (MPI_Init, rank/size/processor name, an
Allreduce checked, MPI_Finalize) built with the mpich wheel's mpicc; --mpi4py: the mpi4py
program beside it (MPI4PY_LIBMPI=<venv>/lib/libmpi.so.12).

  pmi    spawn the ranks here (subprocess, each holding its PMI_FD) and serve them with one
         PmiServer until all exited: from before the first spawn to the last exit reaped
  hydra  `<venv>/bin/mpiexec.hydra -n N PROGRAM` (posix_spawn + wait): from its spawn to its exit

Runs alternate (pmi, hydra, pmi, ...) so that load on the machine falls on both alike; every
run must exit 0 with N right lines. Prints one JSON line per way and the ratio of medians.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "agent"))  # pmi_helpers: the local spawner

from pilotfish.agent.pmi import PmiServer  # noqa: E402
from pmi_helpers import spawn_local, wait_local  # noqa: E402

BIN = Path(sys.executable).parent
PROGS = REPO / "tests" / "agent" / "pmi_progs"


def check(out: bytes, n: int, what: str) -> None:
    lines = sorted(line.split()[:4] for line in out.decode().splitlines()
                   if line.startswith("rank "))
    want = sorted(["rank", str(r), "size", str(n)] for r in range(n))
    if lines != want:
        raise SystemExit(f"{what}: wrong output {out!r}")


def run_pmi(argv, env, n, i) -> float:
    srv = PmiServer()
    job = srv.add_job(f"pf.bench.{os.getpid()}.{i}", n, range(n))
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        procs = spawn_local(job, argv, env, stdout=out)
        ok = wait_local([srv], procs.values(), 60)
        dt = time.perf_counter() - t0
        job.close()
        srv.close()
        if not ok or any(p.returncode for p in procs.values()):
            raise SystemExit(f"pmi run {i}: {[p.returncode for p in procs.values()]}")
        out.seek(0)
        check(out.read(), n, f"pmi run {i}")
    return dt


def run_hydra(argv, env, n, i) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([str(BIN / "mpiexec.hydra"), "-n", str(n)] + argv, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"hydra run {i}: exit {r.returncode}")
    check(r.stdout, n, f"hydra run {i}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--mpi4py", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as d:
        if a.mpi4py:
            env["MPI4PY_LIBMPI"] = str(BIN.parent / "lib" / "libmpi.so.12")
            argv = [sys.executable, str(PROGS / "mpi4py_hello.py")]
        else:
            exe = Path(d) / "mpi_hello"
            subprocess.run([str(BIN / "mpicc"), "-O1", "-o", str(exe),
                            str(PROGS / "mpi_hello.c")], check=True)
            argv = [str(exe)]
        run_pmi(argv, env, a.ranks, -1)  # warm the page cache for both
        run_hydra(argv, env, a.ranks, -1)
        times: dict[str, list[float]] = {"pmi": [], "hydra": []}
        for i in range(a.runs):
            times["pmi"].append(run_pmi(argv, env, a.ranks, i))
            times["hydra"].append(run_hydra(argv, env, a.ranks, i))
    rows = {}
    for way, ts in times.items():
        ts = sorted(ts)
        rows[way] = {"way": way, "ranks": a.ranks, "program": "mpi4py" if a.mpi4py else "C",
                     "runs": len(ts), "median_s": round(statistics.median(ts), 4),
                     "min_s": round(ts[0], 4), "max_s": round(ts[-1], 4)}
        print(json.dumps(rows[way]))
    result = {"rows": list(rows.values()),
              "pmi_over_hydra": round(rows["pmi"]["median_s"] / rows["hydra"]["median_s"], 3),
              "cpus": os.cpu_count(), "load1": round(os.getloadavg()[0], 2)}
    print(json.dumps(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
