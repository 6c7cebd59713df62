"""Node executors on the cluster of hosts (issue 28): null tasks through them vs. srun and
prrte per task, vs. the spawn floor and a local pilot on one host -- all in one run.

    scripts/substrates/slurm.sh start 4 16      # (or more CPUs per node: see --running)
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_nodes.py \
        [--tasks 20000] [--per-launcher 300] [--running 2000] [--queued 50000] [--json OUT]

Cases (one Slurm pilot on every compute host, the agent on n1; tasks are /bin/true, outputs
discarded, one core each; each rate is N / (submit of all -> the last final seen)):
  floor    bench/spawn_floor on this host (C: posix_spawn + waitpid, 2 in flight)
  local    the same N through a local pilot on one host (emulated 4 x 64 cores)
  nodes    N tasks on the Slurm pilot, no launcher named: node executors (n2..n4) and the
           agent's own core (n1); the agent's CPU per task (its threads' run time,
           /proc/PID/task/*/schedstat)
  idle     the agent's CPU per second over --idle seconds with every executor up and no task
           (heartbeats, the node port)
  srun     --per-launcher tasks with launcher="srun" (a job step each)
  prrte    --per-launcher tasks with launcher="prrte" (a prterun each, into the pilot's DVM;
           its start is not timed: one task first)
  startup  pilot submit -> ACTIVE, and -> every node executor's hello (agent events)
  flat     --running `sleep` tasks on the other hosts (n1 filled first): process count of
           the agent's host and the agent's open descriptors, sampled, before and during
  queued   agent RSS growth per queued task: every core busy, --queued more tasks submitted
Prints one JSON line per case and a final JSON object (--json: also to OUT).
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
from pilotfish import _events as E  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402


def emit(case: str, **kw) -> dict:
    row = {"case": case, **kw}
    print(json.dumps(row), flush=True)
    return row


def run_tasks(tmgr, n: int, **fields) -> tuple[float, list]:
    descs = [
        pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False, **fields)
        for _ in range(n)
    ]
    t0 = time.monotonic()
    tasks = tmgr.submit_tasks(descs)
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=3600)
    dt = time.monotonic() - t0
    bad = [t.reason for t, s in zip(tasks, states) if s != pf.DONE]
    if bad:
        raise SystemExit(f"{len(bad)} tasks not DONE: {bad[:3]}")
    return dt, tasks


def agent_pid(pilot) -> int:
    with open(os.path.join(pilot.sandbox, "pilot.json")) as f:
        return json.load(f)["agent_pid"]


def host_procs(node: str) -> int:
    ns = f"{os.environ.get('PILOTFISH_NETNS', 'pilotfish')}-{node}"
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return len(out.split())


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_ns(pid: int) -> int:
    """Run time of all of the process's threads so far (ns; schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError):
            pass
    return total


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--per-launcher", type=int, default=300)
    ap.add_argument("--running", type=int, default=2000)
    ap.add_argument("--queued", type=int, default=50000)
    ap.add_argument("--idle", type=float, default=20.0)
    ap.add_argument("--skip", default="", help="cases to leave out, comma-separated")
    ap.add_argument("--json")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    nodes = int(os.environ.get("PILOTFISH_SLURM_NODES", "4"))
    cpus = int(os.environ.get("PILOTFISH_SLURM_CPUS", "16"))
    if os.environ.get("PILOTFISH_CLUSTER") != "hosts":
        raise SystemExit(
            "run on the cluster of hosts: scripts/substrates/slurm.sh start; "
            "scripts/substrates/slurm.sh exec ..."
        )
    rows: dict[str, dict] = {}
    if "floor" not in skip:
        from bench_e2e import floor

        f = floor(3000)
        rows["floor"] = emit("floor", **f)
    if "local" not in skip:
        from _pilots import start_pilot

        with tempfile.TemporaryDirectory() as d, pf.Session(path=os.path.join(d, "s")) as s:
            _, tmgr, _ = start_pilot(s, runtime="2h", nodes=4, cores_per_node=64)
            run_tasks(tmgr, min(500, a.tasks))  # warm
            dt, _ = run_tasks(tmgr, a.tasks)
            rows["local"] = emit(
                "local", tasks=a.tasks, seconds=round(dt, 2), rate=round(a.tasks / dt, 1)
            )
    with tempfile.TemporaryDirectory() as d, pf.Session(path=os.path.join(d, "s")) as s:
        pmgr = pf.PilotManager(s)
        t_submit = time.time()
        pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=nodes, runtime="2h"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        if pilot.wait(pf.ACTIVE, timeout=300) != pf.ACTIVE:
            raise SystemExit(f"pilot: {pilot.state} {pilot.reason}")
        t_active = time.time()
        deadline = time.monotonic() + 120
        ups = []
        while time.monotonic() < deadline:
            ups = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
            if len([e for e in ups if e[2] == E.NODE_UP]) >= nodes - 1:
                break
            time.sleep(0.2)
        up_t = [e[0] for e in ups if e[2] == E.NODE_UP]
        start = [e[0] for e in ups if e[2] == E.NODES_START]
        rows["startup"] = emit(
            "startup",
            nodes=nodes,
            submit_to_active_s=round(t_active - t_submit, 2),
            submit_to_all_nodes_s=round(max(up_t) - t_submit, 2) if up_t else None,
            executors_start_to_all_up_s=round(max(up_t) - start[0], 3) if up_t and start else None,
        )
        run_tasks(tmgr, 200)  # warm
        pid = agent_pid(pilot)
        with open(f"/proc/{pid}/maps") as f:  # (which tree's pilotfish the agent runs)
            core = {line.split()[-1] for line in f if line.rstrip().endswith("_core.abi3.so")}
        emit("agent", pid=pid, core=sorted(core))
        if "idle" not in skip:
            time.sleep(1.0)
            c0, t0 = cpu_ns(pid), time.monotonic()
            time.sleep(a.idle)
            c1, t1 = cpu_ns(pid), time.monotonic()
            rows["idle"] = emit(
                "idle",
                seconds=round(t1 - t0, 1),
                agent_cpu_ms_per_s=round((c1 - c0) / 1e6 / (t1 - t0), 3),
            )
        if "nodes" not in skip:
            c0 = cpu_ns(pid)
            dt, tasks = run_tasks(tmgr, a.tasks)
            cpu = cpu_ns(pid) - c0
            per = {}
            for t in tasks:
                per[t.slots[0].node] = per.get(t.slots[0].node, 0) + 1
            rows["nodes"] = emit(
                "nodes",
                tasks=a.tasks,
                seconds=round(dt, 2),
                rate=round(a.tasks / dt, 1),
                per_node=per,
                agent_cpu_us_per_task=round(cpu / 1e3 / a.tasks, 1),
            )
        if "srun" not in skip:
            dt, _ = run_tasks(tmgr, a.per_launcher, launcher="srun")
            rows["srun"] = emit(
                "srun",
                tasks=a.per_launcher,
                seconds=round(dt, 2),
                rate=round(a.per_launcher / dt, 1),
            )
        if "prrte" not in skip:
            run_tasks(tmgr, 1, launcher="prrte")  # the DVM starts
            dt, _ = run_tasks(tmgr, a.per_launcher, launcher="prrte")
            rows["prrte"] = emit(
                "prrte",
                tasks=a.per_launcher,
                seconds=round(dt, 2),
                rate=round(a.per_launcher / dt, 1),
            )
        if "flat" not in skip:
            before = (host_procs("n1"), open_fds(pid))
            hold = tmgr.submit_tasks(
                [
                    pf.TaskDescription(
                        executable="/bin/sleep", arguments=["120"], stdout=False, stderr=False
                    )
                    for _ in range(cpus)
                ]
            )
            time.sleep(2)  # (n1 full: first fit)
            n = min(a.running, (nodes - 1) * cpus)
            run = tmgr.submit_tasks(
                [
                    pf.TaskDescription(
                        executable="/bin/sleep", arguments=["15"], stdout=False, stderr=False
                    )
                    for _ in range(n)
                ]
            )
            procs, fds, remote = [], [], 0
            t_end = time.monotonic() + 12
            while time.monotonic() < t_end:
                procs.append(host_procs("n1"))
                fds.append(open_fds(pid))
                remote = max(remote, sum(1 for t in run if t.state == pf.EXECUTING))
                time.sleep(0.5)
            on_n1 = sum(1 for t in run if t.slots and t.slots[0].node == "n1")
            tmgr.cancel_tasks([t.uid for t in hold + run])
            tmgr.wait_tasks([t.uid for t in hold + run], timeout=120)
            rows["flat"] = emit(
                "flat",
                running_elsewhere=remote,
                of=n,
                placed_on_n1=on_n1,
                n1_procs_before=before[0],
                n1_procs_max=max(procs),
                agent_fds_before=before[1],
                agent_fds_max=max(fds),
            )
        if "queued" not in skip:
            hold = tmgr.submit_tasks(
                [
                    pf.TaskDescription(
                        executable="/bin/sleep", arguments=["600"], stdout=False, stderr=False
                    )
                    for _ in range(nodes * cpus)
                ]
            )
            time.sleep(3)
            r0 = rss_kib(pid)
            q = tmgr.submit_tasks(
                [
                    pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                    for _ in range(a.queued)
                ]
            )
            time.sleep(5)
            r1 = rss_kib(pid)
            tmgr.cancel_tasks([t.uid for t in hold + q])
            tmgr.wait_tasks([t.uid for t in hold + q], timeout=600)
            rows["queued"] = emit(
                "queued",
                tasks=a.queued,
                agent_rss_growth_bytes_per_task=round((r1 - r0) * 1024 / a.queued, 1),
            )
        pilot.cancel()
    out = {"rows": rows}
    if "nodes" in rows:
        r = rows["nodes"]["rate"]
        if "floor" in rows:
            fl = rows["floor"].get("tasks_per_s_2")
            out["nodes_vs_floor"] = round(r / fl, 3) if fl else None
        if "local" in rows:
            out["nodes_vs_local"] = round(r / rows["local"]["rate"], 3)
        if "srun" in rows:
            out["nodes_vs_srun"] = round(r / rows["srun"]["rate"], 1)
        if "prrte" in rows:
            out["nodes_vs_prrte"] = round(r / rows["prrte"]["rate"], 1)
    print(json.dumps(out), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
