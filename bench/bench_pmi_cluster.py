"""MPI without a launcher on the cluster of hosts (issue 39): MPI tasks through pilotfish's own
PMI path (launch method `pmi`: node executors and the agent serve PMI, no launcher process per
task) vs. `srun --mpi=pmi2`, `mpiexec` (hydra) and `prrte` per task -- all in one run, on one
Slurm pilot of the four compute hosts.

    scripts/substrates/slurm.sh start
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_pmi_cluster.py \
        [--tasks 500] [--per-launcher 100] [--latency 20] [--json OUT]

Programs: tests/agent/pmi_progs/mpi_hello.c built with the mpich wheel's mpicc (MPI_Init,
MPI_Allreduce, MPI_Finalize), and tests/agent/pmi_progs/mpi4py_hello.py (MPICH's ABI; under
prrte the same script with MPI4PY_LIBMPI=<venv>/lib/libmpi.so.40, Open MPI's: PRRTE speaks
PMIx only). Cases, each rate N / (submit of all -> the last final), each task checked (its
ranks printed the right size and sum):
  throughput  --tasks tasks of 2 ranks x 1 core through pmi (wherever the placer puts them:
              on one host or across two), --per-launcher through each baseline; with the
              machine's CPU seconds per task (/proc/stat: every host is a namespace of it --
              the ranks' MPI_Init and the launchers' own work together)
  latency     --latency tasks one after another of 2 ranks x a whole host (2 hosts) and of
              4 ranks x a whole host (4 hosts): the median submit -> final; beside it a local
              `mpiexec -n 2` of the same program on this host (subprocess, the median)
Prints one JSON line per case and a final JSON object (--json: also to OUT).
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
sys.path.insert(0, HERE)

import pilotfish as pf  # noqa: E402
from _pilots import start_pilot  # noqa: E402

PROGS = os.path.join(HERE, "..", "tests", "agent", "pmi_progs")
BIN = os.path.dirname(sys.executable)
LIBMPI40 = os.path.join(os.path.dirname(BIN), "lib", "libmpi.so.40")
LAUNCHERS = {  # name -> (launcher, its options)
    "pmi": (None, {}),  # (named by nobody: the pilot routes MPICH-ABI programs there)
    "srun": ("srun", {"srun": {"mpi": "pmi2"}}),
    "mpiexec": ("mpiexec", {}),
    "prrte": ("prrte", {}),
}


def emit(case: str, **kw) -> dict:
    row = {"case": case, **kw}
    print(json.dumps(row), flush=True)
    return row


def desc(prog: str, launcher: str, ranks: int, cores: int) -> pf.TaskDescription:
    name, _ = LAUNCHERS[launcher]
    if prog == "c":
        return pf.TaskDescription(executable=EXE, ranks=ranks, cores_per_rank=cores,
                                  launcher=name)
    env = {"MPI4PY_LIBMPI": LIBMPI40} if launcher == "prrte" else {}
    return pf.TaskDescription(executable=sys.executable, ranks=ranks, cores_per_rank=cores,
                              arguments=[os.path.join(PROGS, "mpi4py_hello.py")],
                              environment=env, launcher=name)


def check(tasks, ranks: int) -> None:
    want = str(ranks * (ranks - 1) // 2)
    for t in tasks:
        lines = (t.stdout or "").splitlines()
        ok = t.state == pf.DONE and len(lines) == ranks and all(
            ln.split()[3] == str(ranks) and ln.split()[7] == want for ln in lines)
        if not ok:
            raise SystemExit(f"{t.uid} ({t.state}): {t.reason!r} {t.stdout!r}"[:600])


def cpu_s() -> float:
    """CPU seconds this machine spent so far (every host of the cluster is a namespace of it):
    user + nice + system + irq + softirq of /proc/stat."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:8]
    busy = sum(int(x) for i, x in enumerate(fields) if i != 3 and i != 4)  # not idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def throughput(tmgr, prog: str, launcher: str, n: int) -> dict:
    tmgr.wait_tasks([t.uid for t in tmgr.submit_tasks([desc(prog, launcher, 2, 1)])],
                    timeout=600)  # (warm)
    t0, c0 = time.monotonic(), cpu_s()
    tasks = tmgr.submit_tasks([desc(prog, launcher, 2, 1) for _ in range(n)])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=3600)
    dt, cpu = time.monotonic() - t0, cpu_s() - c0
    check(tasks, 2)
    return emit("throughput", program=prog, launcher=launcher, tasks=n, seconds=round(dt, 2),
                tasks_per_s=round(n / dt, 2), cpu_ms_per_task=round(1000 * cpu / n, 1))


def latency(tmgr, prog: str, launcher: str, ranks: int, n: int, cores: int) -> dict:
    times = []
    for i in range(n + 1):
        t0 = time.monotonic()
        (t,) = tmgr.submit_tasks([desc(prog, launcher, ranks, cores)])
        tmgr.wait_tasks([t.uid], timeout=600)
        if i:  # (the first warms the path)
            times.append(time.monotonic() - t0)
        check([t], ranks)
    return emit("latency", program=prog, launcher=launcher, ranks=ranks,
                hosts=ranks, median_ms=round(1000 * statistics.median(times), 1),
                min_ms=round(1000 * min(times), 1))


def local_mpiexec(prog: str, n: int) -> dict:
    argv = [os.path.join(BIN, "mpiexec"), "-n", "2"] + (
        [EXE] if prog == "c" else [sys.executable, os.path.join(PROGS, "mpi4py_hello.py")])
    times = []
    for _ in range(n + 1):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        times.append(time.monotonic() - t0)
    return emit("latency", program=prog, launcher="local mpiexec -n 2", ranks=2, hosts=1,
                median_ms=round(1000 * statistics.median(times[1:]), 1),
                min_ms=round(1000 * min(times[1:]), 1))


def main() -> int:
    global EXE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--per-launcher", type=int, default=100)
    ap.add_argument("--latency", type=int, default=20)
    ap.add_argument("--skip", default="", help="launchers to leave out, comma-separated")
    ap.add_argument("--json")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    work = tempfile.mkdtemp(prefix="bench_pmi.", dir=os.environ.get("PILOTFISH_BENCH_DIR"))
    EXE = os.path.join(work, "mpi_hello")
    subprocess.run([os.path.join(BIN, "mpicc"), "-O1", "-o", EXE,
                    os.path.join(PROGS, "mpi_hello.c")], check=True)
    rows = []
    cores = int(os.environ.get("PILOTFISH_SLURM_CPUS", "16"))
    with pf.Session(path=os.path.join(work, "session")) as s:
        _, tmgr, _ = start_pilot(s, timeout=180, resource="slurm", nodes=4, runtime="60m",
                                 launcher_options={"srun": {"mpi": "pmi2"}})
        for prog in ("c", "mpi4py"):
            for launcher in LAUNCHERS:
                if launcher in skip or (launcher == "prrte" and prog == "c"):
                    continue  # (an MPICH binary cannot start under PRRTE: PMIx only)
                n = a.tasks if launcher == "pmi" else a.per_launcher
                if prog == "mpi4py":
                    n = max(10, n // 5)
                rows.append(throughput(tmgr, prog, launcher, n))
            for launcher in LAUNCHERS:
                if launcher in skip or (launcher == "prrte" and prog == "c"):
                    continue
                for ranks in (2, 4):
                    rows.append(latency(tmgr, prog, launcher, ranks, a.latency, cores))
            rows.append(local_mpiexec(prog, a.latency))
    rate = {(r["program"], r["launcher"]): r["tasks_per_s"] for r in rows
            if r["case"] == "throughput"}
    ratios = {f"{p}: pmi / {b}": round(rate[(p, "pmi")] / rate[(p, b)], 1)
              for (p, b) in rate if b != "pmi" and (p, "pmi") in rate}
    out = {"rows": rows, "ratios": ratios}
    print(json.dumps({"ratios": ratios}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


EXE = ""

if __name__ == "__main__":
    sys.exit(main())
