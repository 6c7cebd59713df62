"""Service groups and elastic pilots (issue 12): resize time, as Colza's Figure 4, and pilot
grow, one run.

    .venv/bin/python bench/bench_services.py [--max-n 8] [--reps 5] [--json OUT]
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_services.py --slurm  # + grow

resize    for n = 1..max-n: a group of n ZeroMQ echo members (real Python processes) is
          grown to n+1 -- from group.resize(n+1) to the new view seen by the client (its
          on_change callback) -- beside the static way Colza compares with: stop the group
          and start n+1 members from scratch, until a view with n+1 members is seen.
          Median of --reps each.
grow      (local) from pilot.grow(1) to the first task running on the new node;
          (--slurm) the same on the project's Slurm: a PSI/J batch job for the node, its
          nodes joining the agent, a task started there with srun.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
ECHO = os.path.join(HERE, "..", "tests", "services", "echo_service.py")

import pilotfish as pf  # noqa: E402
from _pilots import start_pilot  # noqa: E402


class ViewWatch:
    """Times from a mark to the first view the client sees with n members."""

    def __init__(self, group):
        self.cond = threading.Condition()
        self.seen: list[tuple[float, int, int]] = []
        group.on_change(self.on_change)

    def on_change(self, group, view):
        with self.cond:
            self.seen.append((time.perf_counter(), view.epoch, len(view.members)))
            self.cond.notify_all()

    def wait_for(self, n: int, since: float, timeout: float = 60.0) -> float:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(t >= since and k == n
                                                for t, _, k in self.seen), timeout)
            if not ok:
                raise RuntimeError(f"no view with {n} members within {timeout}s")
            return min(t for t, _, k in self.seen if t >= since and k == n) - since


def desc(name):
    return pf.ServiceDescription(name=name, executable=sys.executable, arguments=[ECHO])


def bench_resize(tmgr, max_n: int, reps: int) -> list[dict]:
    rows = []
    for n in range(1, max_n + 1):
        elastic, static = [], []
        for r in range(reps):
            g = tmgr.submit_service_group(desc(f"e{n}x{r}"), replicas=n)
            w = ViewWatch(g)
            g.wait_ready(timeout=60)
            t0 = time.perf_counter()
            g.resize(n + 1)
            elastic.append(w.wait_for(n + 1, t0))
            g.stop()
            g.wait(lambda v: not v.members, timeout=60)
            # static: the group of n stops, a new one of n+1 starts from scratch
            g = tmgr.submit_service_group(desc(f"s{n}x{r}"), replicas=n)
            g.wait_ready(timeout=60)
            t0 = time.perf_counter()
            g.stop()
            g.wait(lambda v: not v.members, timeout=60)
            g2 = tmgr.submit_service_group(desc(f"t{n}x{r}"), replicas=n + 1)
            g2.wait_ready(timeout=60)
            static.append(time.perf_counter() - t0)
            g2.stop()
            g2.wait(lambda v: not v.members, timeout=60)
        row = {"n": n, "elastic_s": statistics.median(elastic),
               "static_s": statistics.median(static)}
        row["ratio"] = row["static_s"] / row["elastic_s"]
        print(f"  n={n}: elastic {row['elastic_s'] * 1000:7.1f} ms   static "
              f"{row['static_s'] * 1000:7.1f} ms   static/elastic {row['ratio']:.1f}x", flush=True)
        rows.append(row)
    return rows


def bench_grow(pilot, tmgr, reps: int, cores: int) -> list[float]:
    out = []
    for _ in range(reps):
        hold = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["600"],
                                                    cores_per_rank=cores))
        hold.wait(pf.EXECUTING, timeout=120)
        t0 = time.perf_counter()
        names = pilot.grow(nodes=1, timeout=300)
        t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", cores_per_rank=cores))
        t.wait(pf.EXECUTING, timeout=120)
        assert t.slots[0].node == names[0], (t.slots, names)
        out.append(time.perf_counter() - t0)
        t.wait(timeout=60)
        hold.cancel()
        hold.wait(timeout=60)
        pilot.shrink(nodes=1, timeout=300)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slurm", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    result = {}
    with pf.Session() as s:
        # an emulated 16-core node: every member is a real process on this machine
        pilot, tmgr, _ = start_pilot(s, nodes=1, cores_per_node=16, runtime="1h")
        print(f"resize: group of n -> n+1 members, median of {a.reps}")
        result["resize"] = bench_resize(tmgr, a.max_n, a.reps)
        g = bench_grow(pilot, tmgr, a.reps, 16)
        result["grow_local_s"] = statistics.median(g)
        print(f"grow (local): pilot.grow(1) -> first task running there: median "
              f"{result['grow_local_s'] * 1000:.1f} ms")
    if a.slurm:
        os.environ.setdefault("PILOTFISH_BATCH_POLL_S", "0.5")
        with pf.Session() as s:
            pilot, tmgr, _ = start_pilot(s, timeout=120, resource="slurm", nodes=1,
                                         runtime="30m")
            cores = pilot.nodes[0].cores
            g = bench_grow(pilot, tmgr, max(1, a.reps // 2), cores)
            result["grow_slurm_s"] = g
            print(f"grow (slurm): pilot.grow(1) -> first task running there: "
                  f"{', '.join(f'{x:.2f}' for x in g)} s (median {statistics.median(g):.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
