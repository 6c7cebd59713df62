"""One pilot, many nodes (issue 48): emulated node executors (agent/node_emulated.py) on this
machine, real agents -- how long they take to connect, what the agents cost idle and per task.

    .venv/bin/python bench/bench_scale.py --nodes 10000 [--subagents on|off|auto]
        [--partitions P] [--tasks 2000] [--repeats 5] [--idle 5] [--json]

The pilot: resource="local", --nodes declared nodes of --cores-per-node cores, every one an
emulated executor (launcher_options nodes.emulate: a step of processes of EMULATE_PER_PROC
nodes each per partition, speaking the real wire, CURVE keys derived from the step secret);
--subagents on: a root and a sub-agent per partition (--partitions, default one per 2,500
nodes, at least 2), off: one agent, auto: the pilot's own rule (>= 512 nodes).

Measured (CPU of a process: the sum over its threads of /proc/PID/task/TID/schedstat, ZeroMQ's
I/O threads included; min and median of --repeats):
  connected_s       the first executor step's start (NODES_START) -> the last node's hello
                    (NODE_UP), from the agents' events
  evictions         connections the node ports' doors closed over their caps (REFUSED
                    summaries); nodes_lost, second_refused: NODE_LOST events, second
                    connections refused (both 0 when the door lets them in once)
  *_idle_cores      CPU per second over --idle seconds, every executor up, nothing submitted
                    (heartbeats both ways, the node ports, the client link)
  *_us_per_task     --tasks /bin/true tasks, each in a submit call of its own (one task per
                    frame to the root, to a sub-agent, and at this rate about one per Spawn
                    frame to an emulated executor): CPU per task beyond the idle rate
  bulk_*            the same tasks in one submit call, and tasks/s
  at_20k_per_s      cores a 20,000 tasks/s stream would take at these costs: the root's
                    (idle + rate x us) and the sub-agents' together (--nodes' worth)
With --json: one JSON object on stdout (and nothing else there); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import pilotfish as pf  # noqa: E402
from pilotfish import _events as E  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402
from bench_subagents import cpu_ns, null_tasks  # noqa: E402

RATE = 20000  # tasks/s of the stream whose cores at_20k_per_s states


def say(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def events(sandbox: str) -> list:
    out = []
    for path in [os.path.join(sandbox, "agent.events")] + sorted(
        glob.glob(os.path.join(glob.escape(sandbox), "sub", "p*", "agent.events"))
    ):
        if os.path.exists(path):
            out += read_all_events(path)
    return out


def wait_connected(sandbox: str, n: int, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while True:
        evs = events(sandbox)
        ups = [e for e in evs if e[2] == E.NODE_UP]
        names = {e[3].split()[0] for e in ups}
        if len(names) >= n or time.monotonic() > end:
            break
        time.sleep(0.5)
    starts = [e[0] for e in evs if e[2] == E.NODES_START]
    evicted = 0
    for e in evs:
        if e[2] == E.REFUSED and (e[3] or "").startswith("node executor port:"):
            m = re.search(r"(\d+) unproven connections closed", e[3])
            evicted += int(m.group(1)) if m else 0
    return {
        "connected": len(names),
        "connected_s": round(max(e[0] for e in ups) - min(starts), 2) if ups and starts else None,
        "hellos": len(ups),
        "evictions": evicted,
        "nodes_lost": sum(1 for e in evs if e[2] == E.NODE_LOST),
        "second_refused": sum(
            1 for e in evs if e[2] == E.REFUSED and "second connection" in (e[3] or "")
        ),
    }


def processes(pilot, subs: int) -> dict[str, int]:
    """{'agent' | 'root' | 'p<i>': pid}: the pilot's agent, or its root and its sub-agents
    (subs of them expected: their SUBAGENT_UP events)."""
    with open(os.path.join(pilot.sandbox, "pilot.json")) as f:
        pid = json.load(f)["agent_pid"]
    if not subs:
        return {"agent": pid}
    end = time.monotonic() + 120
    while True:
        ups = [
            e
            for e in read_all_events(os.path.join(pilot.sandbox, "agent.events"))
            if e[2] == E.SUBAGENT_UP
        ]
        if len(ups) >= subs or time.monotonic() > end:
            break
        time.sleep(0.2)
    out = {"root": pid}
    for e in ups:
        name, sub_pid = e[3].split()[:2]
        out[name] = int(sub_pid)
    return out


def idle(procs: dict[str, int], seconds: float) -> dict[str, float]:
    c0 = {k: cpu_ns(p) for k, p in procs.items()}
    time.sleep(seconds)
    return {k: (cpu_ns(p) - c0[k]) / 1e9 / seconds for k, p in procs.items()}


def run_tasks(tmgr, procs: dict[str, int], n: int, bulk: bool, idle_s: float) -> tuple:
    """({process: CPU seconds beyond its idle rate}, wall seconds, DONE count)."""
    rate = idle(procs, idle_s)
    c1 = {k: cpu_ns(p) for k, p in procs.items()}
    t0 = time.monotonic()
    if bulk:
        tasks = tmgr.submit_tasks(null_tasks(n))
    else:
        tasks = [tmgr.submit_tasks(d) for d in null_tasks(n)]
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=3600)
    dt = time.monotonic() - t0
    c2 = {k: cpu_ns(p) for k, p in procs.items()}
    used = {k: (c2[k] - c1[k]) / 1e9 - rate[k] * dt for k in procs}
    return used, dt, sum(1 for s in states if s == pf.DONE)


def stats(values: list[float], digits: int = 1) -> dict:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits)}


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--cores-per-node", type=int, default=4)
    ap.add_argument("--subagents", choices=("on", "off", "auto"), default="auto")
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--connect-timeout", type=float, default=600.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    subs = {"on": True, "off": False, "auto": None}[a.subagents]
    parts = a.partitions or (1 if subs is False else max(2, -(-a.nodes // 2500)))
    work = tempfile.mkdtemp(prefix="bench_scale.", dir=os.environ.get("PILOTFISH_BENCH_DIR"))
    out: dict = {"nodes": a.nodes, "partitions": parts}
    with pf.Session(path=os.path.join(work, "s")) as s:
        t0 = time.time()
        desc = dict(
            resource="local",
            nodes=a.nodes,
            cores_per_node=a.cores_per_node,
            runtime="60m",
            partitions=parts,
            launcher_options={"nodes": {"emulate": True}},
        )
        if subs is not None:
            desc["subagents"] = subs
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(**desc))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=600) == pf.ACTIVE, pilot.reason
        out["active_s"] = round(time.time() - t0, 1)
        on = subs if subs is not None else a.nodes >= 512
        procs = processes(pilot, parts if on and parts > 1 else 0)
        out["subagents"] = len([k for k in procs if k.startswith("p")])
        say(f"ACTIVE in {out['active_s']} s; processes {sorted(procs)}")
        out.update(wait_connected(pilot.sandbox, a.nodes, a.connect_timeout))
        say(f"connected: {out['connected']} of {a.nodes} in {out['connected_s']} s")
        root = "root" if "root" in procs else "agent"
        out["root_rss_mb"] = rss_mb(procs[root])
        out["root_fds"] = fds(procs[root])
        out["subagent_rss_mb"] = {k: rss_mb(p) for k, p in procs.items() if k != root}
        out["subagent_fds"] = {k: fds(p) for k, p in procs.items() if k != root}
        time.sleep(2.0)  # (the hellos' aftermath)
        idles = [idle(procs, a.idle) for _ in range(a.repeats)]
        out["root_idle_cores"] = stats([i[root] for i in idles], 4)
        out["subagent_idle_cores"] = {
            k: stats([i[k] for i in idles], 4) for k in procs if k != root
        }
        say(f"idle: root {out['root_idle_cores']} subs {out['subagent_idle_cores']}")
        tasks = done = 0
        tmgr.wait_tasks([t.uid for t in tmgr.submit_tasks(null_tasks(200))], timeout=600)
        for case, bulk in (("frame1", False), ("bulk", True)):
            runs = []
            for _ in range(a.repeats):
                used, dt, ok = run_tasks(tmgr, procs, a.tasks, bulk, min(a.idle, 3.0))
                runs.append((used, dt))
                tasks += a.tasks
                done += ok
            key = "" if case == "frame1" else "bulk_"
            out[f"{key}root_us_per_task"] = stats([1e6 * u[root] / a.tasks for u, _ in runs])
            sub_us = [
                sum(1e6 * u[k] / a.tasks for k in u if k != root) for u, _ in runs
            ]  # (all sub-agents together, per task of the run)
            out[f"{key}subagent_us_per_task"] = stats(sub_us) if out["subagents"] else None
            out[f"{key}tasks_per_s"] = stats([a.tasks / dt for _, dt in runs], 0)
            say(f"{case}: root {out[f'{key}root_us_per_task']} us/task, subs {sub_us}")
        out["tasks"], out["tasks_done"] = tasks, done
        r_idle = out["root_idle_cores"]["median"]
        r_us = out["root_us_per_task"]["median"]
        out["at_20k_per_s"] = {"root_cores": round(r_idle + RATE * r_us / 1e6, 2)}
        if out["subagents"]:
            s_idle = sum(v["median"] for v in out["subagent_idle_cores"].values())
            s_us = out["subagent_us_per_task"]["median"]
            out["at_20k_per_s"]["subagent_cores"] = round(s_idle + RATE * s_us / 1e6, 2)
        pilot.cancel()
        pilot.wait(timeout=300)
    tail = wait_connected(pilot.sandbox, 0, 0)
    out["evictions"] = tail["evictions"]
    out["nodes_lost"] = tail["nodes_lost"]
    out["second_refused"] = tail["second_refused"]
    print(json.dumps(out) if a.json else json.dumps(out, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
