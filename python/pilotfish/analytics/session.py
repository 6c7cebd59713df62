"""A session directory as DataFrames: tasks x event times, pilots, launcher instances.

    data = load_session("path/to/session")
    data.tasks      # index uid; pilot, state, exit_code, ranks, cores_per_rank, gpus_per_rank,
                    # cores, gpus, has_record, then one float column per task event name
                    # (NEW, ..., schedule_ok, exec_start, ..., DONE) and t_final
    data.pilots     # index uid; nodes, cores, gpus, agent_cores, agent_gpus, launcher, state,
                    # then one column per pilot event name (bootstrap_start, ACTIVE, ...), t_final
    data.launchers  # one row per launcher instance: pilot, launcher, partition, detail,
                    # launcher_start, launcher_ready, launcher_stop
    data.events     # all events as columns (EventColumns; absolute epoch times)

Times in the DataFrames are seconds since `data.t0` (epoch seconds of the earliest event);
an event that did not happen is NaN. An event that happened more than once for an entity
(a final state written by both agent and client) counts at its first time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from pilotfish.analytics._load import EventColumns, read_event_columns, read_task_record_columns

FINAL_STATES = ("DONE", "FAILED", "CANCELED")
TASK_EVENTS = ("NEW", "SCHEDULING", "STAGING_INPUT", "AGENT_SCHEDULING", "schedule_ok",
               "EXECUTING", "exec_start", "exec_ok", "launch_ok", "exec_stop", "unschedule",
               "STAGING_OUTPUT") + FINAL_STATES
PILOT_EVENTS = ("NEW", "LAUNCHING", "bootstrap_start", "resources_ok", "ACTIVE",
                "drain_start", "drain_stop", "agent_stop") + FINAL_STATES
LAUNCHER_EVENTS = ("launcher_start", "launcher_ready", "launcher_stop")
SESSION_UID = "session"


@dataclass
class SessionData:
    path: str
    t0: float
    tasks: pd.DataFrame
    pilots: pd.DataFrame
    launchers: pd.DataFrame
    events: EventColumns = field(repr=False)
    info: dict = field(default_factory=dict)        # session.json
    warnings: list[str] = field(default_factory=list)

    @property
    def uid(self) -> str:
        return self.info.get("uid") or os.path.basename(os.path.normpath(self.path))

    def events_frame(self) -> pd.DataFrame:
        """All events as a DataFrame (t relative to t0; uid, name categorical; detail where
        kept). Built on demand: for 1M tasks this is ~13M rows."""
        ev = self.events
        return pd.DataFrame({
            "t": ev.t - self.t0,
            "uid": pd.Categorical.from_codes(ev.uid, categories=pd.Index(ev.uids)),
            "name": pd.Categorical.from_codes(ev.name, categories=pd.Index(ev.names)),
            "source": pd.Categorical.from_codes(ev.source, categories=pd.Index(ev.paths)),
        })


def _pilot_dirs(path: str) -> list[str]:
    out = []
    for entry in sorted(os.listdir(path)):
        d = os.path.join(path, entry)
        if os.path.isdir(d) and (os.path.exists(os.path.join(d, "agent.events")) or
                                 os.path.exists(os.path.join(d, "pilot.json"))):
            out.append(entry)
    return out


def _read_json(path: str) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _pivot(ev: EventColumns, rows: np.ndarray, entity: np.ndarray, n_entities: int,
           names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """First time of each event name per entity: {name: float array (NaN: never)}.

    rows: event rows to use; entity: their entity index (0..n_entities-1). Every name that
    occurs among the rows gets a column, the given `names` first and always present.
    """
    codes = ev.name[rows]
    present = np.flatnonzero(np.bincount(codes, minlength=len(ev.names)))
    order = [ev.names.index(n) for n in names if n in ev.names]
    order += [int(c) for c in present if int(c) not in order]
    col_of = np.full(len(ev.names), -1, np.int64)
    col_of[order] = np.arange(len(order))
    grid = np.full((n_entities, len(order)), np.inf)
    np.minimum.at(grid.reshape(-1), entity.astype(np.int64) * len(order) + col_of[codes],
                  ev.t[rows])
    grid[np.isinf(grid)] = np.nan
    out = {n: np.full(n_entities, np.nan) for n in names}
    for k, c in enumerate(order):
        out[ev.names[c]] = grid[:, k]
    return out


def _first_final(cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(time of the first final-state event, that state or None) per entity."""
    times = np.stack([cols[s] for s in FINAL_STATES], axis=1)
    has = ~np.all(np.isnan(times), axis=1)
    first = np.where(has, np.nanargmin(np.where(np.isnan(times), np.inf, times), axis=1), 0)
    t = np.where(has, times[np.arange(len(times)), first], np.nan)
    state = np.where(has, np.asarray(FINAL_STATES, dtype=object)[first], None)
    return t, state


def load_session(path: str | os.PathLike) -> SessionData:
    """Load a session directory (client.events, tasks.msgpack, <pilot>/pilot.json and
    agent.events) into DataFrames. Missing files are tolerated: what they would have told is
    inferred from the events where possible, and noted in `warnings`."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"not a session directory: {path}")
    warnings: list[str] = []
    info = _read_json(os.path.join(path, "session.json"))
    pilot_uids = _pilot_dirs(path)
    records_path = os.path.join(path, "tasks.msgpack")
    records = read_task_record_columns(records_path) if os.path.exists(records_path) else None
    if records is None:
        warnings.append("no tasks.msgpack: task shapes from schedule_ok details")

    detail_names = set(LAUNCHER_EVENTS) | {"resources_ok"}
    if records is None:
        detail_names.add("schedule_ok")
    paths = [os.path.join(path, "client.events")]
    paths += [os.path.join(path, p, "agent.events") for p in pilot_uids]
    ev = read_event_columns(paths, detail_names=detail_names)
    t0 = float(ev.t.min()) if len(ev) else float(info.get("created") or 0.0)

    # -- which uids are pilots, tasks
    uid_names = np.asarray(ev.uids, dtype=object)
    for u in ev.uids:  # pilots the client knew of but whose sandbox is elsewhere
        if u.startswith("pilot.") and u not in pilot_uids:
            pilot_uids.append(u)
    pilot_index = {u: k for k, u in enumerate(pilot_uids)}
    is_pilot_uid = np.array([u in pilot_index for u in ev.uids], dtype=bool)

    task_uids = pd.Index(records["uid"] if records is not None else [], dtype=object)
    in_records = (task_uids.get_indexer(uid_names) >= 0) if len(task_uids) else \
        np.zeros(len(uid_names), bool)
    looks_like_task = np.fromiter((u.startswith("task.") for u in ev.uids), bool, len(ev.uids))
    extra = uid_names[looks_like_task & ~is_pilot_uid & ~in_records]
    if len(extra):
        if records is not None:
            warnings.append(f"{len(extra)} tasks have events but no record in tasks.msgpack")
        task_uids = task_uids.append(pd.Index(extra))
    n_tasks = len(task_uids)
    task_of_uid = task_uids.get_indexer(uid_names) if len(uid_names) else np.zeros(0, np.int64)

    # -- tasks x event times
    task_rows = np.flatnonzero(task_of_uid[ev.uid] >= 0) if len(ev) else np.zeros(0, np.int64)
    task_idx = task_of_uid[ev.uid[task_rows]]
    cols = _pivot(ev, task_rows, task_idx, n_tasks, TASK_EVENTS)
    t_final, final_state = _first_final(cols)

    # the pilot a task ran on: its record, else the pilot whose agent.events it appears in
    src_pilot = np.array([pilot_index.get(os.path.basename(os.path.dirname(p)), -1)
                          if p.endswith("agent.events") else -1 for p in ev.paths], dtype=np.int64)
    via_file = np.full(n_tasks, -1, np.int64)
    if len(task_rows):
        np.maximum.at(via_file, task_idx, src_pilot[ev.source[task_rows]])
    pilot_names = np.asarray(pilot_uids + [None], dtype=object)
    task_pilot = pilot_names[np.where(via_file >= 0, via_file, len(pilot_uids))]

    n_rec = len(records["uid"]) if records is not None else 0
    ranks = np.ones(n_tasks, np.int64)
    cpr = np.ones(n_tasks, np.int64)
    gpr = np.zeros(n_tasks, np.int64)
    exit_code = np.full(n_tasks, np.nan)
    state = final_state.copy()
    names = np.full(n_tasks, None, dtype=object)
    has_record = np.zeros(n_tasks, bool)
    if n_rec:
        ranks[:n_rec] = records["ranks"]
        cpr[:n_rec] = records["cores_per_rank"]
        gpr[:n_rec] = records["gpus_per_rank"]
        exit_code[:n_rec] = records["exit_code"]
        state[:n_rec] = records["state"]
        names[:n_rec] = records["name"]
        has_record[:n_rec] = True
        rec_pilot = records["pilot"]
        known = pd.notna(rec_pilot)
        task_pilot[:n_rec] = np.where(known, rec_pilot, task_pilot[:n_rec])
    if n_rec < n_tasks:  # shapes of tasks without a record, from "ranks x cores/gpus"
        _shapes_from_details(ev, task_rows, task_idx, has_record, ranks, cpr, gpr)

    tasks = pd.DataFrame({
        "pilot": pd.Categorical(task_pilot, categories=pilot_uids),
        "state": pd.Categorical(state),
        "exit_code": exit_code,
        "name": names,
        "ranks": ranks, "cores_per_rank": cpr, "gpus_per_rank": gpr,
        "cores": ranks * cpr, "gpus": ranks * gpr,
        "has_record": has_record,
    }, index=pd.Index(task_uids, name="uid"))
    times = pd.DataFrame({n: c - t0 for n, c in cols.items()}, index=tasks.index)
    times["t_final"] = t_final - t0
    tasks = pd.concat([tasks, times], axis=1)

    pilots = _pilots(path, ev, pilot_uids, is_pilot_uid, t0, warnings)
    launchers = _launchers(ev, pilot_uids, is_pilot_uid, t0)
    return SessionData(path, t0, tasks, pilots, launchers, ev, info, warnings)


def _shapes_from_details(ev, task_rows, task_idx, has_record, ranks, cpr, gpr) -> None:
    code = ev.name_code("schedule_ok")
    if code < 0:
        return
    sel = np.flatnonzero((ev.name[task_rows] == code) & ~has_record[task_idx])
    if not len(sel):
        return
    details = pd.Series(ev.details(task_rows[sel]), dtype=object)
    parts = details.str.extract(r"^\s*(\d+)\s*x\s*(\d+)\s*/\s*(\d+)")
    ok = parts.notna().all(axis=1).to_numpy()
    idx = task_idx[sel][ok]
    vals = parts[ok].astype(np.int64).to_numpy()
    ranks[idx], cpr[idx], gpr[idx] = vals[:, 0], vals[:, 1], vals[:, 2]


def _pilots(path, ev, pilot_uids, is_pilot_uid, t0, warnings) -> pd.DataFrame:
    n = len(pilot_uids)
    index = {u: k for k, u in enumerate(pilot_uids)}
    rows = np.flatnonzero(is_pilot_uid[ev.uid]) if len(ev) else np.zeros(0, np.int64)
    ent = np.array([index[ev.uids[c]] for c in ev.uid[rows]], dtype=np.int64)
    cols = _pivot(ev, rows, ent, n, PILOT_EVENTS)
    t_final, final_state = _first_final(cols)
    data = {k: [] for k in ("nodes", "cores", "gpus", "agent_cores", "agent_gpus", "launcher")}
    res_code = ev.name_code("resources_ok")
    for k, uid in enumerate(pilot_uids):
        pj = _read_json(os.path.join(path, uid, "pilot.json"))
        nodes = pj.get("nodes") or []
        if nodes:
            n_nodes = len(nodes)
            cores = int(sum(int(nd[1]) for nd in nodes))
            gpus = int(sum(int(nd[2]) for nd in nodes))
        else:  # from resources_ok "nodes x cores/gpus" (per node)
            n_nodes = cores = gpus = 0
            mine = rows[(ent == k) & (ev.name[rows] == res_code)] if res_code >= 0 else []
            for d in ev.details(mine[:1]):
                m = pd.Series([d or ""]).str.extract(r"^\s*(\d+)\s*x\s*(\d+)\s*/\s*(\d+)")
                if m.notna().all(axis=1).iloc[0]:
                    n_nodes, cpn, gpn = (int(x) for x in m.iloc[0])
                    cores, gpus = n_nodes * cpn, n_nodes * gpn
            warnings.append(f"{uid}: no pilot.json" + ("" if cores else "; resources unknown"))
        data["nodes"].append(n_nodes)
        data["cores"].append(cores)
        data["gpus"].append(gpus)
        data["agent_cores"].append(int(pj.get("agent_cores") or 0))
        data["agent_gpus"].append(int(pj.get("agent_gpus") or 0))
        data["launcher"].append(pj.get("launcher"))
    df = pd.DataFrame(data, index=pd.Index(pilot_uids, name="uid"))
    df["state"] = final_state
    for name, c in cols.items():
        df[name] = c - t0
    df["t_final"] = t_final - t0
    # last event of the pilot's own agent file: the end of a pilot that never finished
    last = np.full(n, np.nan)
    for s, p in enumerate(ev.paths):
        owner = os.path.basename(os.path.dirname(p))
        if owner in index and p.endswith("agent.events"):
            sel = ev.source == s
            if sel.any():
                last[index[owner]] = float(ev.t[sel].max()) - t0
    df["t_last_event"] = last
    return df


def _launchers(ev, pilot_uids, is_pilot_uid, t0) -> pd.DataFrame:
    columns = ["pilot", "launcher", "partition", "detail", *LAUNCHER_EVENTS]
    codes = [ev.name_code(n) for n in LAUNCHER_EVENTS]
    if not len(ev) or all(c < 0 for c in codes):
        return pd.DataFrame(columns=columns)
    rows = np.flatnonzero(is_pilot_uid[ev.uid] & np.isin(ev.name, [c for c in codes if c >= 0]))
    recs: dict[tuple, dict] = {}
    for r, d in zip(rows, ev.details(rows)):
        key = (ev.uids[ev.uid[r]], d or "")
        rec = recs.setdefault(key, {n: np.nan for n in LAUNCHER_EVENTS})
        name = ev.names[ev.name[r]]
        rec[name] = np.nanmin([rec[name], float(ev.t[r]) - t0])
    out = []
    for (pilot, detail), rec in recs.items():
        launcher, _, partition = detail.partition(" ")
        out.append({"pilot": pilot, "launcher": launcher or None,
                    "partition": partition.strip() or None, "detail": detail, **rec})
    return pd.DataFrame(out, columns=columns)
