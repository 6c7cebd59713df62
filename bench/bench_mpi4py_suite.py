"""mpi4py's own test suite through pilotfish's default path (no launcher named) across hosts of
the test cluster, against the same suite under a local launcher of the same MPI (issue 51):

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_mpi4py_suite.py \
        [--sdist DIR] [--mpi mpich openmpi] [--ranks 2 4] [--ways local pilotfish] \
        [--out DIR] [--json OUT] [-- main.py's arguments]

For each MPI and rank count, one run per way, one at a time:
- local: MPICH's hydra `mpiexec -n R` (this environment's), or for Open MPI the openmpi
  wheel's `prterun -n R --map-by :oversubscribe` (its `mpirun` is shadowed by MPICH's here)
  with MPI4PY_LIBMPI=<venv>/lib/libmpi.so.40; on this host;
- pilotfish: one task of R ranks x --cores-per-rank cores (a whole host each by default: R
  hosts) on one Slurm pilot of max(--ranks) hosts, no launcher named; the same
  MPI4PY_LIBMPI for Open MPI.
Every rank runs the sdist's test/main.py (default arguments: --no-builddir -q -e
test_comm_topo -- MPICH's wheel hangs in test_comm_topo across hosts, outside pilotfish too)
through bench/mpi4py_suite_rank.py, which records each test's outcome per rank. Prints a table
(tests run, failures, errors, skips per run, rank 0's, and whether every rank agreed) and,
per MPI and rank count, the tests whose outcomes differ between the ways, with the reason on
each side. The sdist: --sdist, else the installed mpi4py version's, downloaded once with pip
into ~/.cache/pilotfish/ (`pip download --no-binary :all: --no-deps mpi4py==<version>`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import pilotfish as pf  # noqa: E402
from pilotfish.launch.base import by_node  # noqa: E402
from pilotfish.launch.mpirun import openmpi_env  # noqa: E402

RANK = REPO / "bench" / "mpi4py_suite_rank.py"
BIN = Path(sys.prefix) / "bin"
OMPI_LIB = Path(sys.prefix) / "lib" / "libmpi.so.40"
MAIN_ARGS = ["--no-builddir", "-q", "-e", "test_comm_topo"]
RUN_TIMEOUT_S = 1800


def sdist_dir(given: str | None) -> Path:
    """The mpi4py sdist's directory: --sdist, or the installed version's, fetched once."""
    if given:
        d = Path(given)
        if not (d / "test" / "main.py").is_file():
            raise SystemExit(f"--sdist={given!r}: no test/main.py in it")
        return d
    ver = importlib.metadata.version("mpi4py")
    cache = Path.home() / ".cache" / "pilotfish"
    d = cache / f"mpi4py-{ver}"
    if not (d / "test" / "main.py").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             "-d", str(cache), f"mpi4py=={ver}"],
            check=True,
        )  # fmt: skip
        with tarfile.open(cache / f"mpi4py-{ver}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    return d


EXTRA: dict[str, str] = {}  # --env


def mpi_env(mpi: str) -> dict[str, str]:
    return {**({"MPI4PY_LIBMPI": str(OMPI_LIB)} if mpi == "openmpi" else {}), **EXTRA}


def run_local(mpi: str, ranks: int, main: Path, args: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **mpi_env(mpi))
    if mpi == "openmpi":
        tool = str(BIN / "prterun")
        env.update(openmpi_env(tool))
        launch = [tool, "-n", str(ranks), "--map-by", ":oversubscribe"]
    else:
        launch = [str(BIN / "mpiexec"), "-n", str(ranks)]
    argv = [*launch, sys.executable, str(RANK), str(out), str(main), *args]
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            argv, cwd=main.parent.parent, env=env, capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S,
        )  # fmt: skip
        state, text = f"exit {p.returncode}", p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        state, text = f"timed out after {RUN_TIMEOUT_S} s", str(e.stdout or "")
    (out / "output.txt").write_text(text)
    return {"state": state, "seconds": round(time.monotonic() - t0), "hosts": 1}


def run_pilotfish(tmgr, mpi: str, ranks: int, cores: int, main: Path, args: list[str],
                  out: Path) -> dict:  # fmt: skip
    td = pf.TaskDescription(
        executable=sys.executable,
        arguments=[str(RANK), str(out), str(main), *args],
        ranks=ranks,
        cores_per_rank=cores,
        environment=mpi_env(mpi),
        timeout=RUN_TIMEOUT_S,
    )
    t0 = time.monotonic()
    (t,) = tmgr.submit_tasks([td])
    t.wait(timeout=RUN_TIMEOUT_S + 120)
    (out / "output.txt").write_text(f"{t.state} {t.reason}\n{t.stdout}\n{t.stderr}")
    return {
        "state": f"{t.state}" + (f" ({t.reason})" if t.reason else ""),
        "seconds": round(time.monotonic() - t0),
        "hosts": len({s.node for s in by_node(t.slots)}),
        "launcher": getattr(t, "launcher", None),
    }


def read_ranks(out: Path, ranks: int) -> tuple[list[dict | None], dict]:
    got: list[dict | None] = []
    for r in range(ranks):
        p = out / f"rank-{r}.json"
        got.append(json.loads(p.read_text()) if p.exists() else None)
    counts: dict = {"run": None, "fail": None, "error": None, "skip": None, "agree": False}
    r0 = got[0]
    if r0 is not None:
        vals = list(r0["outcomes"].values())
        counts = {
            "run": r0["run"],
            "fail": vals.count("fail"),
            "error": vals.count("error"),
            "skip": vals.count("skip"),
            "agree": all(g is not None and g["outcomes"] == r0["outcomes"] for g in got),
        }
    return got, counts


def differences(a: list[dict | None], b: list[dict | None]) -> list[tuple[str, str, str]]:
    """(test, way a's outcomes and reason, way b's) for every test whose outcomes per rank
    differ between two runs."""

    def per_test(got):
        tests: dict[str, list[str]] = {}
        why: dict[str, str] = {}
        for r, g in enumerate(got):
            for tid, kind in (g or {}).get("outcomes", {}).items():
                tests.setdefault(tid, ["-"] * len(got))[r] = kind
                if g and tid in g["why"] and tid not in why:
                    why[tid] = g["why"][tid]
        return tests, why

    ta, wa = per_test(a)
    tb, wb = per_test(b)
    out = []
    for tid in sorted(set(ta) | set(tb)):
        oa, ob = ta.get(tid, ["absent"]), tb.get(tid, ["absent"])
        if oa != ob:
            out.append(
                (tid, f"{'/'.join(oa)} {wa.get(tid, '')}", f"{'/'.join(ob)} {wb.get(tid, '')}")
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist")
    ap.add_argument("--mpi", nargs="+", default=["mpich", "openmpi"], choices=["mpich", "openmpi"])
    ap.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    ap.add_argument("--ways", nargs="+", default=["local", "pilotfish"],
                    choices=["local", "pilotfish"])  # fmt: skip
    ap.add_argument("--cores-per-rank", type=int, default=16)
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for every rank, both ways (e.g. OMPI_MCA_mpi_yield_when_idle=1 where "
        "the hosts share too few cores)",
    )
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("main_args", nargs="*")
    a = ap.parse_args()
    for kv in a.env:
        if "=" not in kv:
            raise SystemExit(f"--env={kv!r}: KEY=VALUE")
    EXTRA.update(kv.split("=", 1) for kv in a.env)
    main_py = sdist_dir(a.sdist) / "test" / "main.py"
    args = a.main_args or MAIN_ARGS
    top = Path(a.out or tempfile.mkdtemp(prefix="mpi4py-suite-"))
    top.mkdir(parents=True, exist_ok=True, mode=0o700)
    rows: list[dict] = []
    session = tmgr = None
    try:
        for mpi in a.mpi:
            for n in a.ranks:
                got = {}
                for way in a.ways:
                    out = top / f"{mpi}-{n}-{way}"
                    out.mkdir(mode=0o700, exist_ok=True)
                    print(f"... {mpi} {n} ranks {way}", flush=True)
                    if way == "local":
                        info = run_local(mpi, n, main_py, args, out)
                    else:
                        if session is None:  # (on first need: no hosts held while local runs)
                            session = pf.Session(path=top / "session")
                            pilot = pf.PilotManager(session).submit_pilots(
                                pf.PilotDescription(
                                    resource="slurm", nodes=max(a.ranks), runtime="90m"
                                )
                            )
                            tmgr = pf.TaskManager(session)
                            tmgr.add_pilots(pilot)
                            if pilot.wait(pf.ACTIVE, timeout=300) != pf.ACTIVE:
                                raise SystemExit(f"the pilot did not start: {pilot.reason}")
                        info = run_pilotfish(tmgr, mpi, n, a.cores_per_rank, main_py, args, out)
                    got[way], counts = read_ranks(out, n)
                    row = {"mpi": mpi, "ranks": n, "way": way, **info, **counts}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if len(got) == 2:
                    diff = differences(got["local"], got["pilotfish"])
                    rows[-1]["differ"] = [d[0] for d in diff]
                    print(f"{mpi} {n} ranks: {len(diff)} tests differ (local | pilotfish)")
                    for tid, la, lb in diff:
                        print(f"  {tid}\n    local:     {la}\n    pilotfish: {lb}")
    finally:
        if session is not None:
            session.close()
    print("\n| MPI | ranks | way | hosts | tests | failures | errors | skipped | all ranks "
          "agree | s | state |\n|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for r in rows:
        print(f"| {r['mpi']} | {r['ranks']} | {r['way']} | {r['hosts']} | {r['run']} | "
              f"{r['fail']} | {r['error']} | {r['skip']} | {r['agree']} | {r['seconds']} | "
              f"{r['state'][:60]} |")  # fmt: skip
    print(f"(results under {top})")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
