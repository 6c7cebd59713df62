"""pilotfish.amt benchmarks: three tables (markdown on stdout, raw JSON under bench/results/).

    python bench/bench_amt.py pic     [--ranks 2] [--factors 1,2,4,8,16] [--iters 20]
    python bench/bench_amt.py rate    # message rate + handler overhead, amt vs charm4py
    python bench/bench_amt.py lb      # LB cost vs elements (1k-100k) + LB quality vs charm4py
    python bench/bench_amt.py all

pic   the PIC mini-app (examples/pic/pic.py): MPI baseline, amt without LB and amt with each
      strategy, all versions side by side in one job (each iteration runs every version in
      turn, so machine noise hits them alike); per overdecomposition factor: median
      per-iteration move time, speedup over the MPI baseline, mean max/mean rank-load imbalance
      per phase (after the first rebalance for LB versions), and the time including LB.
rate  bench/amt/msgrate_amt.py (batched and unbatched) vs bench/amt/msgrate_charm.py; before vs
      after a runtime change: bench/amt/ab.py runs one of bench/amt's JSON scripts on two
      trees, interleaved (e.g. msgrate_amt.py, bcast_lb.py: a balanced phase vs its ideal).
lb    bench/amt/lbcost.py, bench/amt/lb_quality.py and bench/amt/charm_lb.py (GreedyLB).

MPI launcher: --mpiexec (default: MPICH's hydra as pilotfish's launch methods find it, else
`mpiexec` in PATH); --mpiexec-args for extra flags (e.g. "--allow-run-as-root
--oversubscribe" for Open MPI as root). Every launch is bounded by --timeout seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AMT = REPO / "bench" / "amt"
RESULTS = REPO / "bench" / "results"


def find_mpiexec() -> str:
    try:
        from pilotfish.launch.base import find_tool
        from pilotfish.launch.mpiexec import is_hydra
        hydra = find_tool(("mpiexec.hydra", "mpiexec"), is_hydra)
        if hydra:
            return hydra
    except Exception:  # noqa: BLE001 - pilotfish's client stack not installed here
        pass
    return shutil.which("mpiexec") or "mpiexec"


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [e.get("PYTHONPATH"), str(REPO / "python")]))
    return e


def launch(argv: list[str], timeout: float) -> str:
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env(), cwd=REPO, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise SystemExit(f"timed out after {timeout}s: {shlex.join(argv)}\n{out}\n{err}")
    if p.returncode != 0:
        raise SystemExit(f"failed (rc={p.returncode}): {shlex.join(argv)}\n{out}\n{err}")
    print(f"  ran in {time.monotonic() - t0:.1f}s: {shlex.join(argv[-8:])}", file=sys.stderr)
    return out


def mpi(a, n: int, script: Path, *args) -> str:
    argv = [a.mpiexec, "-n", str(n), *shlex.split(a.mpiexec_args), sys.executable, str(script),
            *map(str, args)]
    return launch(argv, a.timeout)


def charm(a, script: Path, *args) -> str:
    argv = [sys.executable, "-m", "charmrun.start", "+p2", str(script), *map(str, args)]
    return launch(argv, a.timeout)


def save(name: str, data) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(data, indent=1))


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores, load average {load:.1f} at start"


# -- pic -------------------------------------------------------------------------------------

def cmd_pic(a) -> None:
    versions = ["mpi", "amt"] + [f"amt+{s}" for s in a.strategies.split(",")]
    rows = []
    print(f"\n### PIC move, {a.ranks} ranks ({machine()})\n")
    print(f"`{a.particles}` particles ({a.blob:.0%} in a drifting trapped blob), "
          f"{a.iters} iterations (first {a.warmup} not counted), rebalance after iteration 1 "
          f"and every {a.lb_every}, load model `{a.model}`, clock `{a.clock}`, loads "
          f"`{a.load}`.\n")
    for rep in range(a.repeat):
        for f in a.factors.split(","):
            out_json = RESULTS / f"pic_r{a.ranks}_f{f}.json"
            RESULTS.mkdir(parents=True, exist_ok=True)
            mpi(a, a.ranks, REPO / "examples/pic/pic.py", "--versions", ",".join(versions),
                "--factors", f, "--iters", a.iters, "--particles", a.particles, "--sub", a.sub,
                "--lb-every", a.lb_every, "--model", a.model, "--warmup", a.warmup,
                "--clock", a.clock, "--blob", a.blob, "--load", a.load, "--json", out_json)
            rows += [dict(r, repeat=rep) for r in json.loads(out_json.read_text())]
    save(f"pic_r{a.ranks}.json", rows)
    if a.repeat > 1:
        _pic_repeats(rows, versions, a.repeat)
        rows = [r for r in rows if r["repeat"] == 0]
        print(f"\nRun 1 of {a.repeat} in detail:\n")
    base = {r["factor"]: r["summary"] for r in rows if r["version"] == "mpi"}
    head = "| blocks/rank | " + " | ".join(versions) + " |"
    print("Median per-iteration move time in ms (speedup over the MPI baseline):\n")
    print(head)
    print("|" + "---|" * (len(versions) + 1))
    for f in sorted(base):
        cells = []
        for v in versions:
            s = next(r["summary"] for r in rows if r["factor"] == f and r["version"] == v)
            cells.append(f"{s['median_iter_s'] * 1e3:.1f} ({base[f]['median_iter_s'] / s['median_iter_s']:.2f}x)")
        print(f"| {f} | " + " | ".join(cells) + " |")
    print("\nMax/mean rank-load imbalance: mean over the counted phases [LB versions: mean "
          "over the phases right after each rebalance] / per-iteration time including the "
          "LB cost, ms:\n")
    print(head)
    print("|" + "---|" * (len(versions) + 1))
    for f in sorted(base):
        cells = []
        for v in versions:
            r = next(r for r in rows if r["factor"] == f and r["version"] == v)
            s = r["summary"]
            post = (f" [{s['post_lb_imbalance']:.2f}]" if s.get("post_lb_imbalance")
                    is not None else "")
            cells.append(f"{s['mean_imbalance']:.2f}{post} / {s['with_lb_iter_s'] * 1e3:.1f}")
        print(f"| {f} | " + " | ".join(cells) + " |")


def _pic_repeats(rows, versions, n) -> None:
    """Median over repeated jobs of each job's own speedup (min-max), and of the post-LB
    imbalance: one job's cells move by +-5-10 % on a shared machine."""
    import statistics

    print(f"Speedup over the MPI baseline, median of {n} jobs (min-max); [post-LB imbalance, "
          "median]:\n")
    print("| blocks/rank | " + " | ".join(versions[1:]) + " |")
    print("|" + "---|" * len(versions))
    for f in sorted({r["factor"] for r in rows}):
        cells = []
        for v in versions[1:]:
            sp, post = [], []
            for rep in range(n):
                got = {r["version"]: r["summary"] for r in rows
                       if r["factor"] == f and r["repeat"] == rep}
                sp.append(got["mpi"]["median_iter_s"] / got[v]["median_iter_s"])
                if got[v].get("post_lb_imbalance") is not None:
                    post.append(got[v]["post_lb_imbalance"])
            cell = f"{statistics.median(sp):.2f}x ({min(sp):.2f}-{max(sp):.2f})"
            if post:
                cell += f" [{statistics.median(post):.2f}]"
            cells.append(cell)
        print(f"| {f} | " + " | ".join(cells) + " |")


# -- rate ------------------------------------------------------------------------------------

def cmd_rate(a) -> None:
    amt_b = json.loads(mpi(a, 2, AMT / "msgrate_amt.py", "--k", a.k).strip().splitlines()[-1])
    amt_1 = json.loads(mpi(a, 2, AMT / "msgrate_amt.py", "--k", a.k, "--batch", 1)
                       .strip().splitlines()[-1])
    rows = {"amt (batched, batch_max=512)": amt_b, "amt (unbatched, batch_max=1)": amt_1}
    try:
        out = charm(a, AMT / "msgrate_charm.py", "--k", a.k)
        rows["charm4py 1.1"] = json.loads(next(line for line in out.splitlines()
                                               if line.startswith("RESULT "))[7:])
    except (SystemExit, StopIteration) as exc:
        print(f"charm4py run failed: {exc}", file=sys.stderr)
    save("amt_rate.json", rows)
    print(f"\n### Message rate and handler overhead, 2 ranks / 2 PEs ({machine()})\n")
    print(f"{amt_b['elements']} elements, half per rank; {a.k} messages per sending element; "
          "best of 3.\n")
    print("| runtime | remote msgs/s (rank 0 -> rank 1) | local msgs/s per rank | "
          "µs per local message (send + handler) | relay msgs/s (one remote post per "
          "handler) | 1 MiB numpy arrays, GiB/s |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        relay = f"{r['relay_msgs_per_s']:,.0f}" if "relay_msgs_per_s" in r else "–"
        print(f"| {name} | {r['remote_msgs_per_s']:,.0f} | {r['local_msgs_per_s']:,.0f} | "
              f"{r['local_us_per_handler']:.2f} | {relay} | {r['bulk_GiB_per_s']:.2f} |")


# -- lb --------------------------------------------------------------------------------------

def cmd_lb(a) -> None:
    out = mpi(a, 2, AMT / "lbcost.py", "--elements", a.elements)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    save("amt_lbcost.json", rows)
    print(f"\n### Load-balancing cost vs elements, 2 ranks ({machine()})\n")
    print("Synthetic lognormal loads, x4 on rank 0's half; 256 B numpy state per element; each "
          "strategy from the same placement.\n")
    print("| elements | strategy | decide s | migrate s | migrations | migrated MiB | "
          "imbalance before -> after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['elements']:,} | {r['strategy']} | {r['strategy_s']:.4f} | "
              f"{r['migrate_s']:.3f} | {r['migrations']:,} | "
              f"{r['migrated_bytes'] / 2**20:.2f} | {r['imbalance_before']:.3f} -> "
              f"{r['imbalance_after']:.3f} |")
    q = json.loads(mpi(a, 2, AMT / "lb_quality.py").strip().splitlines()[-1])
    rows_q = {f"amt {k}": v for k, v in q.items() if isinstance(v, dict)}
    try:
        out = charm(a, AMT / "charm_lb.py", "+balancer", "GreedyLB", "+LBObjOnly")
        c = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        rows_q["charm4py GreedyLB (measured)"] = c
    except (SystemExit, StopIteration) as exc:
        print(f"charm4py run failed: {exc}", file=sys.stderr)
    save("amt_lbquality.json", rows_q)
    print("\nLB quality on one synthetic imbalance (64 elements, 2 ranks/PEs; imbalance of the "
          "synthetic loads under the chosen placement; 'measured' = decided on wall-clock "
          "handler times of elements spinning for their load):\n")
    print("| balancer | imbalance before -> after | migrations | iteration ms before -> "
          "after LB |")
    print("|---|---|---|---|")
    for name, r in rows_q.items():
        it = r["iter_s"]
        print(f"| {name} | {r['imbalance_before']:.3f} -> {r['imbalance_after']:.3f} | "
              f"{r['migrations']} | {it[0] * 1e3:.0f} -> {it[-1] * 1e3:.0f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("pic", "rate", "lb", "all"))
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("--mpiexec-args", default="")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--factors", default="1,2,4,8,16")
    ap.add_argument("--strategies", default="greedy,greedy_refine,hierarchical,tempered")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--particles", type=int, default=None,
                    help="default: 100,000 per rank (weak scaling)")
    ap.add_argument("--sub", type=int, default=8)
    ap.add_argument("--blob", type=float, default=0.99)
    ap.add_argument("--lb-every", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="pic: jobs per factor (medians)")
    ap.add_argument("--model", default="last")
    ap.add_argument("--clock", default="cpu", choices=("cpu", "wall"))
    ap.add_argument("--load", default="measured", choices=("measured", "counts"),
                    help="pic: LB on measured handler times or on the blocks' particle counts")
    ap.add_argument("--k", type=int, default=2000)
    ap.add_argument("--elements", default="1000,10000,100000")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error(f"--repeat {a.repeat}: give 1 or more jobs per factor")
    a.mpiexec = a.mpiexec or find_mpiexec()
    a.particles = a.particles or 100_000 * a.ranks
    print(f"<!-- python bench/bench_amt.py {' '.join(argv or sys.argv[1:])}; "
          f"mpiexec: {a.mpiexec} -->")
    for what in (("pic", "rate", "lb") if a.what == "all" else (a.what,)):
        globals()[f"cmd_{what}"](a)


if __name__ == "__main__":
    main()
