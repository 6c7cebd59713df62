"""What the agent's scheduler learned and planned (policy "plan", issue 33), from each
pilot's `queue_plan` events (its sub-agents' too, each planning its partition's queue, in
time order): the planning attempts (planned, no gain, out of time; CPU seconds; the model's
predicted end for today's order and for the plan) and the learned duration estimates per kind
(executable and shape) as the last attempt saw them.
"""

from __future__ import annotations

import os

from pilotfish import _events as E
from pilotfish import _json
from pilotfish._agent_files import agent_files


def plans(data) -> list[dict]:
    """One dict per pilot that planned: pilot, attempts, planned, no_gain, out_of_time,
    cpu_s (total), cpu_s_max, tasks_max, gain (the best planned 1 - best / baseline), and
    estimates (the last attempt's learned kinds: executable, ranks, cores_per_rank,
    gpus_per_rank, mem_per_rank, samples, mean_s, std_s)."""
    out: list[dict] = []
    pilots = data.pilots
    if pilots is None or not len(pilots):
        return out
    for uid in pilots.index:
        found = []  # (each sub-agent plans its own partition's queue: all, in time order)
        for path in agent_files(os.path.join(data.path, uid), "agent.events"):
            for t, _, name, detail in E.read_all_events(path):
                if name == E.QUEUE_PLAN and detail:
                    try:
                        found.append((t, _json.loads(detail)))
                    except ValueError:
                        continue
        notes = [n for _, n in sorted(found, key=lambda x: x[0])]
        if not notes:
            continue
        gains = [
            1 - n["best_s"] / n["baseline_s"]
            for n in notes
            if n.get("why") == "planned" and n.get("baseline_s")
        ]
        out.append(
            {
                "pilot": uid,
                "attempts": len(notes),
                "planned": sum(n.get("why") == "planned" for n in notes),
                "no_gain": sum(n.get("why") == "no gain" for n in notes),
                "out_of_time": sum(n.get("why") == "out of time" for n in notes),
                "cpu_s": round(sum(n.get("elapsed_s", 0.0) for n in notes), 3),
                "cpu_s_max": round(max(n.get("elapsed_s", 0.0) for n in notes), 3),
                "tasks_max": max(n.get("tasks", 0) for n in notes),
                "gain": round(max(gains), 4) if gains else None,
                "estimates": notes[-1].get("estimates") or [],
            }
        )
    return out
