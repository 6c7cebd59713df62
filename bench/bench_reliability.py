"""Reliability benchmarks: soak with kills and resumes, retries accounting, cost of safety.

    python bench/bench_reliability.py soak --tasks 100000
        `pilotfish run`-style client (a subprocess) on a local pilot; the client is SIGKILLed
        twice and the agent once (at 20 %, 45 % and 70 % of the tasks run), each time resumed
        with Session(resume=True). Every task appends its uid to a file: the count of lines
        per uid is the count of executions.
    python bench/bench_reliability.py retries --tasks 10000
        10 % of the tasks fail their first attempt; retries=3. All must end DONE, and the
        executions must be exactly tasks + failures.
    python bench/bench_reliability.py cost --tasks 20000 --rounds 2
        null tasks (outputs discarded) with journal + CURVE on vs off, ABBA in one run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402

CLIENT = textwrap.dedent("""
    import sys, pilotfish as pf
    path, n, resume, side = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4]
    s = pf.Session(path=path, resume=resume, heartbeat_s=1.0, client_timeout=120)
    pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="2h"))
    tm = pf.TaskManager(s)
    tm.add_pilots(pilot)
    tasks = tm.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"echo $PILOTFISH_TASK_UID >> {side}"],
        stdout=False, stderr=False) for _ in range(n)])
    print("submitted", pilot.uid, flush=True)
    tm.wait_tasks()
    print("done", sum(t.state == "DONE" for t in tasks), flush=True)
    s.close()
""")


def _lines(side: str) -> int:
    try:
        with open(side, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _wait_for(side: str, k: int, proc) -> None:
    while _lines(side) < k and proc.poll() is None:
        time.sleep(0.05)


def soak(n: int) -> dict:
    d = tempfile.mkdtemp(prefix="pf-soak-")
    path, side = os.path.join(d, "session"), os.path.join(d, "side")
    start = time.time()
    log = []

    def client(mode):
        return subprocess.Popen([sys.executable, "-c", CLIENT, path, str(n), mode, side],
                                stdout=subprocess.PIPE, stderr=open(os.path.join(d, f"client-{mode}-{time.time():.3f}.err"), "w"), text=True)

    c = client("first")
    c.stdout.readline()
    for frac, victim in ((0.20, "client"), (0.45, "client"), (0.70, "agent")):
        _wait_for(side, int(frac * n), c)
        if victim == "client":
            c.kill()
            c.wait()
        else:
            pid = json.load(open(os.path.join(path, _live_pilot(path), "pilot.json")))["agent_pid"]
            os.kill(pid, signal.SIGKILL)
            c.communicate(timeout=600)
        log.append((victim, _lines(side), round(time.time() - start, 1)))
        c = client("resume")
        log.append(("resumed on", c.stdout.readline().split()[-1]))
    out, _ = c.communicate(timeout=3600)
    runs = collections.Counter(open(side).read().split())
    dup = {u: k for u, k in runs.items() if k > 1}
    return {"tasks": n, "final_done": int(out.split()[-1]), "distinct_ran": len(runs),
            "executions": sum(runs.values()), "duplicates": len(dup), "kills": log,
            "seconds": round(time.time() - start, 1), "session": path}


def _live_pilot(path: str) -> str:
    pilots = sorted(p for p in os.listdir(path) if p.startswith("pilot."))
    return pilots[-1]


def retries(n: int) -> dict:
    d = tempfile.mkdtemp(prefix="pf-retries-")
    side, marks = os.path.join(d, "side"), os.path.join(d, "marks")
    os.makedirs(marks)
    t0 = time.time()
    with pf.Session(path=os.path.join(d, "s")) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="2h", nodes=2,
                                                                        cores_per_node=32))
        tm = pf.TaskManager(s)
        tm.add_pilots(pilot)
        descs = []
        for i in range(n):
            fail = (i % 10 == 0)  # 10 %: the first attempt fails
            script = f"echo $PILOTFISH_TASK_UID >> {side}"
            if fail:
                script += f"; [ -e {marks}/{i} ] || {{ touch {marks}/{i}; exit 7; }}"
            descs.append(pf.TaskDescription(executable="/bin/sh", arguments=["-c", script],
                                            retries=3, stdout=False, stderr=False))
        tasks = tm.submit_tasks(descs)
        tm.wait_tasks()
        done = sum(t.state == pf.DONE for t in tasks)
        retried = sum(1 for t in tasks for st, _ in t.history if st == "retry")
    executions = _lines(side)
    return {"tasks": n, "done": done, "retry_events": retried, "executions": executions,
            "expected_executions": n + (n + 9) // 10, "seconds": round(time.time() - t0, 1)}


def null_rate(n: int, safe: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s"), secure=safe, journal=safe) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                runtime="2h", nodes=4, cores_per_node=64))
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
            descs = [pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                     for _ in range(n)]
            t0 = time.time()
            tm.submit_tasks(descs)
            tm.wait_tasks()
            dt = time.time() - t0
    return {"safe": safe, "rate": n / dt}


def cost(n: int, rounds: int) -> dict:
    rates = {True: [], False: []}
    for _ in range(rounds):
        for safe in (True, False, False, True):  # ABBA: drift cancels
            rates[safe].append(null_rate(n, safe)["rate"])
    on, off = sum(rates[True]) / len(rates[True]), sum(rates[False]) / len(rates[False])
    return {"tasks": n, "rate_on": round(on), "rate_off": round(off), "ratio_on_off": round(on / off, 3),
            "runs_on": [round(r) for r in rates[True]], "runs_off": [round(r) for r in rates[False]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["soak", "retries", "cost"])
    ap.add_argument("--tasks", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.what == "soak":
        r = soak(a.tasks or 100_000)
    elif a.what == "retries":
        r = retries(a.tasks or 10_000)
    else:
        r = cost(a.tasks or 20_000, a.rounds)
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
