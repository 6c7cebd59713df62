"""PMI floods on the cluster of hosts (issue 47): what a hostile MPI task's ranks cost the other
tasks and the pilot's processes through pilotfish's own PMI path -- all in one run, on one
Slurm pilot of the four compute hosts.

    scripts/substrates/slurm.sh start
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_pmi_flood.py \\
        [--tasks 200] [--sizes 0.25,2,7] [--json OUT]

Ranks: tests/agent/pmi_progs/raw_pmi.py (speaks PMI-1 itself); the other tasks:
tests/agent/pmi_progs/mpi_hello.c built with the mpich wheel's mpicc. Cases:
  quiet      --tasks 2-rank MPI tasks (1 core per rank): tasks/s, submit of all -> last final
  getflood   the same while a 2-rank task floods gets of a missing key (64 in flight, every
             answer read) -- the tasks' rate, and the flood's answers/s
  unknown    the same with unknown commands (each one a warning in the log of the process
             serving that rank: its cost shows here)
  fence MB   a 4-rank world, a whole host per rank, each rank putting MB MiB of 1,000-byte
             values, one fence, a key of the next rank read back (the world's space: 4 x MB):
             seconds submit -> DONE; the agent's and the node executors' peak RSS (VmHWM,
             monotone: the sizes run in increasing order) after it
  over       the same with 31 MiB per rank: 4 x 31 MiB, over the 32 MiB cap -- FAILED with
             the cap's reason, and the peaks after it
Prints one JSON line per case, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
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
RAW = os.path.join(PROGS, "raw_pmi.py")
BIN = os.path.dirname(sys.executable)
MB = 1024 * 1024
DOT = 10048  # answers per `.` a flood rank prints (raw_pmi.py)


def emit(case: str, **kw) -> dict:
    row = {"case": case, **kw}
    print(json.dumps(row), flush=True)
    return row


def hwm(pid: int, field: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident memory, MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def executors(sandbox: str) -> list[int]:
    """The pilot's node executors: `python -m pilotfish.agent.node_executor <sandbox>/nodes.json`."""
    config = os.path.join(sandbox, "nodes.json").encode()
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[1:4] == [b"-m", b"pilotfish.agent.node_executor", config]:
                found.append(int(d))
    return found


def rate(tmgr, exe: str, n: int) -> float:
    t0 = time.monotonic()
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable=exe, ranks=2) for _ in range(n)])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=1800)
    dt = time.monotonic() - t0
    bad = [(t.uid, t.state, t.reason) for t in tasks if t.state != pf.DONE]
    if bad:
        raise SystemExit(f"{len(bad)} tasks not DONE: {bad[:2]}")
    return n / dt


def flooded(tmgr, exe: str, n: int, mode: str) -> dict:
    (flood,) = tmgr.submit_tasks(
        [
            pf.TaskDescription(
                executable=sys.executable, ranks=2, launcher="pmi", arguments=[RAW, mode]
            )
        ]
    )
    assert flood.wait(pf.EXECUTING, timeout=120) == pf.EXECUTING, flood.reason
    time.sleep(2)  # (the flood at full speed)
    t0 = time.monotonic()
    r = rate(tmgr, exe, n)
    dt = time.monotonic() - t0
    tmgr.cancel_tasks([flood.uid])
    flood.wait(timeout=60)
    served = (flood.stdout or "").count(".") * DOT
    hosts = sorted({s.node for s in flood.slots or []})
    return {
        "tasks_per_s": round(r, 1),
        "flood_answers_per_s": round(served / (dt + 2)),
        "flood_hosts": hosts,
        "flood_state": flood.state,
    }


def fence(tmgr, mb: float, agent: int, execs: list[int]) -> dict:
    mode = "fenceput" if mb * 4 < 32 else "bigput"
    rss = (hwm(agent, "VmRSS"), max((hwm(p, "VmRSS") for p in execs), default=0.0))
    t0 = time.monotonic()
    (t,) = tmgr.submit_tasks(
        [
            pf.TaskDescription(
                executable=sys.executable,
                ranks=4,
                cores_per_rank=16,
                launcher="pmi",
                arguments=[RAW, mode, str(mb)],
            )
        ]
    )
    tmgr.wait_tasks([t.uid], timeout=600)
    return {
        "mb_per_rank": mb,
        "world_mb": 4 * mb,
        "state": t.state,
        "seconds": round(time.monotonic() - t0, 2),
        "reason": (t.reason or "")[:160] or None,
        "agent_rss_before_mb": round(rss[0]),
        "executor_rss_before_mb": round(rss[1]),
        "agent_peak_mb": round(hwm(agent)),
        "executor_peak_mb": round(max(hwm(p) for p in execs)) if execs else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--sizes", default="0.25,2,7")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_pmi_flood.", dir=os.environ.get("PILOTFISH_BENCH_DIR"))
    exe = os.path.join(work, "mpi_hello")
    subprocess.run(
        [os.path.join(BIN, "mpicc"), "-O1", "-o", exe, os.path.join(PROGS, "mpi_hello.c")],
        check=True,
    )
    rows = []
    with pf.Session(path=os.path.join(work, "session")) as s:
        pilot, tmgr, _ = start_pilot(s, timeout=900, resource="slurm", nodes=4, runtime="60m")
        with open(os.path.join(pilot.sandbox, "pilot.json")) as f:
            agent = json.load(f)["agent_pid"]
        end = time.monotonic() + 60
        while len(executors(pilot.sandbox)) < 3 and time.monotonic() < end:
            time.sleep(0.2)
        execs = executors(pilot.sandbox)
        rate(tmgr, exe, 10)  # (warm)
        rows.append(
            emit(
                "quiet",
                tasks_per_s=round(rate(tmgr, exe, a.tasks), 1),
                agent_rss_mb=round(hwm(agent, "VmRSS")),
            )
        )
        for mode, case in (("getflood", "getflood"), ("unknownflood", "unknown")):
            rows.append(
                emit(
                    case,
                    **flooded(tmgr, exe, a.tasks, mode),
                    agent_rss_mb=round(hwm(agent, "VmRSS")),
                )
            )
        for mb in [float(x) for x in a.sizes.split(",")] + [31.0]:
            rows.append(emit("fence" if mb * 4 < 32 else "over", **fence(tmgr, mb, agent, execs)))
        pilot.cancel()
    print(
        f"\n{'case':<10} {'tasks/s':>8} {'flood/s':>9} {'world MB':>9} {'state':>7} "
        f"{'s':>6} {'agent MB':>9} {'exec MB':>8}"
    )
    for r in rows:
        print(
            f"{r['case']:<10} {r.get('tasks_per_s', ''):>8} "
            f"{r.get('flood_answers_per_s', ''):>9} {r.get('world_mb', ''):>9} "
            f"{r.get('state', ''):>7} {r.get('seconds', ''):>6} "
            f"{r.get('agent_peak_mb', r.get('agent_rss_mb', '')):>9} "
            f"{r.get('executor_peak_mb', '') or '':>8}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
