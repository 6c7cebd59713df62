"""Per-task durations (the seeds' Table 2: task setup time mean/median/q3), TTX, makespan.

A task's life is cut at five of its events into consecutive steps:

    queue_wait  NEW -> AGENT_SCHEDULING          submitted until the agent's scheduler has it:
                                                 client handling, transport, waiting for an
                                                 active pilot
    scheduling  AGENT_SCHEDULING -> schedule_ok  in the agent's scheduler: waiting for free
                                                 resources, then placement
    setup       schedule_ok -> payload start     resources held, payload not running yet:
                                                 prepare, spawn, launcher start-up. The seeds'
                                                 "task setup time" (launcher call to app
                                                 start) widened to all of the runtime's part.
    run         payload start -> exec_stop       the payload runs
    output      exec_stop -> final state         reap, release, output staging, final state

payload start = launch_ok where a launcher reports it, else exec_ok (the spawn returned).
final state = the first DONE / FAILED / CANCELED event. total = NEW -> final state.
A duration whose events are missing (a task canceled before it ran) is NaN and left out of
the statistics.

TTX (time to execute the workload) = last exec_stop - first exec_start over all tasks: the
span in which the workload ran. Makespan = last final state - first NEW.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pilotfish import _events as E

# (key, label, from event, to event); "payload_start" and "t_final" are derived columns
STEPS = (
    ("queue_wait", "Queue wait", "NEW", "AGENT_SCHEDULING"),
    ("scheduling", "Scheduling", "AGENT_SCHEDULING", E.SCHEDULE_OK),
    ("setup", "Setup", E.SCHEDULE_OK, "payload_start"),
    ("run", "Run", "payload_start", E.EXEC_STOP),
    ("output", "Output", E.EXEC_STOP, "t_final"),
)
DURATIONS = STEPS + (("total", "Total", "NEW", "t_final"),)
DURATION_LABELS = {k: label for k, label, _, _ in DURATIONS}
STAT_NAMES = ("count", "mean", "median", "q3", "p95", "min", "max")


def event_time(tasks: pd.DataFrame, name: str) -> np.ndarray:
    """A task event time column (or a derived one) as float array; NaN where missing."""
    if name == "payload_start":
        launch = event_time(tasks, E.LAUNCH_OK)
        return np.where(np.isnan(launch), event_time(tasks, E.EXEC_OK), launch)
    if name in tasks:
        return tasks[name].to_numpy(np.float64)
    return np.full(len(tasks), np.nan)


def task_durations(tasks: pd.DataFrame) -> pd.DataFrame:
    """Seconds per task and step (columns: DURATIONS keys), NaN where an event is missing."""
    cols = {key: event_time(tasks, b) - event_time(tasks, a) for key, _, a, b in DURATIONS}
    return pd.DataFrame(cols, index=tasks.index)


def stats(values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return {"count": 0, **{k: float("nan") for k in STAT_NAMES[1:]}}
    median, q3, p95 = np.percentile(v, [50, 75, 95])
    return {
        "count": int(len(v)),
        "mean": float(v.mean()),
        "median": float(median),
        "q3": float(q3),
        "p95": float(p95),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def duration_stats(durations: pd.DataFrame) -> pd.DataFrame:
    """count, mean, median, q3 (75th percentile), p95, min, max per step (rows)."""
    return pd.DataFrame({k: stats(durations[k].to_numpy()) for k in durations.columns}).T.reindex(
        columns=list(STAT_NAMES)
    )


def ttx(tasks: pd.DataFrame) -> float:
    """Last exec_stop - first exec_start (NaN if no task ran)."""
    start, stop = event_time(tasks, E.EXEC_START), event_time(tasks, E.EXEC_STOP)
    if np.all(np.isnan(start)) or np.all(np.isnan(stop)):
        return float("nan")
    return float(np.nanmax(stop) - np.nanmin(start))


def makespan(tasks: pd.DataFrame) -> float:
    """Last final state - first NEW (NaN without both)."""
    new, final = event_time(tasks, "NEW"), event_time(tasks, "t_final")
    if np.all(np.isnan(new)) or np.all(np.isnan(final)):
        return float("nan")
    return float(np.nanmax(final) - np.nanmin(new))


WAIT_COLUMNS = (
    "shape",
    "ranks",
    "cores_per_rank",
    "gpus_per_rank",
    "tasks",
    "never_placed",
    "mean",
    "median",
    "p95",
    "max",
    "total",
    "share",
)


def shape_label(ranks: int, cores_per_rank: int, gpus_per_rank: int) -> str:
    """'2 × 4 cores + 1 GPU' (per rank)."""
    text = f"{ranks} × {cores_per_rank} core{'s' if cores_per_rank != 1 else ''}"
    if gpus_per_rank:
        text += f" + {gpus_per_rank} GPU{'s' if gpus_per_rank != 1 else ''}"
    return text


def waits_by_shape(tasks: pd.DataFrame, top: int = 20, end: float | None = None) -> pd.DataFrame:
    """Who waited: time in the agent's scheduler (AGENT_SCHEDULING -> schedule_ok; a task
    never placed waited until its final state, or if it has none until `end` -- the session's
    end, as analyze() passes it; default: the tasks' last event) per
    request shape (ranks, cores per rank, GPUs per rank). One row per shape (WAIT_COLUMNS):
    tasks, never placed, mean / median / p95 / max seconds, total task-seconds waited and
    its share of all waiting; the shapes that waited longest in total first, those after
    `top` summed in one last row ("other shapes")."""
    empty = pd.DataFrame(columns=list(WAIT_COLUMNS))
    if not len(tasks) or "AGENT_SCHEDULING" not in tasks:
        return empty
    arrived = event_time(tasks, "AGENT_SCHEDULING")
    placed = event_time(tasks, E.SCHEDULE_OK)
    final = event_time(tasks, "t_final")
    times = np.concatenate([arrived, placed, final])
    last = float(np.nanmax(times)) if np.isfinite(times).any() else np.nan
    if end is not None and not np.isnan(last):
        last = max(last, end)
    never = np.isnan(placed)
    until = np.where(never, np.where(np.isnan(final), last, final), placed)
    wait = until - arrived
    keep = ~np.isnan(arrived) & ~np.isnan(wait)
    if not keep.any():
        return empty
    df = pd.DataFrame(
        {
            "ranks": tasks["ranks"].to_numpy(np.int64)[keep],
            "cores_per_rank": tasks["cores_per_rank"].to_numpy(np.int64)[keep],
            "gpus_per_rank": tasks["gpus_per_rank"].to_numpy(np.int64)[keep],
            "wait": np.maximum(wait[keep], 0.0),
            "never": never[keep],
        }
    )
    g = df.groupby(["ranks", "cores_per_rank", "gpus_per_rank"], sort=False)
    rows = g["wait"].agg(tasks="count", mean="mean", median="median", max="max", total="sum")
    rows["p95"] = g["wait"].quantile(0.95)
    rows["never_placed"] = g["never"].sum().astype(np.int64)
    rows = rows.reset_index().sort_values(["total", "max"], ascending=False, kind="stable")
    grand = float(df["wait"].sum())
    if len(rows) > top:
        rest = rows.iloc[top:]
        other = {
            "ranks": 0,
            "cores_per_rank": 0,
            "gpus_per_rank": 0,
            "tasks": int(rest["tasks"].sum()),
            "never_placed": int(rest["never_placed"].sum()),
            "mean": float(rest["total"].sum() / rest["tasks"].sum()),
            "median": np.nan,
            "p95": np.nan,
            "max": float(rest["max"].max()),
            "total": float(rest["total"].sum()),
        }
        rows = pd.concat([rows.iloc[:top], pd.DataFrame([other])], ignore_index=True)
        labels = [
            shape_label(r, c, gp)
            for r, c, gp in rows[["ranks", "cores_per_rank", "gpus_per_rank"]].to_numpy()[:-1]
        ]
        labels.append(f"other shapes ({len(rest)})")
    else:
        rows = rows.reset_index(drop=True)
        labels = [
            shape_label(r, c, gp)
            for r, c, gp in rows[["ranks", "cores_per_rank", "gpus_per_rank"]].to_numpy()
        ]
    rows["shape"] = labels
    rows["share"] = rows["total"] / grand if grand > 0 else 0.0
    return rows[list(WAIT_COLUMNS)]
