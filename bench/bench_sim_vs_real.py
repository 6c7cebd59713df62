"""Simulation vs reality at scale (issue 48): ONE workload run both ways in one run -- a real
local pilot of emulated node executors, and the library path of `pilotfish simulate` (a
simulated pilot of the same shape, with the CPU model) -- tasks/s and RU side by side.

    .venv/bin/python bench/bench_sim_vs_real.py [--fit FILE] [--model FILE] [--nodes 1024]
        [--cores 16] [--tasks 60000] [--duration 0.5] [--agents one subs] [--partitions 2]
        [--repeats 3] [--json]

Real: resource="local", --nodes declared nodes of --cores cores, every one an emulated executor
(launcher_options nodes.emulate: a Spawn is answered by an exit after the task's `duration`);
`one`: one agent (subagents=False, one partition), `subs`: a root and a sub-agent per
partition (--partitions). The workload --repeats times on the pilot: `best` is the run of the
most tasks/s (the least disturbed by the rest of this shared 2-core machine: the client, the
executors and other work share its cores), `median` the median run. Simulated:
resource="simulated", the same nodes, cores and partitions, single-node tasks through the node
executors' model with no start-up or latency, the CPU model with --model FILE's "cpu" costs
(else the defaults of _cpu_costs.py) and cpu.subagents as the real pilot. The same tasks both
ways: --tasks one-core tasks of --duration s in one submit call (Submit frames of
submit.SUBMIT_BATCH tasks).

--fit FILE: first fit this machine's CPU costs (fit(): the real agent's CPU per process on
pilots of --fit-small and --fit-nodes nodes, out of sample: not the compared workload), write
them as FILE's "cpu" (a launch model: `pilotfish simulate --launch-model FILE`), and simulate
with them.

Both sides are measured by one function of the pilot's agent events (the agent's, or the
root's and every sub-agent's), measure(): TTX = first AGENT_SCHEDULING -> last final state;
tasks/s = tasks / TTX; RU = cores running a payload (the node's spawn -> its exit) / (pilot
cores x TTX), the payload share `pilotfish simulate` prints; held = cores x (placed ->
released) / (pilot cores x TTX), bench_simulation.py's; the mean of each stage of a task.
Real runs also give each process's CPU per task beyond its idle rate (its threads' schedstat,
as bench_subagents.py): the agent's or root's and sub-agents', the client's, the executors'.
With --json: one JSON object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import pilotfish as pf  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402
from bench_scale import processes, wait_connected  # noqa: E402
from bench_subagents import cpu_ns  # noqa: E402


def say(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def agent_events(sandbox: str) -> list:
    """The events of a pilot's agent processes: the agent's (or root's), each sub-agent's."""
    paths = [os.path.join(sandbox, "agent.events")]
    paths += sorted(glob.glob(os.path.join(glob.escape(sandbox), "sub", "p*", "agent.events")))
    out = []
    for p in paths:
        if os.path.exists(p):
            out += read_all_events(p)
    return out


STAGES = (  # (name, from event, to event): the mean of each in seconds
    ("arrive_to_placed", "AGENT_SCHEDULING", "schedule_ok"),
    ("placed_to_running", "schedule_ok", "running"),
    ("running_to_exit", "running", "exec_stop"),
    ("exit_to_released", "exec_stop", "unschedule"),
)


def measure(sandbox: str, cores_of: dict[str, int], cores_total: int) -> dict:
    """tasks/s, RU and held (module docstring), and the mean of each of a task's STAGES,
    from a pilot's agent events. A payload runs from its node's spawn (a real pilot's
    exec_ok: the time the executor spawned it; a simulated one's launch_ok) to its exit
    (exec_stop)."""
    first: dict[tuple[str, str], float] = {}
    sim = False
    for t, uid, name, _ in agent_events(sandbox):
        if uid in cores_of:
            if name == "launch_ok":
                sim = True
            first.setdefault((uid, name), t)
    running = "launch_ok" if sim else "exec_ok"
    for (u, n), t in list(first.items()):
        if n == running:
            first[(u, "running")] = t
    arrive = [t for (u, n), t in first.items() if n == "AGENT_SCHEDULING"]
    final = [t for (u, n), t in first.items() if n in ("DONE", "FAILED", "CANCELED")]
    ttx = max(final) - min(arrive)
    held = ran = 0.0
    for u, c in cores_of.items():
        s, e = first.get((u, "schedule_ok")), first.get((u, "unschedule"))
        if s is not None and e is not None:
            held += c * (e - s)
        s, e = first.get((u, "running")), first.get((u, "exec_stop"))
        if s is not None and e is not None:
            ran += c * (e - s)
    stages = {}
    for name, a, b in STAGES:
        d = [first[(u, b)] - first[(u, a)] for u in cores_of if (u, a) in first and (u, b) in first]
        stages[name] = round(sum(d) / len(d), 4) if d else None
    return {
        "ttx_s": round(ttx, 3),
        "tasks_per_s": round(len(final) / ttx, 1),
        "ru": round(ran / (cores_total * ttx), 4),
        "held": round(held / (cores_total * ttx), 4),
        "final": len(final),
        "stages_s": stages,
    }


def descendants(pid: int) -> list[int]:
    """Every live process under pid (its children, theirs, ...), from /proc."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def descriptions(n: int, duration: float, cores: int = 1) -> list:
    return [
        pf.TaskDescription(
            executable="payload",
            cores_per_rank=cores,
            duration=duration,
            stdout=False,
            stderr=False,
        )
        for _ in range(n)
    ]


def real_pilot(s, nodes: int, cores: int, parts: int, subs: bool):
    """(pilot, tmgr, {process: pid}) of a local pilot of emulated executors, all of them up."""
    pilot = pf.PilotManager(s).submit_pilots(
        pf.PilotDescription(
            resource="local",
            nodes=nodes,
            cores_per_node=cores,
            runtime="60m",
            partitions=parts,
            subagents=subs,
            launcher_options={"nodes": {"emulate": True}},
        )
    )
    tmgr = pf.TaskManager(s)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=600) == pf.ACTIVE, pilot.reason
    procs = processes(pilot, parts if subs else 0)
    conn = wait_connected(pilot.sandbox, nodes, 600)
    assert conn["connected"] == nodes, conn
    time.sleep(2.0)  # (the hellos' aftermath)
    return pilot, tmgr, procs


def idle_rates(procs: dict[str, int], seconds: float) -> dict[str, float]:
    c0 = {k: cpu_ns(p) for k, p in procs.items()}
    time.sleep(seconds)
    return {k: (cpu_ns(p) - c0[k]) / 1e9 / seconds for k, p in procs.items()}


def run_cpu(tmgr, procs: dict[str, int], idle: dict, n: int, duration: float, cores: int):
    """({process: CPU s per task beyond its idle rate}, wall s): n tasks of `cores` cores in
    one submit call."""
    c1 = {k: cpu_ns(p) for k, p in procs.items()}
    t0 = time.monotonic()
    hs = tmgr.submit_tasks(descriptions(n, duration, cores))
    bad = [s for s in tmgr.wait_tasks([h.uid for h in hs], timeout=3600) if s != pf.DONE]
    assert not bad, bad[:3]
    wall = time.monotonic() - t0
    c2 = {k: cpu_ns(p) for k, p in procs.items()}
    return {k: ((c2[k] - c1[k]) / 1e9 - idle.get(k, 0.0) * wall) / n for k in procs}, wall


def machine_ns() -> int:
    """CPU ns this machine's cores spent busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) * 10**9 // os.sysconf("SC_CLK_TCK")


def cpu_of(procs: dict[str, int], others: list[int]) -> dict[str, int]:
    """CPU ns of each agent process, of the client (this process), of the emulated
    executors' processes together, and of the whole machine."""
    out = {k: cpu_ns(p) for k, p in procs.items()}
    out["client"] = cpu_ns(os.getpid())
    out["executors"] = sum(cpu_ns(p) for p in others)
    out["machine"] = machine_ns()
    return out


def real(a, subs: bool, work: str) -> dict:
    """--repeats runs of the workload on one real pilot, each measured (tasks/s, RU, held,
    stages; each process's CPU per task beyond its idle rate); `best`: the run of the most
    tasks/s (the least disturbed by the rest of the machine), `median`: the median run's."""
    parts = a.partitions if subs else 1
    runs = []
    with pf.Session(path=os.path.join(work, f"real-{'subs' if subs else 'one'}")) as s:
        pilot, tmgr, procs = real_pilot(s, a.nodes, a.cores, parts, subs)
        say(f"real {'subs' if subs else 'one'}: {a.nodes} nodes up, {sorted(procs)}")
        agents = set(procs.values())
        root = procs.get("root", procs.get("agent"))
        others = [p for p in descendants(root) if p not in agents]  # the emulated executors
        for _ in range(a.repeats):
            c0 = cpu_of(procs, others)
            time.sleep(a.idle)
            c1 = cpu_of(procs, others)
            idle = {k: (c1[k] - c0[k]) / 1e9 / a.idle for k in c0}
            t0 = time.monotonic()
            hs = tmgr.submit_tasks(descriptions(a.tasks, a.duration))
            states = tmgr.wait_tasks([h.uid for h in hs], timeout=3600)
            wall = time.monotonic() - t0
            c2 = cpu_of(procs, others)
            bad = [s for s in states if s != pf.DONE]
            assert not bad, bad[:3]
            cpu = {k: (c2[k] - c1[k]) / 1e9 for k in c0}
            ours = sum(v for k, v in cpu.items() if k != "machine")
            runs.append(
                (
                    [h.uid for h in hs],
                    {
                        "wall_s": round(wall, 2),
                        # cores the rest of the machine kept busy meanwhile (other work)
                        "others_cores": round(max(0.0, cpu.pop("machine") - ours) / wall, 2),
                        "idle_cores": {k: round(v, 4) for k, v in idle.items() if k != "machine"},
                        "us_per_task": {
                            k: round(1e6 * (cpu[k] - idle[k] * wall) / a.tasks, 1) for k in cpu
                        },
                    },
                )
            )
        pilot.cancel()
        pilot.wait(timeout=300)
        ms = []
        for uids, extra in runs:
            ms.append(
                {**measure(pilot.sandbox, dict.fromkeys(uids, 1), a.nodes * a.cores), **extra}
            )
    by_rate = sorted(ms, key=lambda m: m["tasks_per_s"])
    return {"best": by_rate[-1], "median": by_rate[len(by_rate) // 2], "runs": ms}


def sim_pilot(s, nodes: int, cores: int, parts: int, model: dict):
    pilot = pf.PilotManager(s).submit_pilots(
        pf.PilotDescription(
            resource="simulated",
            nodes=nodes,
            cores_per_node=cores,
            runtime="10000h",
            launcher="direct",
            partitions=parts,
            launch_model=model,
            node_executors=True,
        )
    )
    tmgr = pf.TaskManager(s)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def sim_model(model_file: str | None, subs: bool) -> dict:
    """The launch model of the simulated side: the file's (or the defaults), node executors
    that start at once and launch without latency (as the emulated ones), cpu.subagents."""
    model = json.load(open(model_file)) if model_file else {}
    model["nodes"] = {
        **model.get("nodes", {}),
        "startup_s": 0.0,
        "startup_per_node_s": 0.0,
        "latency_s": 0.0,
    }
    model["cpu"] = {**model.get("cpu", {}), "subagents": subs}
    return model


def sim_counts(sandbox: str) -> dict:
    """What the simulated agent's CPU model charged, all tasks ended (its last log line)."""
    from pilotfish.agent.simulation import CPU_LOG

    last = None
    with open(os.path.join(sandbox, "agent.log")) as f:
        for line in f:
            if CPU_LOG in line:
                last = line
    assert last is not None, f"no {CPU_LOG!r} in {sandbox}/agent.log"
    return json.loads(last.split(CPU_LOG, 1)[1])


def simulated(a, subs: bool, work: str) -> dict:
    parts = a.partitions if subs else 1
    path = tempfile.mkdtemp(prefix=f"sim-{'subs' if subs else 'one'}.", dir=work)
    with pf.Session(path=path) as s:
        pilot, tmgr = sim_pilot(s, a.nodes, a.cores, parts, sim_model(a.model, subs))
        t0 = time.monotonic()
        hs = tmgr.submit_tasks(descriptions(a.tasks, a.duration))
        states = tmgr.wait_tasks([h.uid for h in hs], timeout=3600)
        wall = time.monotonic() - t0
        bad = [s for s in states if s != pf.DONE]
        assert not bad, bad[:3]
        pilot.cancel()
        pilot.wait(timeout=60)
        m = measure(pilot.sandbox, {h.uid: 1 for h in hs}, a.nodes * a.cores)
        m["model_cpu_s"] = sim_counts(pilot.sandbox)["busy_s"]
    m["wall_s"] = round(wall, 2)
    return m


def fit(a, work: str) -> dict:
    """The CPU costs of this machine's real agent (_cpu_costs.fit_cpu): its idle CPU on
    pilots of --fit-small and --fit-nodes emulated nodes of --fit-cores cores; on the
    latter, its CPU per task of two workloads in one submit call each, --fit-bulk one-core
    tasks (many tasks a frame) and --fit-whole tasks of a whole node (a frame or more per
    task), both of --fit-duration s; the frames per task of each as the CPU model counts them
    (the same workload simulated). Each measurement: the median of --repeats. Written to
    --fit FILE as its "cpu" (the file's other keys kept): the simulation's costs when given
    that launch model."""
    from pilotfish._cpu_costs import fit_cpu
    from pilotfish.agent.node_link import BEATS_PER_S

    works = (("bulk", a.fit_bulk, 1), ("whole", a.fit_whole, a.fit_cores))
    idle_pts, runs, seen = [], [], {}
    for nodes in (a.fit_small, a.fit_nodes):
        with pf.Session(path=os.path.join(work, f"fit-real-{nodes}")) as s:
            pilot, tmgr, procs = real_pilot(s, nodes, a.fit_cores, 1, False)
            idles = [idle_rates(procs, a.idle) for _ in range(a.repeats)]
            idle = {"agent": statistics.median(i["agent"] for i in idles)}
            idle_pts.append((min(nodes, BEATS_PER_S), idle["agent"]))
            if nodes == a.fit_nodes:
                tmgr.wait_tasks([h.uid for h in tmgr.submit_tasks(descriptions(200, 0.001))])
                for name, n, cores in works:
                    seen[name] = statistics.median(
                        run_cpu(tmgr, procs, idle, n, a.fit_duration, cores)[0]["agent"]
                        for _ in range(a.repeats)
                    )
            pilot.cancel()
            pilot.wait(timeout=300)
        say(f"fit: {nodes} nodes idle {idle['agent']:.4f} cores")
    for name, n, cores in works:
        with pf.Session(path=os.path.join(work, f"fit-sim-{name}")) as s:
            pilot, tmgr = sim_pilot(s, a.fit_nodes, a.fit_cores, 1, sim_model(None, False))
            hs = tmgr.submit_tasks(descriptions(n, a.fit_duration, cores))
            tmgr.wait_tasks([h.uid for h in hs])
            pilot.cancel()
            pilot.wait(timeout=60)
            c = sim_counts(pilot.sandbox)
        runs.append((c["frames"] / c["launched"], seen[name]))
        say(f"fit: {name} {1e6 * seen[name]:.1f} us/task, {runs[-1][0]:.3f} frames/task")
    cpu = fit_cpu(idle_pts, runs)
    model = json.load(open(a.fit)) if os.path.exists(a.fit) else {}
    model["cpu"] = {**model.get("cpu", {}), **{k: round(v, 9) for k, v in cpu.items()}}
    with open(a.fit, "w") as f:
        json.dump(model, f, indent=1, sort_keys=True)
    return {"idle": idle_pts, "runs": runs, "cpu": model["cpu"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--tasks", type=int, default=60000)
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--agents", nargs="+", choices=("one", "subs"), default=["one", "subs"])
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--idle", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="real runs of the workload")
    ap.add_argument("--model", default=None)
    ap.add_argument("--fit", default=None, help="fit the CPU costs first, into this file")
    ap.add_argument("--fit-small", type=int, default=16)
    ap.add_argument("--fit-nodes", type=int, default=256)
    ap.add_argument("--fit-cores", type=int, default=16)
    ap.add_argument("--fit-bulk", type=int, default=20000)
    ap.add_argument("--fit-whole", type=int, default=3000)
    ap.add_argument("--fit-duration", type=float, default=0.2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_sim_vs_real.", dir=os.environ.get("PILOTFISH_BENCH_DIR"))
    out: dict = {
        "nodes": a.nodes,
        "cores": a.cores,
        "tasks": a.tasks,
        "duration_s": a.duration,
        "model": a.model or "defaults",
        "rows": [],
    }
    if a.fit:
        out["fit"] = fit(a, work)
        a.model = out["model"] = a.fit
    for agents in a.agents:
        subs = agents == "subs"
        r = real(a, subs, work)
        say(f"real {agents}: {[(m['tasks_per_s'], m['ru']) for m in r['runs']]}")
        sm = simulated(a, subs, work)
        say(f"sim {agents}: {sm['tasks_per_s']}, {sm['ru']}")
        row = {"agents": agents, "partitions": a.partitions if subs else 1, "real": r, "sim": sm}
        for which in ("best", "median"):
            row[f"vs_{which}"] = {
                k: round(sm[k] / r[which][k], 3) for k in ("tasks_per_s", "ru", "held")
            }
        out["rows"].append(row)
    print(json.dumps(out) if a.json else json.dumps(out, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
