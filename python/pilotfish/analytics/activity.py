"""Concurrency per state and throughput over time.

Concurrency: a task is in one step of its life at a time (the steps of durations.STEPS:
queue_wait, scheduling, setup, run, output). Here a missing event is filled with the task's
next known event (so a task canceled while queued leaves the queue at its final state), and
a task still alive at the end stays to the end of the session. The number of tasks per step
is a step function of time from sorted +1/-1 deltas (no loop per task).

Throughput: tasks reaching a final state (and tasks starting their payload) per second.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pilotfish.analytics.durations import STEPS, event_time
from pilotfish.analytics.steps import boundary_bin_means, interval_peak

CONCURRENCY_LABELS = {
    "queue_wait": "Queued",
    "scheduling": "Scheduling",
    "setup": "Setup",
    "run": "Running",
    "output": "Output",
}


def _boundaries(tasks: pd.DataFrame, t_end: float) -> np.ndarray:
    """(n, 6) times: NEW, AGENT_SCHEDULING, schedule_ok, payload start, exec_stop, final;
    missing ones take the next present one, a missing final takes t_end."""
    names = [STEPS[0][2]] + [b for _, _, _, b in STEPS]
    b = np.stack([event_time(tasks, n) for n in names], axis=1)
    b[:, -1] = np.where(np.isnan(b[:, -1]), t_end, b[:, -1])
    for k in range(b.shape[1] - 2, -1, -1):
        b[:, k] = np.where(np.isnan(b[:, k]), b[:, k + 1], b[:, k])
    return np.maximum.accumulate(b, axis=1)


class Concurrency:
    """Which step each task is in over time: the tasks' step boundaries (n, 6)."""

    def __init__(self, tasks: pd.DataFrame, t_end: float):
        self.bounds = _boundaries(tasks, t_end)

    def interval(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        k = [s[0] for s in STEPS].index(key)
        return self.bounds[:, k], self.bounds[:, k + 1]

    def peaks(self) -> dict[str, int]:
        """Most tasks in each step at once."""
        return {key: interval_peak(*self.interval(key)) for key, *_ in STEPS}

    def over_time(self, edges: np.ndarray) -> pd.DataFrame:
        """Mean number of tasks per step in each time bin (rows: bins)."""
        means = boundary_bin_means(self.bounds, 1.0, edges)
        df = pd.DataFrame({key: m for (key, *_), m in zip(STEPS, means)})
        df.index = pd.Index((edges[:-1] + edges[1:]) / 2, name="t")
        return df


def throughput_over_time(tasks: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Tasks per second in each time bin: payloads started, and tasks reaching each final
    state."""
    width = np.diff(edges)
    out = {}
    started = event_time(tasks, "payload_start")
    out["started"] = np.histogram(started[~np.isnan(started)], edges)[0] / width
    final = event_time(tasks, "t_final")
    state = (
        tasks["state"].astype(object).to_numpy() if "state" in tasks else np.full(len(tasks), None)
    )
    for s in ("DONE", "FAILED", "CANCELED"):
        sel = (state == s) & ~np.isnan(final)
        out[s] = np.histogram(final[sel], edges)[0] / width
    df = pd.DataFrame(out)
    df.index = pd.Index((edges[:-1] + edges[1:]) / 2, name="t")
    df.attrs["edges"] = edges
    return df


def throughput_summary(tasks: pd.DataFrame) -> dict[str, float]:
    """Mean rate of payload starts over TTX-like span, and the peak over 1-second bins, of
    started and of finished (any final state) tasks."""
    out: dict[str, float] = {}
    for key, t in (
        ("started", event_time(tasks, "payload_start")),
        ("finished", event_time(tasks, "t_final")),
    ):
        t = t[~np.isnan(t)]
        if len(t) < 2 or t.max() <= t.min():
            out[f"{key}_mean_per_s"] = float("nan")
            out[f"{key}_peak_per_s"] = float(len(t))
            continue
        out[f"{key}_mean_per_s"] = float(len(t) / (t.max() - t.min()))
        counts = np.bincount(np.floor(t - t.min()).astype(np.int64))
        out[f"{key}_peak_per_s"] = float(counts.max())
    return out
