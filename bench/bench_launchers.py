"""Launch rate per launcher: tasks/s through a pilot vs. the bare launcher, in the same run.

    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_launchers.py \
        [--only direct,srun,...] [--scale 1.0] [--concurrency 16] [--json OUT]

For each launcher, N one-core /bin/true tasks (outputs discarded):
  pilot  through a pilot of one node x `concurrency` cores (so that many run at once):
         submit all, time until the last is DONE (pilot and daemon start-up not counted)
  bare   the same launcher command the pilot builds for such a task (launch/*.py build()),
         run N times by a plain loop here with the same number in flight (posix_spawn +
         wait); no pilot, no Python per task beyond the loop. A command still running after
         60 s is killed and counted as `hung` (the pilot bounds its launches itself)
and the ratio pilot/bare.

Launchers (the pilot's and the bare loop's setting):
  direct         local pilot; bare: the task itself (posix_spawn /bin/true)
  srun           Slurm pilot (1 node); bare: inside `salloc -N1 --exclusive`, `srun --jobid
                 ... --exact` like the pilot's steps
  mpiexec.hydra  local pilot, launcher "mpiexec" (-launcher fork); bare: the same command
  prterun        standalone PRRTE (a new DVM per task), launcher "mpirun" with
                 mpirun=<venv>/bin/prterun; bare: the same command
  prrte          a persistent DVM, launcher "prrte" (the pilot adds its rank-notes bash
                 wrapper); bare: plain `prterun --dvm uri:file:... /bin/true` against a DVM
                 started here
Run inside the substrate network namespace (PRRTE, hydra and Slurm bind every interface).
Prints one JSON line per launcher and a final JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402
from pilotfish._wire import NodeInfo, RankSlot, TaskSpec  # noqa: E402
from pilotfish.agent.resources import Resources  # noqa: E402
from pilotfish.launch import get_launcher  # noqa: E402
from pilotfish.launch.base import find_tool  # noqa: E402

# launcher -> (pilot launcher name, launcher options, resource, tasks at --scale 1)
CASES = {
    "direct": ("direct", {}, "local", 3000),
    "srun": ("srun", {}, "slurm", 400),
    "mpiexec.hydra": ("mpiexec", {}, "local", 600),
    "prterun": ("mpirun", {"mpirun": "prterun"}, "local", 200),
    "prrte": ("prrte", {}, "local", 600),
}


def options_for(case: str) -> dict:
    _, opts, _, _ = CASES[case]
    opts = dict(opts)
    if case == "prterun":
        opts["mpirun"] = find_tool(["prterun"]) or "prterun"
    return opts


# -- through a pilot ----------------------------------------------------------------------------

def through_pilot(case: str, n: int, concurrency: int) -> dict:
    name, _, resource, _ = CASES[case]
    opts = options_for(case)
    with tempfile.TemporaryDirectory(prefix="pf-bench-") as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pmgr = pf.PilotManager(s)
            desc = {"resource": resource, "nodes": 1, "runtime": "30m", "launcher": name,
                    "launcher_options": {name: opts} if opts else {}}
            if resource == "local":
                desc["cores_per_node"] = concurrency
            pilot = pmgr.submit_pilots(pf.PilotDescription(**desc))
            tmgr = pf.TaskManager(s)
            tmgr.add_pilots(pilot)
            if pilot.wait(pf.ACTIVE, timeout=120) != pf.ACTIVE:
                raise RuntimeError(f"{case}: pilot did not start: {pilot.reason}")
            cores = pilot.nodes[0].cores
            t0 = time.perf_counter()
            tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true", stdout=False,
                                                          stderr=False) for _ in range(n)])
            tmgr.wait_tasks(timeout=1800)
            dt = time.perf_counter() - t0
            done = sum(t.state == pf.DONE for t in tasks)
    return {"tasks": n, "done": done, "seconds": round(dt, 2), "rate": round(n / dt, 1),
            "in_flight": cores}


# -- bare ---------------------------------------------------------------------------------------

def spawn_loop(argv: list[str], env: dict[str, str], n: int, concurrency: int,
               hang_limit: float = 60.0) -> dict:
    """Run argv n times, `concurrency` at a time, with posix_spawn + wait: the bare launcher.

    A process still running after hang_limit seconds is SIGKILLed and counted as hung (bare
    `prterun --dvm` hangs now and then after its task ran; see shared/notes/substrates.md).
    """
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if exe is None:
        raise RuntimeError(f"{argv[0]} not found")
    null = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_RDWR, 0) for fd in (0, 1, 2)]
    mine: dict[int, float] = {}  # pid -> when it started
    started = failed = hung = 0
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # woken by sigtimedwait
    t0 = time.perf_counter()
    try:
        while started < n or mine:
            while len(mine) < concurrency and started < n:
                mine[os.posix_spawn(exe, argv, env, file_actions=null)] = time.perf_counter()
                started += 1
            reaped = 0
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if mine.pop(pid, None) is not None:  # (other children, e.g. a DVM, not counted)
                    reaped += 1
                    failed += status != 0
            if not reaped and mine:
                signal.sigtimedwait([signal.SIGCHLD], 1.0)
                now = time.perf_counter()
                for pid, t in list(mine.items()):
                    if now - t > hang_limit:
                        os.kill(pid, signal.SIGKILL)
                        hung += 1
                        mine[pid] = float("inf")  # reaped (and counted failed) next round
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    dt = time.perf_counter() - t0
    return {"tasks": n, "done": n - failed, "hung": hung, "seconds": round(dt, 2),
            "rate": round(n / dt, 1), "in_flight": concurrency}


class PopenSpawn:
    """The spawn(argv, env, stdout=, stderr=) a launcher's start() wants, for the bare loop."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def __call__(self, argv, env, stdout=None, stderr=None):
        out = open(stdout, "w") if stdout else subprocess.DEVNULL  # noqa: SIM115
        p = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=out,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p.pid


def bare(case: str, n: int, concurrency: int) -> dict:
    """The bare loop, run here (for srun: this process runs inside salloc)."""
    name, _, resource, _ = CASES[case]
    opts = options_for(case)
    if resource == "slurm":
        node = os.environ.get("SLURMD_NODENAME") or os.environ["SLURM_JOB_NODELIST"]
        res = Resources([NodeInfo(node, concurrency, 0, 0)], "slurm")
    else:
        node = "node0000"
        res = Resources([NodeInfo(node, concurrency, 0, 0)], "declared")
    if case == "prrte":
        opts["notes"] = False  # the plain command, without the pilot's wrapper
    workdir = tempfile.mkdtemp(prefix="pf-bare-")
    opts.setdefault("dvm_dir", os.path.join(workdir, "dvm"))
    lm = get_launcher(name, res, opts)
    spawner = PopenSpawn()
    lm.start(spawner)
    try:
        task = TaskSpec(uid="task.000000", executable="/bin/true", stdout=False, stderr=False)
        (proc,) = lm.build(task, [RankSlot(node, 0, (0,), ())], workdir)
        env = {**os.environ, **proc.env}
        # warm up (first DVM contact, file caches) before timing
        spawn_loop(proc.argv, env, min(n, concurrency), concurrency)
        return spawn_loop(proc.argv, env, n, concurrency)
    finally:
        lm.stop()
        for p in spawner.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def bare_in_allocation(case: str, n: int, concurrency: int) -> dict:
    """srun needs an allocation: run the bare loop inside `salloc -N1 --exclusive`."""
    argv = ["salloc", "-N1", "--exclusive", "-t", "30", sys.executable, os.path.abspath(__file__),
            "--bare", case, "--n", str(n), "--concurrency", str(concurrency)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"bare {case} in salloc failed (rc {r.returncode}): {r.stderr[-2000:]}")


# -- main ---------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated launchers")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the task counts")
    ap.add_argument("--concurrency", type=int, default=16, help="tasks in flight")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--bare", default=None, help=argparse.SUPPRESS)  # salloc's child
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        print(json.dumps(bare(args.bare, args.n, args.concurrency)))
        return

    results = {}
    for case in args.only.split(","):
        _, _, resource, base_n = CASES[case]
        n = max(1, int(base_n * args.scale))
        pilot = through_pilot(case, n, args.concurrency)
        if resource == "slurm":
            plain = bare_in_allocation(case, n, args.concurrency)
        else:
            plain = bare(case, n, args.concurrency)
        row = {"launcher": case, "pilot": pilot, "bare": plain,
               "pilot_over_bare": round(pilot["rate"] / plain["rate"], 2)}
        results[case] = row
        print(json.dumps(row), flush=True)
    out = {"bench": "launchers", "concurrency": args.concurrency, "host_cpus": os.cpu_count(),
           "load_avg_1m": round(os.getloadavg()[0], 2), "results": results}
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
