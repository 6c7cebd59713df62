"""Fit a simulation launch model from a real session's events (`pilotfish simulate --fit`).

Per launch method (the default launcher of each partition of each pilot):
    startup_s, startup_per_node_s   launcher_start -> launcher_ready of each instance, against
                                    its partition's node count (least squares; a slope only
                                    where node counts differ)
    latency_s, latency_per_inflight_s
                                    exec_ok -> launch_ok of each launch, against the launches of
                                    the same instance still in their launch phase when it was
                                    made (least squares, clipped at 0)
                                    (node executors, "nodes": the agent's send -> the node's
                                    spawn; PMI worlds, "pmi": the send -> its last rank's spawn)
    fail_rate                       launch_retry events / launches
    hang_rate, hang_s               launch_hung events / launches; hang_s: the launcher's
                                    hang_grace from the session's pilot description (10 s)
The result is the `launch_model` a simulated pilot takes (pilotfish.agent.simulation); the
model's contract, its defaults and read_launch_model (a file read back with a bound) are
pilotfish._launch_costs'.
"""

from __future__ import annotations

import os

import numpy as np

from pilotfish import _events as E
from pilotfish import _json
from pilotfish._agent_files import agent_files
from pilotfish._events import read_all_events
from pilotfish._launch_costs import read_launch_model  # noqa: F401 -- `pilotfish simulate` reads it here
from pilotfish.analytics.partitions import first_nodes, pilot_layout


def _lsq(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope >= 0) of y ~ a + b x; slope 0 when x does not vary."""
    if len(y) == 0:
        return 0.0, 0.0
    if len(np.unique(x)) < 2:
        return float(max(0.0, np.mean(y))), 0.0
    b, a = np.polyfit(x, y, 1)
    if b < 0:
        return float(max(0.0, np.mean(y))), 0.0
    if a < 0:
        a = 0.0
    return float(a), float(b)


def fit_launch_model(session_dir: str) -> dict[str, dict[str, float]]:
    """The launch model of the launch methods this session used (see the module docstring)."""
    first_node = first_nodes(session_dir)
    startup: dict[str, list[tuple[int, float]]] = {}
    latency: dict[str, list[tuple[float, float]]] = {}
    launches: dict[str, int] = {}
    retries: dict[str, int] = {}
    hangs: dict[str, int] = {}
    grace: dict[str, float] = {}
    for uid in sorted(os.listdir(session_dir)):
        paths = agent_files(os.path.join(session_dir, uid), "agent.events")  # (sub-agents' too)
        found = pilot_layout(session_dir, uid)
        if not paths or found is None:
            continue
        layout, names, _ = found
        ev = sorted((e for p in paths for e in read_all_events(p)), key=lambda e: e[0])
        try:
            with open(os.path.join(session_dir, uid, "pilot.json")) as f:
                opts = (_json.load(f).get("description") or {}).get("launcher_options") or {}
            for method, o in opts.items():
                if "hang_grace" in o:
                    grace[method] = float(o["hang_grace"])
        except (OSError, ValueError, TypeError):
            pass
        inst: dict[str, dict[str, float]] = {}
        exec_ok: dict[str, float] = {}
        last_ok: dict[str, float] = {}  # task -> its last process's spawn (a PMI world's ranks)
        by_nodes: dict[str, float] = {}  # task -> when the agent sent it to a node executor
        by_pmi: dict[str, float] = {}  # task -> when the agent spawned its PMI world (`pmi`)
        launch_ok: dict[str, float] = {}
        for t, who, name, detail in ev:
            if name in (E.LAUNCHER_START, E.LAUNCHER_READY) and detail:
                inst.setdefault(detail, {}).setdefault(name, t)
            elif name == E.EXEC_OK:
                exec_ok.setdefault(who, t)
                last_ok[who] = max(t, last_ok.get(who, t))
            elif name == E.EXEC_START and detail == "nodes":
                by_nodes.setdefault(who, t)
            elif name == E.EXEC_START and detail == "pmi":
                by_pmi.setdefault(who, t)
            elif name == E.LAUNCH_OK:
                launch_ok.setdefault(who, t)
            elif name in (E.LAUNCH_RETRY, E.LAUNCH_HUNG):
                part = _part_of(first_node.get(who, -1), layout)
                if part is not None and layout[part][2]:
                    count = retries if name == E.LAUNCH_RETRY else hangs
                    count[layout[part][2]] = count.get(layout[part][2], 0) + 1
        for detail, rec in inst.items():
            method, _, p = detail.partition(" p")
            if E.LAUNCHER_READY in rec and p.isdigit() and int(p) < len(layout):
                startup.setdefault(method, []).append(
                    (layout[int(p)][1], rec[E.LAUNCHER_READY] - rec[E.LAUNCHER_START])
                )
        by_part: dict[int, list[tuple[float, float]]] = {}
        # node executors: a launch is the agent's send to the node's spawn (exec_ok is the
        # node's clock; one host's here, NTP-synced on a cluster); in flight: sent, not spawned.
        # PMI worlds (launch method `pmi`): the send to the spawn of the world's last rank
        # (here or on a node executor); in flight: sent, not all spawned
        for method, sent_at, spawned in (("nodes", by_nodes, exec_ok), ("pmi", by_pmi, last_ok)):
            pairs = [
                (t0, spawned[who])
                for who, t0 in sent_at.items()
                if who in spawned and spawned[who] >= t0
            ]
            if pairs:
                launches[method] = launches.get(method, 0) + len(pairs)
                latency.setdefault(method, []).extend(_in_flight(pairs))
        for who, t0 in exec_ok.items():
            if who in by_nodes or who in by_pmi:
                continue
            part = _part_of(first_node.get(who, -1), layout)
            if part is None:
                continue
            method = layout[part][2]
            launches[method] = launches.get(method, 0) + 1
            if who in launch_ok and launch_ok[who] >= t0:
                by_part.setdefault(part, []).append((t0, launch_ok[who]))
        for part, pairs in by_part.items():
            latency.setdefault(layout[part][2], []).extend(_in_flight(pairs))
    model: dict[str, dict[str, float]] = {}
    for method in set(startup) | set(latency) | set(launches):
        if not method:
            continue
        s = np.array(startup.get(method, []), dtype=float).reshape(-1, 2)
        lat = np.array(latency.get(method, []), dtype=float).reshape(-1, 2)
        a, b = _lsq(s[:, 0], s[:, 1])
        c, d = _lsq(lat[:, 0], lat[:, 1])
        n = launches.get(method, 0)
        model[method] = {
            "startup_s": round(a, 6),
            "startup_per_node_s": round(b, 6),
            "latency_s": round(c, 6),
            "latency_per_inflight_s": round(d, 6),
            "fail_rate": round(min(0.99, retries.get(method, 0) / n), 6) if n else 0.0,
            "hang_rate": round(min(0.99, hangs.get(method, 0) / n), 6) if n else 0.0,
            "hang_s": grace.get(method, 10.0 if method == "prrte" else 0.0),
        }
    return model


def _in_flight(pairs: list[tuple[float, float]]) -> list[tuple[int, float]]:
    """Per launch (start, end): (launches still in flight when it started, its latency)."""
    starts = np.sort(np.array([a for a, _ in pairs]))
    ends = np.sort(np.array([b for _, b in pairs]))
    return [
        (max(0, int(np.searchsorted(starts, a, "left") - np.searchsorted(ends, a, "right"))), b - a)
        for a, b in pairs
    ]


def _part_of(node: int, layout) -> int | None:
    if node < 0:
        return None
    for i, (first, n, _) in enumerate(layout):
        if first <= node < first + n:
            return i
    return None
