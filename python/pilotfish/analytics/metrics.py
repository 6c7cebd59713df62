"""All metrics of a session in one object, and as JSON.

a = analyze("path/to/session")          # or analyze(load_session(...))
a.ttx, a.utilization["cores"].shares, a.duration_stats, a.waits_by_shape, a.to_json()
a.series(bins=600)                      # over-time DataFrames for plots
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pilotfish.analytics import activity, durations, utilization as ru
from pilotfish.analytics.session import SessionData, load_session


@dataclass
class Analysis:
    data: SessionData
    ttx: float
    makespan: float
    utilization: dict[str, ru.Utilization]
    durations: pd.DataFrame  # per task
    duration_stats: pd.DataFrame  # per step: count, mean, median, q3, p95, min, max
    state_counts: dict[str, int]
    throughput: dict[str, float]
    concurrency: activity.Concurrency = field(repr=False)
    waits_by_shape: pd.DataFrame = field(default_factory=pd.DataFrame)  # durations.waits_by_shape

    @property
    def t_range(self) -> tuple[float, float]:
        """(first, last) time worth showing: pilots' lives and tasks' lives."""
        lo, hi = [], []
        for w in ru.pilot_windows(self.data.pilots):
            lo.append(w.t_boot)
            hi.append(w.t_end)
        t = self.data.tasks
        for name in ("NEW", "t_final"):
            if name in t and t[name].notna().any():
                lo.append(float(t[name].min()))
                hi.append(float(t[name].max()))
        if not lo:
            return 0.0, 1.0
        a, b = min(lo), max(hi)
        return a, (b if b > a else a + 1.0)

    def edges(self, bins: int = 600) -> np.ndarray:
        a, b = self.t_range
        return np.linspace(a, b, bins + 1)

    def series(self, bins: int = 600, throughput_bins: int = 150) -> dict[str, pd.DataFrame]:
        """Over-time DataFrames: utilization_cores, utilization_gpus (mean resources per
        phase), concurrency (mean tasks per step), throughput (tasks/s; coarser bins, as
        rates of discrete events are noisy)."""
        edges = self.edges(bins)
        out = {
            f"utilization_{k}": ru.utilization_over_time(u, self.data.pilots, edges)
            for k, u in self.utilization.items()
        }
        out["concurrency"] = self.concurrency.over_time(edges)
        out["throughput"] = activity.throughput_over_time(
            self.data.tasks, self.edges(throughput_bins)
        )
        return out

    @cached_property
    def partitions(self) -> list[dict]:
        """Per partition of each pilot: nodes, launcher, start/ready/stop, tasks, utilization
        (analytics/partitions.py)."""
        from pilotfish.analytics.partitions import partitions

        return partitions(self.data)

    @cached_property
    def plans(self) -> list[dict]:
        """Per pilot: the scheduler's planning attempts and learned durations
        (analytics/plans.py)."""
        from pilotfish.analytics.plans import plans

        return plans(self.data)

    @cached_property
    def concurrency_peaks(self) -> dict[str, int]:
        return self.concurrency.peaks()

    def summary_table(self) -> pd.DataFrame:
        """The seeds' Table 1 row: RU share per phase (%), cores and GPUs."""
        return pd.DataFrame(
            {
                kind: {ru.PHASE_LABELS[k]: 100 * v for k, v in u.shares.items()}
                for kind, u in self.utilization.items()
            }
        )

    def to_json(self) -> dict:
        d = self.data
        pilots = []
        for w in ru.pilot_windows(d.pilots):
            p = d.pilots.loc[w.uid]
            pilots.append(
                {
                    "uid": w.uid,
                    "nodes": int(p["nodes"]),
                    "cores": w.total["cores"],
                    "gpus": w.total["gpus"],
                    "agent_cores": w.agent["cores"],
                    "agent_gpus": w.agent["gpus"],
                    "launcher": p.get("launcher"),
                    "state": p.get("state"),
                    "startup_s": w.t_active - w.t_boot,
                    "active_s": w.t_stop - w.t_active,
                    "termination_s": w.t_end - w.t_stop,
                    "lifetime_s": w.t_end - w.t_boot,
                }
            )
        util = {}
        for kind, u in self.utilization.items():
            util[kind] = {
                "available_s": u.available,
                "allocated_idle_s": u.available - sum(u.phases[k] for k in ru.TASK_PHASES),
                "oversubscribed_s": u.oversubscribed,
                "phases": {
                    k: {
                        "label": ru.PHASE_LABELS[k],
                        "resource_s": u.phases[k],
                        "share": u.shares[k],
                    }
                    for k in ru.PHASE_KEYS
                },
                "per_pilot": u.per_pilot,
            }
        return _clean(
            {
                "session": {"uid": d.uid, "path": os.path.abspath(d.path), "t0": d.t0},
                "simulated": d.simulated,
                "tasks": {"total": int(len(d.tasks)), "by_state": self.state_counts},
                "pilots": pilots,
                "ttx_s": self.ttx,
                "makespan_s": self.makespan,
                "utilization": util,
                "durations": {
                    k: {"label": durations.DURATION_LABELS[k], **row}
                    for k, row in self.duration_stats.to_dict(orient="index").items()
                },
                "throughput": self.throughput,
                "waits_by_shape": self.waits_by_shape.to_dict(orient="records"),
                "concurrency_peak": self.concurrency_peaks,
                "partitions": self.partitions,
                "plans": self.plans,
                "warnings": d.warnings,
            }
        )


def _clean(x):
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if not math.isfinite(float(x)) else float(x)
    if x is pd.NA or (x is not None and not isinstance(x, str) and pd.isna(x) is True):
        return None
    return x


def analyze(session: "SessionData | str | os.PathLike") -> Analysis:
    data = session if isinstance(session, SessionData) else load_session(session)
    tasks = data.tasks
    util = ru.resource_utilization(tasks, data.pilots)
    per_task = durations.task_durations(tasks)
    counts = tasks["state"].value_counts(dropna=False)
    state_counts = {str(k) if pd.notna(k) else "unknown": int(v) for k, v in counts.items() if v}
    # the end of the session: tasks still alive then count as in their step until it
    finals = durations.event_time(tasks, "t_final")
    ends = [w.t_end for w in ru.pilot_windows(data.pilots)]
    if np.isfinite(finals).any():
        ends.append(float(np.nanmax(finals)))
    t_end = max(ends) if ends else 0.0
    return Analysis(
        data=data,
        ttx=durations.ttx(tasks),
        makespan=durations.makespan(tasks),
        utilization=util,
        durations=per_task,
        duration_stats=durations.duration_stats(per_task),
        state_counts=state_counts,
        throughput=activity.throughput_summary(tasks),
        concurrency=activity.Concurrency(tasks, t_end),
        waits_by_shape=durations.waits_by_shape(tasks, end=t_end),
    )


def compute_metrics(session: "SessionData | str | os.PathLike") -> dict:
    """The metrics of a session as a JSON-able dict (what `pilotfish report --json` writes)."""
    return analyze(session).to_json()
