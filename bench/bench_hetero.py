"""Heterogeneous utilization: the seed-000 mix on an emulated 16 x (168 cores, 6 GPUs) pilot.

    python bench/bench_hetero.py [--seeds 3] [--first-seed 0] [--tasks 550] [--fifo]
    python bench/bench_hetero.py --plan-cost      # the planner's cost per queue size
    python bench/bench_hetero.py --null-ab 3      # null tasks: utilization vs plan, ABBA
    python bench/bench_hetero.py --virtual --seeds 10   # the policies on a virtual clock
    python bench/bench_hetero.py --blind 10 --seeds 10  # what a planner without durations gains

The mix (seed 000, durations / 100): 90 % of the tasks 1 rank x U[1,9] cores for U[4.8,6.0] s,
10 % 1 rank x U[68,84] cores + 1 GPU for U[9.6,12.0] s, submitted at once in generation order.
Each task is a real `sleep` on an emulated local pilot. Per seed, in one run:

    fifo             the policy before issue 10: heads in arrival order (--fifo only)
    utilization      hardest to place first, backfill, aging (PILOTFISH_SCHEDULER=utilization)
    utilization+dur  the same with TaskDescription(duration=...) given
    plan, plan+dur   the default since issue 33: utilization that learns durations and plans
                     over the queue (PILOTFISH_SCHEDULER=plan), without / with durations;
                     its `queue_plan` events give the planning cost (CPU per plan, tasks planned)

and, as references computed here, the offline list schedule of the same list that starts the
largest tasks first (first fit, any task that fits starts: the RU a plain greedy scheduler
reaches) -- ties of equal size longest first (it knows the durations) and, "blind", in arrival
order (what a scheduler without durations can do) -- the core-bound ideal (core-seconds /
cores: RU 1.0) and `ru_bound`, what no schedule of the list can beat (see ru_bound()).

RU = busy core-seconds / (pilot cores x TTX), TTX = submit -> last task end.

--null-ab R: 10,000 null tasks (bench_e2e.null_tasks) R times per policy, utilization and
plan alternating ABBA in one run: tasks/s and the agent's CPU per task (the planner never runs
on one shape; what "plan" adds there is its bookkeeping per placed task).

--virtual: the agent's Scheduler over the real placer on a virtual clock (tasks end exactly
after their seconds, planning inline as on a simulated pilot): utilization and plan, with and
without durations, per seed -- no sleeps, no noise, no launch costs.

--plan-cost: the planner's model and search on snapshots of the mix (no pilot): ms per model
schedule and what one plan (the default budget) does, for 550 and 10,000 queued tasks on
16 nodes and 65,600 on 2,048 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import pilotfish as pf  # noqa: E402

NODES, CORES, GPUS = 16, 168, 6


def mix(seed: int, n: int) -> list[tuple[int, int, float]]:
    """[(cores, gpus, seconds)] in submission order."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.9:
            out.append((rng.randint(1, 9), 0, rng.uniform(4.8, 6.0)))
        else:
            out.append((rng.randint(68, 84), 1, rng.uniform(9.6, 12.0)))
    return out


def list_schedule(tasks, order, cap: int | None = None) -> tuple[float, float]:
    """(TTX, RU) of the offline list schedule of `order` (first fit; at each end every
    waiting task that fits starts, in order), at most `cap` GPU tasks running at once."""
    free = [[CORES, GPUS] for _ in range(NODES)]
    running: list = []
    waiting, now, busy, large = list(order), 0.0, 0.0, 0
    while waiting or running:
        still = []
        for i in waiting:
            c, g, d = tasks[i]
            if g and cap is not None and large >= cap:
                still.append(i)
                continue
            for node, f in enumerate(free):
                if f[0] >= c and f[1] >= g:
                    f[0] -= c
                    f[1] -= g
                    running.append((now + d, node, i))
                    busy += c * d
                    large += 1 if g else 0
                    break
            else:
                still.append(i)
        waiting = still
        running.sort()
        now = running[0][0]
        while running and running[0][0] <= now:
            _, node, i = running.pop(0)
            free[node][0] += tasks[i][0]
            free[node][1] += tasks[i][1]
            large -= 1 if tasks[i][1] else 0
    return now, busy / (NODES * CORES * now)


def offline_largest_first(tasks: list[tuple[int, int, float]], durations: bool = True) -> dict:
    """List schedule, largest first (GPUs, then cores), first fit; ties longest first when it
    knows the durations, else in arrival order; at each end, every task that fits starts."""
    order = sorted(range(len(tasks)),  # stable: ties stay in arrival order
                   key=lambda i: (-tasks[i][1], -tasks[i][0], -tasks[i][2] if durations else 0))
    ttx, ru = list_schedule(tasks, order)
    return {"ttx": round(ttx, 2), "ru": round(ru, 3)}


def ru_bound(tasks: list[tuple[int, int, float]]) -> float:
    """An upper bound on the RU of any schedule of this list, even one that knows every
    duration: TTX is at least the core-bound time and at least the time the large (GPU)
    tasks need, since a node holds at most CORES // (fewest cores of a large task) of them
    at once. With m such slots and the large durations sorted longest first, some slot
    runs j + 1 of the j*m + 1 longest, so it is busy at least as long as the j + 1 shortest
    of those (pigeonhole), for every j with j*m + 1 <= their number."""
    work = sum(c * d for c, _, d in tasks)
    large = sorted((d for _, g, d in tasks if g), reverse=True)
    ttx = work / (NODES * CORES)
    if large:
        m = NODES * (CORES // min(c for c, g, _ in tasks if g))
        ttx = max(ttx, large[0], sum(large) / m)
        j = 1
        while j * m < len(large):
            ttx = max(ttx, sum(large[j * m - j: j * m + 1]))
            j += 1
    return round(min(1.0, work / (NODES * CORES * ttx)), 3)


def ideal(tasks) -> dict:
    work = sum(c * d for c, _, d in tasks)
    return {"ttx": round(work / (NODES * CORES), 2), "ru": 1.0}


def real(tasks, policy: str, with_duration: bool) -> dict:
    os.environ["PILOTFISH_SCHEDULER"] = policy  # the agent reads it (scheduler.py)
    with tempfile.TemporaryDirectory() as d:
        with pf.Session(path=os.path.join(d, "s")) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                nodes=NODES, cores_per_node=CORES, gpus_per_node=GPUS, runtime="1h"))
            tm = pf.TaskManager(s)
            tm.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
            descs = [pf.TaskDescription(executable="/bin/sleep", arguments=[f"{sec:.3f}"],
                                        cores_per_rank=c, gpus_per_rank=g, stdout=False,
                                        stderr=False, duration=sec if with_duration else None)
                     for c, g, sec in tasks]
            t0 = time.time()
            handles = tm.submit_tasks(descs)
            tm.wait_tasks()
            busy, end, waits = 0.0, t0, {"small": [], "large": []}
            for h, (c, g, _) in zip(handles, tasks):
                assert h.state == pf.DONE, (h.uid, h.state, h.reason)
                hist = dict(zip(h._hist[::2], h._hist[1::2]))
                start, stop = hist[pf.EXECUTING], hist[pf.DONE]
                busy += c * (stop - start)
                end = max(end, stop)
                waits["large" if g else "small"].append(start - t0)
            plans = plan_events(pilot.sandbox)
    ttx = end - t0
    out = {"ttx": round(ttx, 2), "ru": round(busy / (NODES * CORES * ttx), 3),
           "wait_small_max": round(max(waits["small"]), 1),
           "wait_large_max": round(max(waits["large"]), 1)}
    if plans:
        out["plans"] = plan_summary(plans)
    return out


def plan_summary(plans: list[dict]) -> dict:
    """Planning attempts (queue_plan details) summed up for a run's row."""
    return {"attempts": len(plans),
            "planned": sum(1 for p in plans if p["why"] == "planned"),
            "cpu_s_mean": round(statistics.mean(p["elapsed_s"] for p in plans), 3),
            "cpu_s_max": round(max(p["elapsed_s"] for p in plans), 3),
            "tasks_mean": round(statistics.mean(p["tasks"] for p in plans))}


def plan_events(sandbox: str) -> list[dict]:
    """The agent's `queue_plan` events (one per planning attempt)."""
    from pilotfish import _events as E

    path = os.path.join(sandbox, "agent.events")
    if not os.path.exists(path):
        return []
    return [json.loads(d) for _, _, name, d in E.read_all_events(path) if name == E.QUEUE_PLAN]


def virtual(tasks, policy: str, with_duration: bool) -> dict:
    """One run of the agent's Scheduler on the real placer and a virtual clock."""
    import heapq

    from pilotfish import _core
    from pilotfish._wire import TaskSpec
    from pilotfish.agent.scheduler import Scheduler
    from pilotfish.agent.tasks import AgentTask

    placer = _core.Placer([CORES] * NODES, [GPUS] * NODES, [0] * NODES)
    sched = Scheduler(placer, capacity=[(CORES, GPUS, 0)] * NODES, policy=policy,
                      plan_sync=True)
    ts = [AgentTask(TaskSpec(uid=f"task.{i}", executable="/bin/sleep", cores_per_rank=c,
                             gpus_per_rank=g, duration=d if with_duration else None), i)
          for i, (c, g, d) in enumerate(tasks)]
    sched.add(ts, 0.0)
    now, ends, busy = 0.0, [], 0.0
    notes = []
    while True:
        for t, _ in sched.schedule(now):
            c, _, d = tasks[t.key]
            heapq.heappush(ends, (now + d, t.key))
            busy += c * d
        notes.extend(sched.plan_report())
        if not ends:
            break
        now, k = heapq.heappop(ends)
        done = [k]
        while ends and ends[0][0] <= now:
            done.append(heapq.heappop(ends)[1])
        for k in done:
            ts[k].exit_code = 0
        sched.release(done, now)
    out = {"ttx": round(now, 2), "ru": round(busy / (NODES * CORES * now), 3)}
    if notes:
        out["plans"] = plan_summary([json.loads(n) for n in notes])
    return out


def null_ab(rounds: int) -> None:
    """10,000 null tasks per run, policies in ABBA order; medians per policy."""
    sys.path.insert(0, HERE)
    from bench_e2e import null_tasks

    got: dict[str, list] = {"utilization": [], "plan": []}
    for r in range(rounds):
        for policy in (("utilization", "plan") if r % 2 == 0 else ("plan", "utilization")):
            os.environ["PILOTFISH_SCHEDULER"] = policy
            out = null_tasks(10_000, profile=False)
            got[policy].append(out)
            print(json.dumps({"policy": policy, "rate": round(out["rate"]),
                              "agent_cpu_us_per_task": round(out["agent_cpu_us_per_task"], 1)}),
                  flush=True)
    print(json.dumps({p: {"rate_median": round(statistics.median(o["rate"] for o in v)),
                          "agent_cpu_us_median": round(statistics.median(
                              o["agent_cpu_us_per_task"] for o in v), 1)}
                      for p, v in got.items()}))


def plan_cost() -> None:
    """The planner on snapshots of the mix: model ms per schedule, one plan's outcome."""
    import math

    from pilotfish.agent.planner import Planner, Snapshot, simulate

    for nodes, n in ((NODES, 550), (NODES, 10_000), (2048, 65_600)):
        tasks = mix(0, n)
        order = sorted(range(n), key=lambda i: (-tasks[i][1], 0 if not tasks[i][1] and
                                                tasks[i][0] <= CORES // 16 else -tasks[i][0],
                                                -tasks[i][2], i))
        snap = Snapshot([[CORES, GPUS, 1 << 62] for _ in range(nodes)], [],
                        [(i, 1, tasks[i][0], tasks[i][1], 0, tasks[i][2]) for i in order])
        t0 = time.thread_time()
        m = simulate(snap, list(range(n)), t0 + 120)
        one = time.thread_time() - t0
        out = Planner(sync=True).start(snap)
        print(json.dumps({"nodes": nodes, "tasks": n, "model_ms": round(1e3 * one, 1),
                          "model_makespan_s": None if m is None else round(m, 2),
                          "per_10k_tasks_ms": round(1e3 * one * 10_000 / n, 1),
                          "plan": {"why": out.why, "cpu_s": round(out.elapsed_s, 3),
                                   "iterations": out.iterations,
                                   "gain": None if not out.best_s or math.isinf(out.best_s)
                                   else round(1 - out.best_s / out.baseline_s, 4)}}),
              flush=True)


def _ru(tasks, order, cap: int | None = None) -> float:
    return round(list_schedule(tasks, order, cap)[1], 4)


def shapes(tasks) -> dict:
    """Other shapes of schedule, offline: what knowing durations of which tasks is worth, and
    blind shapes that hold large tasks back or start small ones first."""
    n, t = len(tasks), tasks
    large = sum(1 for x in t if x[1])
    waves = -(-large // (NODES * (CORES // min(x[0] for x in t if x[1]))))
    blind_order = sorted(range(n), key=lambda i: (-t[i][1], -t[i][0]))
    out = {"small_by_size_then_longest": _ru(t, sorted(range(n), key=lambda i: (
        -t[i][1], -t[i][0], 0 if t[i][1] else -t[i][2]))),
        "small_longest_first": _ru(t, sorted(range(n), key=lambda i: (
            -t[i][1], -t[i][0] if t[i][1] else -t[i][2]))),
        "blind_balanced_waves": _ru(t, blind_order, -(-large // waves)),
        "blind_small_first": _ru(t, sorted(range(n), key=lambda i: (t[i][1], -t[i][0])))}
    for cap in (24, 26, 28, 30):
        out[f"blind_cap_{cap}"] = _ru(t, blind_order, cap)
    return out


def blind(seeds: range, budget_s: float, scenarios: int) -> None:
    """What a planner that does not know each task's duration can gain, on the model (first
    fit, backfill at every end: what the scheduler does, to the digit on a virtual clock).
    Per seed, from today's blind order (GPU tasks first, larger first; arrival order among
    equals): (1) the planner's search, `budget_s` of CPU, no margin, on a model where every
    task takes its kind's mean -- what the learned estimates tell -- and (2) a search for the
    order with the best mean makespan over `scenarios` draws of every task's duration from
    its kind's range -- a planner that knows the distributions, not the draws. Each found
    order is then run on the true durations. RU as in the bench."""
    from pilotfish.agent.planner import Snapshot, search, simulate

    def snap(tasks, order, dur):
        return Snapshot([[CORES, GPUS, 0] for _ in range(NODES)], [],
                        [(i, 1, tasks[i][0], tasks[i][1], 0, dur(i)) for i in order])

    rows = []
    for seed in seeds:
        tasks = mix(seed, 550)
        n, work = len(tasks), sum(c * d for c, _, d in tasks)
        ru = (lambda m: round(work / (NODES * CORES * m), 4))
        order = sorted(range(n), key=lambda i: (-tasks[i][1], -tasks[i][0]))
        true = snap(tasks, order, lambda i: tasks[i][2])
        today = simulate(true, list(range(n)))
        small = statistics.mean(d for _, g, d in tasks if not g)
        large = statistics.mean(d for _, g, d in tasks if g)
        out = search(snap(tasks, order, lambda i: large if tasks[i][1] else small), budget_s,
                     margin=0.0, patience=10 ** 9)
        pos = {i: k for k, i in enumerate(order)}
        means = today if out.plan is None else simulate(true, [pos[i] for i in out.plan.order])
        rng = random.Random(1000 + seed)
        draws = [snap(tasks, order, lambda i: rng.uniform(9.6, 12.0) if tasks[i][1]
                      else rng.uniform(4.8, 6.0)) for _ in range(scenarios)]
        cur = list(range(n))
        best = statistics.mean(simulate(d, cur) for d in draws)
        model0, window, t0 = best, max(8, n // 8), time.thread_time()
        while time.thread_time() - t0 < budget_s:
            cand = list(cur)
            for _ in range(rng.randint(1, 3)):
                a = rng.randrange(n)
                cand.insert(min(n - 1, max(0, a + rng.randint(-window, window))), cand.pop(a))
            m = statistics.mean(simulate(d, cand) for d in draws)
            if m <= best:
                best, cur = m, cand
        row = {"seed": seed, "today_blind": ru(today), "planned_on_means": ru(means),
               "planned_on_draws": ru(simulate(true, cur)),
               "draws_model_gain": round(1 - best / model0, 4),
               "offline_with_durations": offline_largest_first(tasks)["ru"], **shapes(tasks)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"mean_ru": {k: round(statistics.mean(r[k] for r in rows), 4)
                                  for k in rows[0] if k != "seed"}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--tasks", type=int, default=550)
    ap.add_argument("--fifo", action="store_true", help="also the fifo policy")
    ap.add_argument("--plan-cost", action="store_true", help="the planner's cost, no pilot")
    ap.add_argument("--null-ab", type=int, default=0, help="null tasks, utilization vs plan")
    ap.add_argument("--virtual", action="store_true", help="on a virtual clock, no pilot")
    ap.add_argument("--blind", type=float, default=0,
                    help="what a planner without per-task durations can gain: CPU s per search")
    ap.add_argument("--scenarios", type=int, default=6, help="--blind: duration draws")
    ap.add_argument("--runs", default=None,
                    help="only these runs, comma-separated (e.g. utilization+dur,plan+dur)")
    a = ap.parse_args()
    if a.plan_cost:
        plan_cost()
        return
    if a.null_ab:
        null_ab(a.null_ab)
        return
    if a.blind:
        blind(range(a.first_seed, a.first_seed + a.seeds), a.blind, a.scenarios)
        return
    runs = ((("fifo", "fifo", False),) if a.fifo else ()) + (
        ("utilization", "utilization", False), ("utilization+dur", "utilization", True),
        ("plan", "plan", False), ("plan+dur", "plan", True))
    if a.runs:
        runs = tuple(r for r in runs if r[0] in a.runs.split(","))
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        tasks = mix(seed, a.tasks)
        row = {"seed": seed, "tasks": len(tasks), "large": sum(1 for t in tasks if t[1]),
               "ideal": ideal(tasks), "ru_bound": ru_bound(tasks), "offline_largest_first": offline_largest_first(tasks),
               "offline_largest_first_blind": offline_largest_first(tasks, durations=False)}
        for name, policy, dur in runs:
            row[name] = (virtual if a.virtual else real)(tasks, policy, dur)
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {k: round(statistics.mean(r[k]["ru"] for r in rows), 3)
               for k in ("offline_largest_first", "offline_largest_first_blind")
               + tuple(name for name, _, _ in runs)}
    summary["ru_bound"] = round(statistics.mean(r["ru_bound"] for r in rows), 3)
    print(json.dumps({"mean_ru": summary}))


if __name__ == "__main__":
    main()
