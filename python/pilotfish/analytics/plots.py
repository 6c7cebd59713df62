"""The report's figures (matplotlib, Agg). Each function returns a Figure; nothing here loops
over tasks: everything is drawn from binned series, histograms or quantiles."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 -- after matplotlib.use("Agg")
import numpy as np  # noqa: E402 -- after matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402 -- after matplotlib.use("Agg")
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter  # noqa: E402 -- after matplotlib.use("Agg")

from pilotfish import _events as E  # noqa: E402 -- after matplotlib.use("Agg")
from pilotfish.analytics import utilization as ru  # noqa: E402 -- after matplotlib.use("Agg")
from pilotfish.analytics.activity import CONCURRENCY_LABELS  # noqa: E402 -- after matplotlib.use("Agg")
from pilotfish.analytics.durations import DURATION_LABELS, STEPS  # noqa: E402 -- after matplotlib.use("Agg")

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# Overheads warm, the workload a strong teal, unused resources grey: the eye should find the
# share of useful work first (the seeds' figures use the same grouping).
PHASE_COLORS = {
    "agent_nodes": "#7f3b08",
    "pilot_startup": "#3b6fb6",
    "warmup": "#f4a259",
    "prepare_execution": "#a6d96a",
    "exec_runtime": "#d7301f",
    "exec_launcher": "#9e6bb5",
    "exec_cmd": "#17877b",
    E.UNSCHEDULE: "#e9c46a",
    "draining": "#4d7c2f",
    "pilot_termination": "#8d99ae",
    "idle": "#e3e6ea",
}
STEP_COLORS = {
    "queue_wait": "#8d99ae",
    "scheduling": "#f4a259",
    "setup": "#d7301f",
    "run": "#17877b",
    "output": "#3b6fb6",
}
FINAL_COLORS = {"started": "#3b6fb6", "DONE": "#17877b", "FAILED": "#d7301f", "CANCELED": "#8d99ae"}
TEXT = "#2b2d42"
GRID = "#d9dce1"

STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelcolor": TEXT,
    "axes.edgecolor": "#9aa0a6",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": GRID,
    "grid.linewidth": 0.6,
    "xtick.color": TEXT,
    "ytick.color": TEXT,
    "legend.frameon": False,
    "legend.fontsize": 9,
}


def format_seconds(x, _pos=None) -> str:
    """Tick label for a duration in seconds: 250 us, 12 ms, 3.4 s, 5 min, 2 h."""
    x = float(x)
    if x == 0:
        return "0"
    a = abs(x)
    for unit, scale in (("h", 3600), ("min", 60), ("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if a >= scale * (1 if unit not in ("h", "min") else 2):
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


# Fixed margins (inches) rather than a layout engine: every figure has the same frame (the
# legend in the right margin), and constrained layout would double the drawing time.
_MARGIN = dict(left=0.85, right=2.75, top=0.42, bottom=0.62, between=0.75)


def _new(rows: int = 1, height: float = 3.6, width: float = 11.0, sharex: bool = True):
    fig_h = height * rows
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, 1, figsize=(width, fig_h), sharex=sharex, squeeze=False)
    m = _MARGIN
    panel = (fig_h - m["top"] - m["bottom"] - m["between"] * (rows - 1)) / rows
    fig.subplots_adjust(
        left=m["left"] / width,
        right=1 - m["right"] / width,
        bottom=m["bottom"] / fig_h,
        top=1 - m["top"] / fig_h,
        hspace=m["between"] / panel,
    )
    return fig, list(axes[:, 0])


def _pilot_markers(ax, analysis, label: bool) -> None:
    """Thin dashed lines where pilots became active and where their agents stopped."""
    first = True
    for w in ru.pilot_windows(analysis.data.pilots):
        for t in (w.t_active, w.t_stop):
            ax.axvline(
                t,
                color="#5c6370",
                lw=0.8,
                ls=(0, (4, 3)),
                zorder=5,
                label="pilot active / agent stop" if label and first else None,
            )
            first = False


def utilization_figure(analysis, series) -> Figure:
    """Resources per phase over time, stacked (cores; GPUs below when the pilots have any)."""
    kinds = [k for k in ru.KINDS if analysis.utilization[k].available > 0]
    kinds = kinds or ["cores"]
    with plt.rc_context(STYLE):
        fig, axes = _new(len(kinds), height=3.9)
        for ax, kind in zip(axes, kinds):
            df = series[f"utilization_{kind}"]
            u = analysis.utilization[kind]
            shares = u.shares
            keys = [k for k in ru.PHASE_KEYS if u.phases[k] > 0 or k in ("exec_cmd", "idle")]
            t = df.index.to_numpy()
            ax.stackplot(
                t,
                [np.clip(df[k].to_numpy(), 0, None) for k in keys],
                colors=[PHASE_COLORS[k] for k in keys],
                linewidth=0,
                labels=[f"{ru.PHASE_LABELS[k]}  {100 * shares[k]:.1f}%" for k in keys],
            )
            ax.plot(t, df["capacity"].to_numpy(), color=TEXT, lw=0.9, label="held by pilots")
            _pilot_markers(ax, analysis, label=True)
            unit = "core" if kind == "cores" else "GPU"
            ax.set_ylabel(f"{unit}s")
            title_unit = unit.capitalize() if unit == "core" else unit
            ax.set_ylim(0, max(1.0, float(df["capacity"].max()) * 1.04))
            ax.set_xlim(t[0] - (t[1] - t[0]) / 2 if len(t) > 1 else 0, t[-1])
            ax.set_title(
                f"{title_unit} utilization over time  ·  workload (Exec cmd) "
                f"{100 * shares['exec_cmd']:.1f}% of {u.available:,.0f} {unit}-seconds"
            )
            handles, labels = ax.get_legend_handles_labels()
            ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.005, 1.0))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # cores and GPUs are whole
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        axes[-1].set_xlabel("time since session start (s)")
    return fig


def ru_breakdown_figure(analysis) -> Figure:
    """One 100% bar per resource kind, split by phase: the seeds' Table 1 at a glance."""
    kinds = [k for k in ru.KINDS if analysis.utilization[k].available > 0] or ["cores"]
    with plt.rc_context(STYLE):
        height = 1.75 + 0.55 * len(kinds)
        fig, (ax,) = _new(1, height=height)
        # this one is wide and short: the legend goes below, the bars take the full width
        fig.subplots_adjust(right=1 - 0.35 / 11.0, bottom=1.25 / height)
        labeled: set[str] = set()
        for row, kind in enumerate(kinds):
            left = 0.0
            shares = analysis.utilization[kind].shares
            for k in ru.PHASE_KEYS:
                s = shares[k]
                if s <= 0:
                    continue
                ax.barh(
                    row,
                    s,
                    left=left,
                    color=PHASE_COLORS[k],
                    height=0.62,
                    label=None if k in labeled else ru.PHASE_LABELS[k],
                )
                labeled.add(k)
                if s >= 0.06:
                    dark = k in (
                        "agent_nodes",
                        "pilot_startup",
                        "exec_runtime",
                        "exec_cmd",
                        "draining",
                        "exec_launcher",
                    )
                    ax.text(
                        left + s / 2,
                        row,
                        f"{100 * s:.1f}%",
                        ha="center",
                        va="center",
                        fontsize=9,
                        color="white" if dark else TEXT,
                    )
                left += s
        ax.set_yticks(range(len(kinds)), ["cores" if k == "cores" else "GPUs" for k in kinds])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.grid(axis="y", visible=False)
        ax.set_title("Resource utilization by phase (share of available resource-seconds)")
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(
            range(len(labels)),
            key=lambda i: [ru.PHASE_LABELS[k] for k in ru.PHASE_KEYS].index(labels[i]),
        )
        ax.legend(
            [handles[i] for i in order],
            [labels[i] for i in order],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.42 if len(kinds) > 1 else -0.6),
            ncol=6,
            columnspacing=1.4,
            handlelength=1.2,
        )
    return fig


def concurrency_figure(analysis, series) -> Figure:
    df = series["concurrency"]
    t = df.index.to_numpy()
    with plt.rc_context(STYLE):
        fig, (ax,) = _new(1, height=3.6)
        peaks = analysis.concurrency_peaks
        for key, label in CONCURRENCY_LABELS.items():
            y = df[key].to_numpy()
            ax.plot(t, y, color=STEP_COLORS[key], lw=1.6, label=f"{label}  (peak {peaks[key]:,})")
            ax.fill_between(t, y, color=STEP_COLORS[key], alpha=0.08, lw=0)
        top = max(1.0, float(df.to_numpy().max()))
        nonzero = [float(df[k].max()) for k in df.columns if df[k].max() > 0]
        if nonzero and max(nonzero) / max(min(nonzero), 1e-9) > 50:
            ax.set_yscale("symlog", linthresh=1.0)
            ax.set_ylim(0, top * 1.5)
        else:
            ax.set_ylim(0, top * 1.08)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        _pilot_markers(ax, analysis, label=False)
        ax.set_xlim(t[0], t[-1])
        ax.set_ylabel("tasks")
        ax.set_xlabel("time since session start (s)")
        ax.set_title("Tasks per state over time (mean per time bin)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return fig


def throughput_figure(analysis, series) -> Figure:
    df = series["throughput"]
    edges = df.attrs["edges"]
    with plt.rc_context(STYLE):
        fig, (ax,) = _new(1, height=3.4)
        bottom = np.zeros(len(df))
        for s in ("DONE", "FAILED", "CANCELED"):
            y = df[s].to_numpy()
            if y.any():
                ax.stairs(
                    bottom + y,
                    edges,
                    baseline=bottom,
                    fill=True,
                    color=FINAL_COLORS[s],
                    alpha=0.85,
                    label=f"finished: {s}",
                )
                bottom = bottom + y
        ax.stairs(
            df["started"].to_numpy(),
            edges,
            color=FINAL_COLORS["started"],
            lw=1.4,
            label="payloads started",
        )
        tp = analysis.throughput
        mean = tp.get("finished_mean_per_s")
        title = f"Throughput (tasks per second, {format_seconds(edges[1] - edges[0])} bins)"
        if mean and np.isfinite(mean):
            title += f"  ·  finished: mean {mean:,.1f}/s, peak {tp['finished_peak_per_s']:,.0f}/s"
        ax.set_title(title)
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylim(0, None)
        ax.set_ylabel("tasks / s")
        ax.set_xlabel("time since session start (s)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return fig


def _log_bins(v: np.ndarray, n: int = 60) -> np.ndarray:
    lo = max(float(v[v > 0].min()) if (v > 0).any() else 1e-6, 1e-7)
    hi = max(float(v.max()), lo * 10)
    return np.geomspace(lo / 1.05, hi * 1.05, n + 1)


def setup_histogram_figure(analysis) -> Figure:
    """Distribution of task setup time (schedule_ok -> payload start): the seeds' Table 2."""
    v = analysis.durations["setup"].to_numpy()
    v = v[~np.isnan(v)]
    with plt.rc_context(STYLE):
        fig, (ax,) = _new(1, height=3.6)
        if not len(v):
            ax.text(
                0.5,
                0.5,
                "no task reached its payload",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color=TEXT,
            )
            ax.set_title("Task setup time")
            return fig
        zeros = int((v <= 0).sum())
        pos = v[v > 0]
        if len(pos):
            bins = _log_bins(pos)
            counts, edges = np.histogram(pos, bins)
            ax.stairs(counts, edges, fill=True, color=STEP_COLORS["setup"], alpha=0.75)
            ax.stairs(counts, edges, color=STEP_COLORS["setup"], lw=1.0)
            ax.set_xscale("log")
        st = analysis.duration_stats.loc["setup"]
        for name, ls in (("mean", "-"), ("median", "--"), ("q3", ":")):
            x = float(st[name])
            if x > 0:
                ax.axvline(x, color=TEXT, lw=1.1, ls=ls, label=f"{name} {format_seconds(x)}")
        ax.xaxis.set_major_formatter(FuncFormatter(format_seconds))
        ax.set_xlabel("setup time: placed (schedule_ok) → payload started (launch_ok / exec_ok)")
        ax.set_ylabel("tasks")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:,.0f}"))
        title = f"Task setup time  ·  {len(v):,} tasks"
        if zeros:
            title += f" ({zeros:,} at 0 s not shown)"
        ax.set_title(title)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return fig


def durations_figure(analysis) -> Figure:
    """Cumulative distribution of every per-task step (log time axis)."""
    with plt.rc_context(STYLE):
        fig, (ax,) = _new(1, height=3.6)
        q = np.linspace(0, 1, 801)
        drawn = False
        for key, label, *_ in STEPS:
            v = analysis.durations[key].to_numpy()
            v = v[~np.isnan(v) & (v > 0)]
            if not len(v):
                continue
            v.sort()  # one sort gives every quantile (np.quantile re-partitions per q)
            x = v[np.minimum((q * (len(v) - 1)).round().astype(np.intp), len(v) - 1)]
            ax.plot(
                x,
                q,
                color=STEP_COLORS[key],
                lw=1.8,
                label=f"{DURATION_LABELS[key]}  (median {format_seconds(v[len(v) // 2])})",
            )
            drawn = True
        if drawn:
            ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(format_seconds))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.01)
        ax.set_xlabel("duration")
        ax.set_ylabel("share of tasks ≤ duration")
        ax.set_title("Per-task durations by step (cumulative distribution)")
        if drawn:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return fig


def elastic_figure(nodes: dict, members: dict) -> Figure:
    """Nodes per pilot and members per service group over time (steps)."""
    rows = 2 if nodes and members else 1
    fig, axes = _new(rows, height=2.8)
    with plt.rc_context(STYLE):
        panels = ([("nodes", nodes)] if nodes else []) + ([("members", members)] if members else [])
        for ax, (what, series) in zip(axes, panels):
            end = max(t for v in list(nodes.values()) + list(members.values()) for t, _ in v)
            for label, points in series.items():
                ts = [t for t, _ in points] + [end]
                ys = [n for _, n in points] + [points[-1][1]]
                ax.step(ts, ys, where="post", lw=1.6, label=label)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
            ax.set_ylabel(what)
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0))
        axes[-1].xaxis.set_major_formatter(FuncFormatter(format_seconds))
        axes[-1].set_xlabel("time since session start")
        axes[0].set_title("Elasticity: pilot nodes and service-group members over time")
    return fig


def all_figures(analysis, series) -> dict[str, Figure]:
    """name -> Figure, in report order (elasticity only where something grew or served)."""
    from .elastic import elastic_series

    nodes, members = elastic_series(analysis.data)
    extra = {"elastic": elastic_figure(nodes, members)} if nodes or members else {}
    figures = {
        "utilization": utilization_figure(analysis, series),
        "ru_breakdown": ru_breakdown_figure(analysis),
        "concurrency": concurrency_figure(analysis, series),
        "throughput": throughput_figure(analysis, series),
        "setup_histogram": setup_histogram_figure(analysis),
        "durations": durations_figure(analysis),
    }
    figures.update(extra)
    return figures
