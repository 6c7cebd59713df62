"""End-to-end benchmarks of the runtime, each side by side with its baseline in one run.

    .venv/bin/python bench/bench_e2e.py [--tasks 10000] [--big 100000] [--peers] [--json OUT]

Cases (issue 5 "Measure" and issue 4 "profiling on vs off"):
  floor       bench/spawn_floor (C: posix_spawn + waitpid of /bin/true, 1 and 2 in flight)
  null        N /bin/true tasks through Session -> local pilot (emulated 256 cores) -> DONE,
              outputs discarded; tasks/s and the ratio to the floor
  capture     (--capture-rounds R / --only-capture) the same with the default captured
              stdout/stderr vs discarded, ABBA rounds in one run, each as a share of the floor
              measured just before it (medians)
  profile     the same with profiling on and off, interleaved rounds; throughput ratio, and
              the profiler's own CPU per task (its event pattern replayed in one process)
              as a share of a task's CPU cost with profiling off
  roundtrip   one task at a time on an idle pilot: submit -> DONE seen by the client (median)
  ready       pilot submit -> ACTIVE
  memory      client + agent RSS per queued task with --big tasks queued
  concurrent  10,000 `sleep` tasks running at once on an emulated 10,000-core pilot: all
              complete, the agent's open fds stay flat
  peers       the null workload through HyperQueue (PyPI, LocalCluster) and Parsl HTEX, in
              their own environment (bench/peers/setup.sh), same N
"""

from __future__ import annotations

import argparse
import json
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402
from _pilots import start_pilot  # noqa: E402


@functools.cache
def _floor_exe() -> str:
    src = os.path.join(HERE, "spawn_floor", "spawn_floor.c")
    exe = os.path.join(tempfile.gettempdir(), "pilotfish_spawn_floor")
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


def floor(n: int = 3000) -> dict:
    out = subprocess.run([_floor_exe(), str(n)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _pilot(session, **shape):
    return start_pilot(session, runtime="2h", **shape)


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds (CPU time is far less noisy than wall time here)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def null_tasks(n: int, profile: bool = True, base: str | None = None,
               capture: bool = False) -> dict:
    import resource

    with tempfile.TemporaryDirectory(dir=base) as d:
        with pf.Session(path=os.path.join(d, "s"), profile=profile) as s:
            pilot, tmgr, ready = _pilot(s, nodes=4, cores_per_node=64)
            agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
            descs = [pf.TaskDescription(executable="/bin/true") if capture else
                     pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                     for _ in range(n)]
            r0, a0 = resource.getrusage(resource.RUSAGE_SELF), _cpu_s(agent_pid)
            t0 = time.time()
            tasks = tmgr.submit_tasks(descs)
            tmgr.wait_tasks()
            dt = time.time() - t0
            r1, a1 = resource.getrusage(resource.RUSAGE_SELF), _cpu_s(agent_pid)
            done = sum(t.state == pf.DONE for t in tasks)
        events = _task_events(s.path) if profile else 0
    client = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"tasks": n, "done": done, "seconds": dt, "rate": n / dt, "pilot_ready_s": ready,
            "profile": profile, "capture": capture, "agent_cpu_us_per_task": 1e6 * (a1 - a0) / n,
            "client_cpu_us_per_task": 1e6 * client / n, "events_per_task": events / n}


def _task_events(session_dir: str) -> int:
    """Events about tasks in a session's event files (client and agent)."""
    from pilotfish._events import read_events

    count = 0
    for root, _, files in os.walk(session_dir):
        for f in files:
            if f.endswith(".events"):
                count += sum(sum(e[1].startswith("task.") for e in batch)
                             for batch in read_events(os.path.join(root, f)))
    return count


def profiler_cpu(events_per_task: float, n: int = 200_000, batch: int = 256) -> dict:
    """The profiler's own CPU cost per task, in one process and without a pilot: build the
    event tuples of `n` tasks batch by batch, as the client and agent do, hand them to an
    EventWriter, and let it encode and write them. CPU time (process_time), so the share
    of a task's CPU cost it gives does not depend on how busy the machine is."""
    from pilotfish._events import EventWriter

    k = max(1, round(events_per_task))
    names = [f"state_{i}" for i in range(k)]
    uids = [f"task.{i:06d}" for i in range(batch)]
    best = float("inf")
    with tempfile.TemporaryDirectory() as d:
        for rep in range(3):  # best of 3: the cost itself, not the neighbours
            w = EventWriter(os.path.join(d, f"{rep}.events"))
            c0 = time.process_time()
            for _ in range(n // batch):
                now = time.time()
                for name in names:
                    w.record_many([(now, uid, name, None) for uid in uids])
                w.maybe_flush()
            w.close()
            best = min(best, time.process_time() - c0)
    return {"events_per_task": k, "us_per_task": 1e6 * best / n}


def roundtrip(k: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pilot, tmgr, ready = _pilot(s, nodes=1)
            lat = []
            for _ in range(k):
                t0 = time.perf_counter()
                t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False))
                t.wait()
                lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"n": k, "median_ms": 1e3 * statistics.median(lat), "p90_ms": 1e3 * lat[int(0.9 * k)],
            "pilot_ready_s": ready}


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory(n: int) -> dict:
    """RSS growth of client and agent with n tasks queued behind a blocker."""
    import gc

    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pilot, tmgr, _ = _pilot(s, nodes=1, cores_per_node=1)
            agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
            blocker = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["600"]))
            blocker.wait(state=pf.EXECUTING)
            gc.collect()
            c0, a0 = _rss_kib(os.getpid()), _rss_kib(agent_pid)
            descs = [pf.TaskDescription(executable="/bin/true", arguments=["x"]) for _ in range(n)]
            tasks = tmgr.submit_tasks(descs)
            del descs
            tmgr.wait_tasks([t.uid for t in tasks[-1:]], state=pf.AGENT_SCHEDULING, timeout=300)
            time.sleep(1.0)
            gc.collect()
            c1, a1 = _rss_kib(os.getpid()), _rss_kib(agent_pid)
            tmgr.cancel_tasks()
    per = 1024 * ((c1 - c0) + (a1 - a0)) / n
    return {"queued": n, "client_kib": c1 - c0, "agent_kib": a1 - a0, "bytes_per_task": per}


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def concurrent(n: int = 10_000, seconds: float = 20.0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pilot, tmgr, _ = _pilot(s, nodes=100, cores_per_node=n // 100)
            agent_pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
            fd0 = _fds(agent_pid)
            descs = [pf.TaskDescription(executable="/bin/sleep", arguments=[str(seconds)],
                                        stdout=False, stderr=False) for _ in range(n)]
            t0 = time.time()
            tasks = tmgr.submit_tasks(descs)
            fd_max, running_max = fd0, 0
            while True:
                fd_max = max(fd_max, _fds(agent_pid))
                running_max = max(running_max, tmgr.counts[pf.EXECUTING])
                if tmgr.wait_tasks(timeout=0.5).count(pf.DONE) + tmgr.counts[pf.FAILED] >= n:
                    break
                if time.time() - t0 > 600:
                    break
            states = [t.state for t in tasks]
            reasons = {t.reason for t in tasks if t.state != pf.DONE}
    return {"tasks": n, "done": states.count(pf.DONE), "max_running": running_max,
            "agent_fds_start": fd0, "agent_fds_max": fd_max, "seconds": time.time() - t0,
            "failures": sorted(r for r in reasons if r)[:3]}


def peers(n: int) -> dict:
    venv = os.path.join(HERE, "peers", ".venv", "bin", "python")
    if not os.path.exists(venv):
        subprocess.run([os.path.join(HERE, "peers", "setup.sh")], check=True)
    out = {}
    for name in ("hq_null.py", "parsl_null.py"):
        r = subprocess.run([venv, os.path.join(HERE, "peers", name), str(n)], capture_output=True,
                           text=True, timeout=1800)
        lines = r.stdout.strip().splitlines()
        out[name.split("_")[0]] = json.loads(lines[-1]) if r.returncode == 0 and lines else {
            "error": r.stderr[-500:]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=0, help="also run null tasks with this many")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--concurrent", type=int, default=0)
    ap.add_argument("--memory", type=int, default=0)
    ap.add_argument("--profile-rounds", type=int, default=0)
    ap.add_argument("--only-profile", action="store_true", help="floor, null and profile only")
    ap.add_argument("--capture-rounds", type=int, default=0,
                    help="null tasks with the default (captured) outputs vs discarded, ABBA")
    ap.add_argument("--only-capture", action="store_true", help="floor and capture only")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    res: dict = {}
    res["floor"] = floor()
    print("floor", res["floor"], flush=True)
    if a.only_profile:
        a.big = a.memory = a.concurrent = 0
        a.peers = False
    if a.capture_rounds or a.only_capture:
        cap, dis, cap_fl, dis_fl, floors = [], [], [], [], []
        for i in range(a.capture_rounds or 2):  # ABBA: drift in machine load cancels out
            for capture in ((True, False) if i % 2 == 0 else (False, True)):
                # the floor moves by +-15 % over minutes here: each run against its own,
                # measured just before it
                fl = floor()["tasks_per_s_2"]
                floors.append(fl)
                rate = null_tasks(a.tasks, capture=capture)["rate"]
                (cap if capture else dis).append(rate)
                (cap_fl if capture else dis_fl).append(rate / fl)
        med = statistics.median
        res["capture"] = {"rate_captured": med(cap), "rate_discarded": med(dis),
                          "captured_over_floor": med(cap_fl), "discarded_over_floor": med(dis_fl),
                          "captured_over_discarded": med(cap) / med(dis),
                          "runs_captured": [round(r) for r in cap],
                          "runs_discarded": [round(r) for r in dis],
                          "runs_captured_over_floor": [round(r, 3) for r in cap_fl],
                          "runs_discarded_over_floor": [round(r, 3) for r in dis_fl],
                          "floors": floors}
        print("capture", res["capture"], flush=True)
        if a.only_capture:
            print(json.dumps(res))
            return
    res["null"] = null_tasks(a.tasks)
    res["null"]["ratio_to_floor_2"] = res["null"]["rate"] / res["floor"]["tasks_per_s_2"]
    res["null"]["ratio_to_floor_1"] = res["null"]["rate"] / res["floor"]["tasks_per_s_1"]
    print("null", res["null"], flush=True)
    if a.big:
        res["null_big"] = null_tasks(a.big)
        res["null_big"]["ratio_to_floor_2"] = res["null_big"]["rate"] / res["floor"]["tasks_per_s_2"]
        print("null_big", res["null_big"], flush=True)
    res["roundtrip"] = roundtrip()
    print("roundtrip", res["roundtrip"], flush=True)
    if a.profile_rounds:
        on, off = [], []
        for i in range(a.profile_rounds):  # ABBA order: drift in machine load cancels out
            for profile in ((True, False) if i % 2 == 0 else (False, True)):
                (on if profile else off).append(null_tasks(a.tasks // 2, profile=profile))
        med = statistics.median
        res["profile"] = {
            "rate_on": med(r["rate"] for r in on), "rate_off": med(r["rate"] for r in off),
            "rate_on_over_off": med(r["rate"] for r in on) / med(r["rate"] for r in off),
            "cpu_us_on": med(r["agent_cpu_us_per_task"] + r["client_cpu_us_per_task"] for r in on),
            "cpu_us_off": med(r["agent_cpu_us_per_task"] + r["client_cpu_us_per_task"] for r in off),
            "rounds": a.profile_rounds}
        res["profile"]["cpu_on_over_off"] = res["profile"]["cpu_us_on"] / res["profile"]["cpu_us_off"]
        cost = profiler_cpu(med(r["events_per_task"] for r in on))
        res["profile"]["profiler_cpu"] = cost
        res["profile"]["profiler_share_of_cpu"] = cost["us_per_task"] / res["profile"]["cpu_us_off"]
        print("profile", res["profile"], flush=True)
    if a.memory:
        res["memory"] = memory(a.memory)
        print("memory", res["memory"], flush=True)
    if a.concurrent:
        res["concurrent"] = concurrent(a.concurrent)
        print("concurrent", res["concurrent"], flush=True)
    if a.peers:
        res["peers"] = peers(a.tasks)
        for k, v in res["peers"].items():
            if "rate" in v:
                v["pilotfish_over_peer"] = res["null"]["rate"] / v["rate"]
        print("peers", res["peers"], flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
