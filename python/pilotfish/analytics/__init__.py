"""pilotfish.analytics: a session's events -> DataFrames -> metrics -> report.

    from pilotfish import analytics as pa
    data = pa.load_session("sessions/s.0001")     # DataFrames: data.tasks, data.pilots, ...
    a = pa.analyze(data)                          # TTX, RU per phase, per-task durations
    a.ttx, a.utilization["cores"].shares, a.duration_stats
    pa.write_report(a, "out/")                    # report.html + PNGs (+ metrics.json)

The resource-utilization phase model is defined in `pilotfish.analytics.utilization`; the
per-task steps and TTX in `pilotfish.analytics.durations`.
"""

from pilotfish.analytics.activity import Concurrency, throughput_over_time
from pilotfish.analytics.durations import duration_stats, makespan, task_durations, ttx
from pilotfish.analytics.metrics import Analysis, analyze, compute_metrics
from pilotfish.analytics.session import SessionData, load_session
from pilotfish.analytics.utilization import (
    PHASE_KEYS,
    PHASE_LABELS,
    PHASES,
    Utilization,
    resource_utilization,
    utilization_over_time,
)


def write_report(analysis, out_dir, as_json=True):
    """Write report.html, the PNG plots (and metrics.json) into out_dir; returns the paths."""
    from pilotfish.analytics.report import write_report as _write

    return _write(analysis, out_dir, as_json=as_json)


__all__ = [
    "Analysis",
    "Concurrency",
    "PHASES",
    "PHASE_KEYS",
    "PHASE_LABELS",
    "SessionData",
    "Utilization",
    "analyze",
    "compute_metrics",
    "duration_stats",
    "load_session",
    "makespan",
    "resource_utilization",
    "task_durations",
    "throughput_over_time",
    "ttx",
    "utilization_over_time",
    "write_report",
]
