"""Per-partition view of a session (seed 000's Tables 1 and 2, one row per launcher instance).

For each pilot, its partitions as the agent built them (`descriptions.partition_layout` over
the pilot's description and node list in pilot.json: the same contract the agent used), and
per partition: nodes, launcher, its instance's start/ready/stop (the launcher_* events whose
detail is "<launcher> p<index>"), tasks placed there (a task's partition is the partition of
its first rank's node, from tasks.msgpack) and utilization: busy core-seconds (placed ->
released, as utilization.py counts "busy") over the partition's cores x the pilot's lifetime.
"""

from __future__ import annotations

import os

import msgspec
import numpy as np

from pilotfish import _events as E
from pilotfish import _json
from pilotfish._agent_files import agent_files
from pilotfish.analytics import utilization as ru
from pilotfish._shapes import partition_layout


def pilot_layout(path: str, uid: str) -> tuple[list, list[str], list[int]] | None:
    """(partition layout, node names, cores per node) of a pilot, from its pilot.json (None
    if it has none or it cannot be read); launch_model.py reads it too."""
    try:
        with open(os.path.join(path, uid, "pilot.json")) as f:
            pj = _json.load(f)
    except (OSError, ValueError):
        return None
    rows = pj.get("nodes") or []
    nodes = [n[0] for n in rows]
    if not nodes:
        return None
    try:
        cores = [int(n[1]) for n in rows]
    except (TypeError, ValueError, IndexError):
        cores = []
    desc = pj.get("description") or {}
    try:
        layout = partition_layout(len(nodes), desc.get("partitions"), pj.get("launcher"))
    except (TypeError, KeyError):
        return None
    return layout, nodes, cores


def first_nodes(path: str) -> dict[str, int]:
    """uid -> node index of its first rank, from tasks.msgpack (placed tasks only);
    launch_model.py reads it too."""
    p = os.path.join(path, "tasks.msgpack")
    if not os.path.exists(p):
        return {}
    with open(p, "rb") as f:
        rows = msgspec.msgpack.decode(f.read(), type=list[tuple])
    return {r[0]: r[8][0] for r in rows if len(r) > 8 and r[8]}


def _first_nodes_from_events(path: str, uid: str, wanted) -> dict[str, int]:
    """uid -> node index of its first rank, from the schedule_ok details ("<ranks>x<cores>/
    <gpus> @<node>,...") in a pilot's agents' agent.events (its sub-agents' too): for the
    tasks whose record has no nodes (a resumed session's records of the tasks that ended
    before it: placed by an earlier pilot of the session, known from the journal only)."""
    from pilotfish.analytics._load import read_event_columns

    try:
        ev = read_event_columns(
            agent_files(os.path.join(path, uid), "agent.events"), detail_names={E.SCHEDULE_OK}
        )
    except (OSError, ValueError):
        return {}
    code = ev.name_code(E.SCHEDULE_OK)
    if code < 0:
        return {}
    rows = np.flatnonzero(ev.name == code)
    out: dict[str, int] = {}
    for r, detail in zip(rows.tolist(), ev.details(rows)):
        task = ev.uids[ev.uid[r]]
        if task in wanted and detail and "@" in detail:
            first = detail.rsplit("@", 1)[1].split(",", 1)[0].strip()
            if first.isdigit():
                out[task] = int(first)  # (a retry's placement after the first: the last)
    return out


def partitions(data) -> list[dict]:
    """One dict per partition of every pilot: pilot, index, nodes (names), launcher, start,
    ready, stop (s since the session began; None if not seen), tasks, busy_core_s,
    utilization."""
    out: list[dict] = []
    pilots = data.pilots
    if pilots is None or not len(pilots):
        return out
    windows = {w.uid: w for w in ru.pilot_windows(pilots)}
    first_node = None
    tasks = data.tasks
    launchers = data.launchers
    for uid in pilots.index:
        found = pilot_layout(data.path, uid)
        if found is None:
            continue
        layout, names, node_cores = found
        if first_node is None:
            first_node = first_nodes(data.path)
        mine = tasks[tasks["pilot"] == uid] if "pilot" in tasks else tasks.iloc[:0]
        bounds = np.array([first for first, _, _ in layout] + [len(names)])
        node_of = np.array([first_node.get(u, -1) for u in mine.index], dtype=np.int64)
        placed = (
            mine[E.SCHEDULE_OK].notna().to_numpy()
            if E.SCHEDULE_OK in mine
            else np.zeros(len(mine), bool)
        )
        unknown = placed & (node_of < 0)
        if unknown.any():
            recovered = _first_nodes_from_events(data.path, uid, set(mine.index[unknown]))
            node_of[unknown] = [recovered.get(u, -1) for u in mine.index[unknown]]
        part_of = np.searchsorted(bounds, node_of, side="right") - 1
        part_of[node_of < 0] = -1
        cores = mine["cores"].to_numpy(dtype=float) if "cores" in mine else np.zeros(len(mine))
        busy_t = np.zeros(len(mine))
        if E.SCHEDULE_OK in mine and E.UNSCHEDULE in mine:
            s = mine[E.SCHEDULE_OK].to_numpy(dtype=float)
            e = mine[E.UNSCHEDULE].to_numpy(dtype=float)
            busy_t = np.where(np.isfinite(s) & np.isfinite(e), e - s, 0.0)
        w = windows.get(uid)
        life = (w.t_end - w.t_boot) if w is not None else float("nan")
        for i, (first, n, launcher) in enumerate(layout):
            sel = part_of == i
            busy = float((cores[sel] * busy_t[sel]).sum())
            held = float(sum(node_cores[first : first + n])) if node_cores else float("nan")
            row = {
                "pilot": uid,
                "index": i,
                "nodes": names[first : first + n],
                "launcher": launcher,
                "start": None,
                "ready": None,
                "stop": None,
                "tasks": int(sel.sum()),
                "busy_core_s": busy,
                "utilization": busy / (held * life) if held and life and life > 0 else None,
            }
            if launchers is not None and len(launchers):
                lr = launchers[(launchers["pilot"] == uid) & (launchers["partition"] == f"p{i}")]
                if launcher is not None:
                    lr = lr[lr["launcher"] == launcher]
                for name, key in (
                    (E.LAUNCHER_START, "start"),
                    (E.LAUNCHER_READY, "ready"),
                    (E.LAUNCHER_STOP, "stop"),
                ):
                    if len(lr) and name in lr and np.isfinite(lr[name].min()):
                        row[key] = float(lr[name].min())
            out.append(row)
    return out
