"""Sub-agents (issue 48 item 2): one agent vs. a root and a sub-agent per partition, the same
pilot shape side by side in one run -- the CPU each process spends per task, from its own
counters, and the rates of the node-executor and PMI paths.

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_subagents.py \
        [--tasks 2000] [--repeats 5] [--pmi 200] [--latency 50] [--json OUT]
    .venv/bin/python bench/bench_subagents.py --local      # an emulated local pilot instead

Pilots: Slurm, the four compute hosts, partitions=2 (n1+n2, n3+n4); `one`: subagents=False
(one agent on n1 serving both partitions), `subs`: subagents=True (a root on n1 and a
sub-agent per partition, both on n1). --local: resource="local", 4 emulated nodes of 16 cores
(tasks spawned here, no node executors).

us_per_task divides a process's CPU by every task of the run; us_per_own_task a sub-agent's
by the tasks its partition ran. (The root sends a sub-agent the tasks of one round in one
frame: at these rates a sub-agent's frames carry about one task.)
CPU of a process: the sum over its threads of /proc/PID/task/TID/schedstat's first field
(nanoseconds on a CPU; ZeroMQ's I/O threads, where CURVE runs, included) -- read before and
after each repeat; idle: the same over IDLE_S with nothing submitted, per second, measured
before each repeat and subtracted (heartbeats of the node executors and the client).

Cases, each repeated --repeats times (min and median reported):
  frame1   --tasks /bin/true tasks, each in a submit call of its own (one task per frame to
           the agent or the root, and -- at this rate -- about one per launch frame to a node
           executor): us of CPU per task of the agent | the root | each sub-agent (their sum)
  bulk     --tasks /bin/true tasks in one submit call: the same, and tasks/s (submit -> the
           last final)
  pmi      --pmi 2-rank MPI tasks (tests/agent/pmi_progs/mpi_hello.c, the mpich wheel's mpicc)
           through the pilot's own PMI path, one submit call: tasks/s (cluster only)
  latency  --latency /bin/true tasks one after another: submit -> DONE, median and min
Prints one JSON line per case and pilot, and a final JSON object (--json: also to OUT).
"""

from __future__ import annotations

import argparse
import collections
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
from pilotfish import _events as E  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402
from _pilots import start_pilot  # noqa: E402

PROGS = os.path.join(HERE, "..", "tests", "agent", "pmi_progs")
BIN = os.path.dirname(sys.executable)
IDLE_S = 3.0


def emit(case: str, **kw) -> dict:
    row = {"case": case, **kw}
    print(json.dumps(row), flush=True)
    return row


def cpu_ns(pid: int) -> int:
    """CPU nanoseconds of every live thread of pid (0 if it is gone)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def processes(pilot) -> dict[str, int]:
    """{'agent' | 'root' | 'p<i>': pid} of the pilot's agent processes."""
    with open(os.path.join(pilot.sandbox, "pilot.json")) as f:
        pid = json.load(f)["agent_pid"]
    deadline = time.monotonic() + 10
    while True:
        ups = [
            e
            for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
            if e[2] == E.SUBAGENT_UP
        ]
        if not pilot.description.subagents or ups or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if not ups:
        return {"agent": pid}
    out = {"root": pid}
    for e in ups:
        name, sub_pid = e[3].split()[:2]
        out[name] = int(sub_pid)
    return out


def measure(procs: dict[str, int], run) -> tuple[dict[str, float], float, dict]:
    """({process: CPU seconds of run() beyond its idle rate}, run's wall seconds, the tasks
    each partition ran {p<i>: n})."""
    c0 = {k: cpu_ns(p) for k, p in procs.items()}
    time.sleep(IDLE_S)
    c1 = {k: cpu_ns(p) for k, p in procs.items()}
    idle = {k: (c1[k] - c0[k]) / 1e9 / IDLE_S for k in procs}
    t0 = time.monotonic()
    tasks = run()
    dt = time.monotonic() - t0
    c2 = {k: cpu_ns(p) for k, p in procs.items()}
    ran = collections.Counter(f"p{t.partition}" for t in tasks)
    return {k: (c2[k] - c1[k]) / 1e9 - idle[k] * dt for k in procs}, dt, ran


def summarize(case: str, name: str, n: int, runs: list[tuple[dict, float]], **extra) -> dict:
    per = {k: [1e6 * r[0][k] / n for r in runs] for k in runs[0][0]}
    if len(per) > 1:
        per["subs"] = [
            sum(v[i] for k, v in per.items() if k.startswith("p")) for i in range(len(runs))
        ]
    rates = [n / r[1] for r in runs]
    own = {  # each sub-agent's CPU per task it ran itself
        k: [1e6 * r[0][k] / max(1, r[2][k]) for r in runs] for k in runs[0][0] if k[0] == "p"
    }
    if own:
        extra["us_per_own_task"] = {
            k: {"min": round(min(v), 1), "median": round(statistics.median(v), 1)}
            for k, v in own.items()
        }
    return emit(
        case,
        pilot=name,
        tasks=n,
        us_per_task={
            k: {"min": round(min(v), 1), "median": round(statistics.median(v), 1)}
            for k, v in per.items()
        },
        tasks_per_s={"min": round(min(rates)), "median": round(statistics.median(rates))},
        **extra,
    )


def null_tasks(n: int) -> list:
    return [
        pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False) for _ in range(n)
    ]


def frame1(tmgr, n: int):
    def run():
        tasks = [tmgr.submit_tasks(d) for d in null_tasks(n)]
        bad = [s for s in tmgr.wait_tasks([t.uid for t in tasks], timeout=3600) if s != pf.DONE]
        assert not bad, bad[:3]
        return tasks

    return run


def bulk(tmgr, n: int):
    def run():
        tasks = tmgr.submit_tasks(null_tasks(n))
        bad = [s for s in tmgr.wait_tasks([t.uid for t in tasks], timeout=3600) if s != pf.DONE]
        assert not bad, bad[:3]
        return tasks

    return run


def pmi(tmgr, exe: str, n: int):
    def run():
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable=exe, ranks=2) for _ in range(n)])
        tmgr.wait_tasks([t.uid for t in tasks], timeout=3600)
        for t in tasks:
            lines = (t.stdout or "").splitlines()
            if t.state != pf.DONE or len(lines) != 2:
                raise SystemExit(f"{t.uid} ({t.state}): {t.reason!r} {t.stdout!r}"[:600])
        return tasks

    return run


def latency(tmgr, n: int) -> dict:
    """Median and min seconds of submit -> DONE of one task at a time (the first warms)."""
    times = []
    for _ in range(n + 1):
        t0 = time.monotonic()
        t = tmgr.submit_tasks(null_tasks(1)[0])
        assert t.wait(timeout=600) == pf.DONE, t.reason
        times.append(time.monotonic() - t0)
    return {
        "median_ms": round(1000 * statistics.median(times[1:]), 2),
        "min_ms": round(1000 * min(times[1:]), 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pmi", type=int, default=200)
    ap.add_argument("--latency", type=int, default=50)
    ap.add_argument("--local", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_subagents.", dir=os.environ.get("PILOTFISH_BENCH_DIR"))
    exe = ""
    if not a.local and a.pmi:
        exe = os.path.join(work, "mpi_hello")
        subprocess.run(
            [os.path.join(BIN, "mpicc"), "-O1", "-o", exe, os.path.join(PROGS, "mpi_hello.c")],
            check=True,
        )
    shape = (
        dict(resource="local", nodes=4, cores_per_node=16)
        if a.local
        else dict(resource="slurm", nodes=4)
    )
    rows = []
    for name, subagents in (("one", False), ("subs", True)):
        with pf.Session(path=os.path.join(work, f"session-{name}")) as s:
            pilot, tmgr, started = start_pilot(
                s, timeout=900, runtime="60m", partitions=2, subagents=subagents, **shape
            )
            procs = processes(pilot)
            emit("pilot", pilot=name, active_s=round(started, 1), processes=sorted(procs))
            tmgr.wait_tasks([t.uid for t in tmgr.submit_tasks(null_tasks(200))], timeout=600)
            for case, make in (("frame1", frame1), ("bulk", bulk)):
                runs = [measure(procs, make(tmgr, a.tasks)) for _ in range(a.repeats)]
                rows.append(summarize(case, name, a.tasks, runs))
            if exe:
                runs = [measure(procs, pmi(tmgr, exe, a.pmi)) for _ in range(a.repeats)]
                rows.append(summarize("pmi", name, a.pmi, runs))
            rows.append(emit("latency", pilot=name, tasks=a.latency, **latency(tmgr, a.latency)))
            pilot.cancel()
            pilot.wait(timeout=300)
    out = {"rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
