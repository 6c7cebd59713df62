"""`pilotfish report SESSION_DIR`: one self-contained HTML file (plots embedded as base64
PNG, no network: a Content-Security-Policy forbids any fetch), the PNGs beside it, and
metrics.json with --json.

The CLI calls report_main(session_dir, out_dir, as_json).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import os
import sys
import time

import matplotlib.pyplot as plt
import numpy as np

from pilotfish import _events as E
from pilotfish.analytics import plots, utilization as ru
from pilotfish.analytics.durations import DURATIONS
from pilotfish.analytics.metrics import Analysis, analyze

DEFAULT_BINS = 600
CAPTIONS = {
    "utilization": "Resources held by the pilots over time, stacked by what they were used or "
    "blocked for (mean per time bin). Dashed lines: pilots becoming active and "
    "their agents stopping.",
    "ru_breakdown": "Share of the available core- and GPU-seconds per phase; each bar sums to 100%.",
    "concurrency": "Number of tasks in each step of their life over time.",
    "throughput": "Tasks reaching a final state per second (bars, by state) and payloads started "
    "per second (line).",
    "setup_histogram": "Per-task setup time: resources held before the payload runs "
    "(prepare, spawn, launcher). Log-spaced bins.",
    "durations": "Cumulative distribution of each per-task step.",
    "elastic": "Nodes held by each pilot (grow, shrink) and members in each service group's "
    "view (one step per epoch) over time.",
}
TITLES = {
    "utilization": "Utilization over time",
    "ru_breakdown": "Utilization breakdown",
    "concurrency": "Concurrency per state",
    "throughput": "Throughput",
    "setup_histogram": "Setup-time histogram",
    "durations": "Per-task durations",
    "elastic": "Elasticity over time",
}
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # compress_level 3: a third of the default's encoding time for ~10% larger files
    fig.savefig(buf, format="png", dpi=110, facecolor="white", pil_kwargs={"compress_level": 3})
    plt.close(fig)
    return buf.getvalue()


def _s(x) -> str:
    """A duration for humans."""
    if x is None or not np.isfinite(x):
        return "–"
    return plots.format_seconds(x)


def _pct(x) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{100 * x:.3f}%"


def _num(x, digits: int = 0) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _ru_table(a: Analysis) -> str:
    kinds = [k for k in ru.KINDS if a.utilization[k].available > 0] or ["cores"]
    header = (
        ["Phase"]
        + [f"{k} %" for k in kinds]
        + [f"{k[:-1]}-seconds" for k in kinds]
        + ["What it counts"]
    )
    rows = []
    for key in ru.PHASE_KEYS:
        swatch = f'<span class="sw" style="background:{plots.PHASE_COLORS[key]}"></span>'
        row = [swatch + html.escape(ru.PHASE_LABELS[key])]
        row += [_pct(a.utilization[k].shares[key]) for k in kinds]
        row += [_num(a.utilization[k].phases[key], 1) for k in kinds]
        row.append(f'<span class="def">{html.escape(ru.PHASE_DEFINITIONS[key])}</span>')
        rows.append(row)
    rows.append(
        ["<b>Available</b>"]
        + ["100%" for _ in kinds]
        + [f"<b>{_num(a.utilization[k].available, 1)}</b>" for k in kinds]
        + [
            '<span class="def">resources held × (final state − bootstrap_start), summed over pilots</span>'
        ]
    )
    return _table(header, rows, "num ru")


def _durations_table(a: Analysis) -> str:
    header = ["Step", "from → to", "tasks", "mean", "median", "q3", "p95", "max"]
    rows = []
    for key, label, start, end in DURATIONS:
        st = a.duration_stats.loc[key]
        rows.append(
            [
                html.escape(label),
                f'<span class="def">{start} → {end}</span>',
                _num(st["count"]),
                _s(st["mean"]),
                _s(st["median"]),
                _s(st["q3"]),
                _s(st["p95"]),
                _s(st["max"]),
            ]
        )
    return _table(header, rows, "num dur")


def _waits_table(a: Analysis) -> str:
    """Who waited in the scheduler, per request shape (durations.waits_by_shape)."""
    w = a.waits_by_shape
    if not len(w):
        return ""
    header = [
        "Shape (ranks × per rank)",
        "tasks",
        "never placed",
        "mean",
        "median",
        "p95",
        "max",
        "task-seconds waited",
        "share",
    ]
    rows = [
        [
            html.escape(str(r["shape"])),
            _num(r["tasks"]),
            _num(r["never_placed"]),
            _s(r["mean"]),
            _s(r["median"]),
            _s(r["p95"]),
            _s(r["max"]),
            _num(r["total"], 1),
            _pct(r["share"]),
        ]
        for r in w.to_dict(orient="records")
    ]
    return (
        '<section id="waits-table"><h2>Waiting by task shape</h2>'
        '<p class="def">Time in the agent\'s scheduler, AGENT_SCHEDULING → schedule_ok (a task '
        "never placed: until its final state); the shapes that waited longest in total "
        "first.</p>" + _table(header, rows, "num dur") + "</section>"
    )


def _pilots_table(a: Analysis) -> str:
    header = [
        "Pilot",
        "state",
        "nodes",
        "cores",
        "GPUs",
        "agent cores",
        "launcher",
        "startup",
        "active",
        "termination",
    ]
    rows = []
    for w in ru.pilot_windows(a.data.pilots):
        p = a.data.pilots.loc[w.uid]
        rows.append(
            [
                html.escape(w.uid),
                html.escape(str(p.get("state") or "–")),
                _num(p["nodes"]),
                _num(w.total["cores"]),
                _num(w.total["gpus"]),
                _num(w.agent["cores"]),
                html.escape(str(p.get("launcher") or "–")),
                _s(w.t_active - w.t_boot),
                _s(w.t_stop - w.t_active),
                _s(w.t_end - w.t_stop),
            ]
        )
    return _table(header, rows, "num")


def _plans_table(a: Analysis) -> str:
    """The scheduler's plans and learned durations (policy "plan"); empty when none."""
    out = []
    for p in a.plans:
        head = (
            f"{html.escape(p['pilot'])}: {p['attempts']} planning attempts -- "
            f"{p['planned']} planned, {p['no_gain']} no gain, {p['out_of_time']} out of "
            f"time; {_num(p['cpu_s'], 2)} CPU s in all (at most {_num(p['cpu_s_max'], 2)}"
            f" s, {_num(p['tasks_max'])} tasks)"
            + (f"; best predicted gain {_pct(p['gain'])}" if p["gain"] else "")
        )
        rows = [
            [
                html.escape(str(e["executable"])),
                f"{e['ranks']} × ({e['cores_per_rank']} cores, {e['gpus_per_rank']} GPUs)",
                _num(e["samples"]),
                _s(e["mean_s"]),
                _s(e["std_s"]),
            ]
            for e in p["estimates"]
        ]
        out.append(
            f"<p>{head}</p>"
            + (
                _table(
                    ["Executable", "shape", "samples", "learned duration", "± (std)"], rows, "num"
                )
                if rows
                else ""
            )
        )
    if not out:
        return ""
    return (
        '<section id="plans"><h2>Scheduler: learned durations and plans</h2>'
        + "".join(out)
        + '<p class="def">learned duration: mean time a task of that kind '
        "held its slots (placed → released), from the tasks that ended by themselves; "
        "used where a task gives no duration.</p></section>"
    )


def _partitions_table(a: Analysis) -> str:
    """One row per partition (seed 000's per-DVM view); empty when every pilot has one."""
    parts = a.partitions
    if not any(p["index"] > 0 for p in parts):
        return ""
    header = [
        "Pilot",
        "partition",
        "nodes",
        "launcher",
        "start-up",
        "termination",
        "tasks",
        "busy core-s",
        "utilization",
    ]
    rows = []
    for p in parts:
        up = (
            (p["ready"] - p["start"]) if p["ready"] is not None and p["start"] is not None else None
        )
        rows.append(
            [
                html.escape(p["pilot"]),
                _num(p["index"]),
                f'{len(p["nodes"])} <span class="def">{html.escape(_span(p["nodes"]))}</span>',
                html.escape(str(p["launcher"] or "–")),
                _s(up),
                _s(_stop_time(a, p)),
                _num(p["tasks"]),
                _num(p["busy_core_s"], 1),
                _pct(p["utilization"]) if p["utilization"] is not None else "–",
            ]
        )
    return (
        f'<section id="partitions"><h2>Partitions</h2>{_table(header, rows, "num")}'
        '<p class="def">start-up: launcher_start → launcher_ready of the partition\'s '
        "launcher instance; termination: drain_stop → launcher_stop; utilization: busy "
        "core-seconds (placed → released) over the partition's cores × the pilot's "
        "lifetime.</p></section>"
    )


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}" if names else ""


def _stop_time(a: Analysis, p: dict):
    if p["stop"] is None:
        return None
    try:
        drain = float(a.data.pilots.loc[p["pilot"], E.DRAIN_STOP])
    except (KeyError, TypeError, ValueError):
        return None
    return p["stop"] - drain if np.isfinite(drain) else None


def _states_table(a: Analysis) -> str:
    total = sum(a.state_counts.values()) or 1
    rows = [
        [html.escape(s), _num(n), f"{100 * n / total:.2f}%"]
        for s, n in sorted(a.state_counts.items(), key=lambda kv: -kv[1])
    ]
    return _table(["Final state", "tasks", "share"], rows, "num")


MAX_ROWS = 200  # rows of the failed-tasks and groups tables (the rest is counted)


def _outcomes(a: Analysis) -> str:
    """The run by task group, and the tasks that did not end DONE with why (outcomes.py)."""
    from pilotfish.analytics import outcomes

    t = a.data.tasks
    groups = outcomes.by_group(t)
    out = ""
    if len(groups):
        header = [
            "Group (name)",
            "tasks",
            "DONE",
            "FAILED",
            "CANCELED",
            "not final",
            "median run",
            "run core-seconds",
        ]
        rows = [
            [
                html.escape(str(name)),
                _num(r["tasks"]),
                _num(r["DONE"]),
                _num(r["FAILED"]),
                _num(r["CANCELED"]),
                _num(r["other"]),
                _s(r["median_run"]),
                _num(r["core_seconds"], 1),
            ]
            for name, r in list(groups.iterrows())[:MAX_ROWS]
        ]
        more = len(groups) - MAX_ROWS
        out += (
            '<section id="groups"><h2>By task group</h2><p class="def">Run time: '
            "exec_start → exec_stop of each task that ran.</p>"
            + _table(header, rows, "num")
            + (f"<p>… and {more:,} more groups</p>" if more > 0 else "")
            + "</section>"
        )
    bad, total = (
        outcomes.not_done(t, outcomes.final_reasons(a.data.path), MAX_ROWS) if len(t) else ([], 0)
    )
    if bad:
        rows = [
            [
                html.escape(uid),
                html.escape(name),
                html.escape(state),
                "" if code is None else str(code),
                html.escape(why),
            ]
            for uid, name, state, code, why in bad
        ]
        more = total - len(bad)
        out += (
            '<section id="failed-tasks"><h2>Tasks that did not end DONE</h2>'
            + _table(["Task", "group", "state", "exit code", "reason"], rows)
            + (f"<p>… and {more:,} more</p>" if more > 0 else "")
            + "</section>"
        )
    return out


def _cards(a: Analysis) -> str:
    cores = a.utilization["cores"]
    gpus = a.utilization["gpus"]
    items = [
        ("TTX", _s(a.ttx), "first exec_start → last exec_stop"),
        ("Makespan", _s(a.makespan), "first NEW → last final state"),
        (
            "Tasks",
            _num(len(a.data.tasks)),
            ", ".join(f"{k} {v:,}" for k, v in a.state_counts.items()),
        ),
        (
            "Core RU (workload)",
            f"{100 * cores.shares['exec_cmd']:.1f}%" if cores.available else "–",
            f"of {_num(cores.available)} core-s",
        ),
    ]
    if gpus.available:
        items.append(
            (
                "GPU RU (workload)",
                f"{100 * gpus.shares['exec_cmd']:.1f}%",
                f"of {_num(gpus.available)} GPU-s",
            )
        )
    if cores.available:  # (the pilots' cores no task held: what an allocation policy trims)
        idle = cores.available - sum(cores.phases[k] for k in ru.TASK_PHASES)
        items.append(("Allocated, idle", f"{_num(idle)} core-s", "cores held by no task"))
    tp = a.throughput.get("finished_mean_per_s")
    items.append(
        (
            "Throughput",
            f"{_num(tp, 1)}/s" if tp and np.isfinite(tp) else "–",
            f"peak {_num(a.throughput.get('finished_peak_per_s'))}/s",
        )
    )
    st = a.duration_stats.loc["setup"]
    items.append(
        ("Setup time", _s(st["median"]), f"median; mean {_s(st['mean'])}, q3 {_s(st['q3'])}")
    )
    return "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div>'
        f'<div class="v">{v}</div><div class="n">{html.escape(n)}</div></div>'
        for k, v, n in items
    )


_CSS = """
:root { --text:#2b2d42; --muted:#6c757d; --line:#e3e6ea; --accent:#3d5a80; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif;
       color:var(--text); background:#f6f7f9; }
header { background:#1f2a3a; color:#fff; padding:22px 36px 18px; }
header h1 { margin:0; font-size:22px; font-weight:600; letter-spacing:.2px; }
header .sub { color:#c4ccd6; font-size:12.5px; margin-top:4px; }
main { max-width:1320px; margin:0 auto; padding:20px 36px 48px; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:18px 22px;
          margin:18px 0; }
h2 { font-size:16px; margin:0 0 12px; }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(150px, 1fr)); gap:12px; }
.card { background:#fff; border:1px solid var(--line); border-left:4px solid var(--accent);
        border-radius:6px; padding:10px 14px; }
.card .k { font-size:11.5px; text-transform:uppercase; letter-spacing:.6px; color:var(--muted); }
.card .v { font-size:22px; font-weight:600; margin:2px 0; }
.card .n { font-size:11.5px; color:var(--muted); }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { padding:5px 10px; border-bottom:1px solid var(--line); text-align:left; }
th { font-size:11.5px; text-transform:uppercase; letter-spacing:.4px; color:var(--muted);
     font-weight:600; }
table.num td:not(:first-child), table.num th:not(:first-child) { text-align:right;
     font-variant-numeric: tabular-nums; }
table.ru td:last-child, table.ru th:last-child { text-align:left; }
table.dur td:nth-child(2), table.dur th:nth-child(2) { text-align:left; }
.def { color:var(--muted); font-size:12px; }
.sw { display:inline-block; width:11px; height:11px; border-radius:2px; margin-right:8px;
      vertical-align:-1px; border:1px solid rgba(0,0,0,.12); }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:18px; }
figure { margin:0; }
figure img { width:100%; height:auto; display:block; }
figcaption { color:var(--muted); font-size:12.5px; margin-top:6px; }
.warn { background:#fff4e5; border-color:#f4a259; }
footer { color:var(--muted); font-size:12px; text-align:center; margin-top:24px; }
"""


def render_html(a: Analysis, pngs: dict[str, bytes]) -> str:
    d = a.data
    created = _dt.datetime.fromtimestamp(d.t0).strftime("%Y-%m-%d %H:%M:%S") if d.t0 else "–"
    figs = []
    for name, data in pngs.items():
        b64 = base64.b64encode(data).decode("ascii")
        figs.append(
            f'<section id="{name}"><h2>{html.escape(TITLES[name])}</h2><figure>'
            f'<img alt="{html.escape(TITLES[name])}" src="data:image/png;base64,{b64}" '
            # a plot that cannot be decoded is a console error (what the browser test checks)
            f"onerror=\"console.error('report plot failed to load: {name}')\">"
            f"<figcaption>{html.escape(CAPTIONS[name])}</figcaption></figure></section>"
        )
    warnings = ""
    if d.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in d.warnings)
        warnings = f'<section class="warn"><h2>Warnings</h2><ul>{items}</ul></section>'
    over = [k for k, u in a.utilization.items() if u.oversubscribed > 1e-9]
    if over:
        warnings += (
            '<section class="warn"><h2>Oversubscription</h2><p>Events show more '
            f"resources busy than held ({', '.join(over)}); Idle is reduced by the "
            "excess so the shares still sum to 100%.</p></section>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pilotfish report · {html.escape(d.uid)}</title>
<style>{_CSS}</style></head>
<body>
<header><h1>pilotfish session report · {html.escape(d.uid)}</h1>
<div class="sub">{"<b>simulated</b> (virtual clock: pilotfish.agent.simulation) · " if d.simulated else ""}{html.escape(os.path.abspath(d.path))} · started {created} ·
{len(d.tasks):,} tasks on {len(d.pilots):,} pilot(s)</div></header>
<main>
{warnings}
<section><div class="cards">{_cards(a)}</div></section>
<section id="ru-table"><h2>Resource utilization (RU) by phase</h2>{_ru_table(a)}</section>
{figs[0] if figs else ""}
{figs[1] if len(figs) > 1 else ""}
<section id="durations-table"><h2>Per-task durations</h2>{_durations_table(a)}</section>
{_waits_table(a)}
<div class="grid2">
<section><h2>Tasks by final state</h2>{_states_table(a)}</section>
<section><h2>Pilots</h2>{_pilots_table(a)}</section>
</div>
{_outcomes(a)}
{_partitions_table(a)}
{_plans_table(a)}
{"".join(figs[2:])}
<footer>Generated by pilotfish.analytics on {_dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")}.
Phase model: pilotfish/analytics/utilization.py; steps and TTX: durations.py.</footer>
</main>
<script>
// Marks how many plots decoded (body[data-plots-rendered] = "ok/total"); a plot that did not
// is a console error. Used by the headless-browser test; harmless elsewhere.
window.addEventListener("load", function () {{
  var imgs = document.querySelectorAll("figure img"), ok = 0;
  imgs.forEach(function (img) {{
    if (img.complete && img.naturalWidth > 0) ok++;
    else console.error("report plot not rendered: " + img.alt);
  }});
  document.body.setAttribute("data-plots-rendered", ok + "/" + imgs.length);
}});
</script>
</body></html>
"""


def write_report(
    analysis: Analysis, out_dir: str, as_json: bool = True, bins: int = DEFAULT_BINS
) -> dict[str, str]:
    """Write report.html, <plot>.png (and metrics.json) into out_dir; returns name -> path."""
    os.makedirs(out_dir, exist_ok=True)
    series = analysis.series(bins)
    pngs = {name: _png(fig) for name, fig in plots.all_figures(analysis, series).items()}
    paths = {}
    for name, data in pngs.items():
        p = os.path.join(out_dir, f"{name}.png")
        with open(p, "wb") as fh:
            fh.write(data)
        paths[name] = p
    p = os.path.join(out_dir, "report.html")
    with open(p, "w", encoding="utf-8") as fh:
        fh.write(render_html(analysis, pngs))
    paths["report"] = p
    if as_json:
        p = os.path.join(out_dir, "metrics.json")
        with open(p, "w") as fh:
            json.dump(analysis.to_json(), fh, indent=1)
        paths["metrics"] = p
    return paths


def report_main(session_dir: str, out_dir: str | None, as_json: bool) -> int:
    """Entry point of `pilotfish report SESSION_DIR [--out DIR] [--json]`.

    Writes report.html and the PNGs into out_dir (default SESSION_DIR/report). With as_json
    also metrics.json, and prints the metrics as JSON on stdout (the file list then goes to
    stderr, so the output can be piped). Returns the exit code.
    """
    from pilotfish._session_dirs import not_a_session

    if not os.path.isdir(session_dir):
        print(f"pilotfish report: not a session directory: {session_dir}", file=sys.stderr)
        return 2
    why = not_a_session(session_dir)  # (a parent of sessions: say which are there)
    if why:
        print(f"pilotfish report: {why}", file=sys.stderr)
        return 2
    out_dir = out_dir or os.path.join(session_dir, "report")
    t = time.perf_counter()
    try:
        analysis = analyze(session_dir)
    except (OSError, ValueError) as e:
        print(f"pilotfish report: cannot read {session_dir}: {e}", file=sys.stderr)
        return 1
    paths = write_report(analysis, out_dir, as_json=as_json)
    log = sys.stderr if as_json else sys.stdout
    print(f"report: {paths['report']}", file=log)
    if as_json:
        print(f"metrics: {paths['metrics']}", file=log)
    plots_written = ", ".join(os.path.basename(p) for p in paths.values() if p.endswith(".png"))
    print(
        f"plots: {plots_written}  ({len(analysis.data.tasks):,} tasks, "
        f"{time.perf_counter() - t:.1f} s)",
        file=log,
    )
    if as_json:
        with open(paths["metrics"]) as fh:
            sys.stdout.write(fh.read() + "\n")
    return 0
