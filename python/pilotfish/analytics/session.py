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

A pilot's agent events are those of all its agents (_agent_files.agent_files: its own, then
its sub-agents' in <pilot>/sub/p<i>/); its life (bootstrap_start, ACTIVE, agent_stop...) is
its own agent's (a root's), not each sub-agent's (_agent_files.SUB_LIFE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pilotfish import _events as E
from pilotfish import _json
from pilotfish._agent_files import SUB_LIFE, agent_files, is_sub
from pilotfish.analytics._load import (
    EventColumns,
    gc_paused,
    read_event_columns,
    read_task_record_columns,
)

FINAL_STATES = ("DONE", "FAILED", "CANCELED")
TASK_EVENTS = (
    "NEW",
    "SCHEDULING",
    "STAGING_INPUT",
    "AGENT_SCHEDULING",
    E.SCHEDULE_OK,
    "EXECUTING",
    E.EXEC_START,
    E.EXEC_OK,
    E.LAUNCH_OK,
    E.EXEC_STOP,
    E.UNSCHEDULE,
    "STAGING_OUTPUT",
) + FINAL_STATES
PILOT_EVENTS = (
    "NEW",
    "LAUNCHING",
    E.BOOTSTRAP_START,
    E.RESOURCES_OK,
    "ACTIVE",
    E.DRAIN_START,
    E.DRAIN_STOP,
    E.AGENT_STOP,
) + FINAL_STATES
LAUNCHER_EVENTS = (E.LAUNCHER_START, E.LAUNCHER_READY, E.LAUNCHER_STOP)
SESSION_UID = "session"


@dataclass
class SessionData:
    path: str
    t0: float
    tasks: pd.DataFrame
    pilots: pd.DataFrame
    launchers: pd.DataFrame
    events: EventColumns = field(repr=False)
    info: dict = field(default_factory=dict)  # session.json
    warnings: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        """A session whose pilots were simulated (resource="simulated"): virtual times."""
        for uid in self.pilots.index if self.pilots is not None else ():
            try:
                with open(os.path.join(self.path, uid, "pilot.json")) as f:
                    if (_json.load(f).get("description") or {}).get("resource") == "simulated":
                        return True
            except (OSError, ValueError):
                continue
        return False

    @property
    def uid(self) -> str:
        return self.info.get("uid") or os.path.basename(os.path.normpath(self.path))

    def events_frame(self) -> pd.DataFrame:
        """All events as a DataFrame (t relative to t0; uid, name categorical; detail where
        kept). Built on demand: for 1M tasks this is ~13M rows."""
        ev = self.events
        return pd.DataFrame(
            {
                "t": ev.t - self.t0,
                "uid": pd.Categorical.from_codes(ev.uid, categories=pd.Index(ev.uids)),
                "name": pd.Categorical.from_codes(ev.name, categories=pd.Index(ev.names)),
                "source": pd.Categorical.from_codes(ev.source, categories=pd.Index(ev.paths)),
            }
        )


def _pilot_dirs(path: str) -> list[str]:
    out = []
    for entry in sorted(os.listdir(path)):
        d = os.path.join(path, entry)
        if os.path.isdir(d) and (
            os.path.exists(os.path.join(d, "agent.events"))
            or os.path.exists(os.path.join(d, "pilot.json"))
        ):
            out.append(entry)
    return out


def _read_json(path: str) -> dict:
    try:
        with open(path) as fh:
            return _json.load(fh)
    except (OSError, ValueError):
        return {}


_PIVOT_ROWS = 1 << 18  # events per step: the temporaries stay small and are reused


def _pivot(
    ev: EventColumns,
    entity_of_uid: np.ndarray,
    n_entities: int,
    names: tuple[str, ...],
    t0: float,
    rows: np.ndarray | None = None,
) -> tuple[list[str], np.ndarray]:
    """First time (relative to t0) of each event name per entity: (column names, array of
    shape (n_columns, n_entities), NaN: never). The given `names` come first and are always
    there; every other name that occurs for these entities follows.

    entity_of_uid: the entity index (0..n_entities-1) of each uid code, -1 for other uids.
    rows: only these event rows can be of the entities (all rows if None). A scatter-min
    over the events, in steps: no grouping, no loop per entity.
    """
    uid, name, t = (
        (ev.uid, ev.name, ev.t) if rows is None else (ev.uid[rows], ev.name[rows], ev.t[rows])
    )
    steps = range(0, len(uid), _PIVOT_ROWS)
    counts = np.zeros(len(ev.names), np.int64)
    for a in steps:
        mine = entity_of_uid[uid[a : a + _PIVOT_ROWS]] >= 0
        counts += np.bincount(name[a : a + _PIVOT_ROWS][mine], minlength=len(ev.names))
    present = np.flatnonzero(counts)
    columns = list(names) + [ev.names[c] for c in present if ev.names[c] not in names]
    k = len(columns)
    col_of = np.full(len(ev.names), -1, np.int64)
    for i, c in enumerate(columns):
        code = ev.name_code(c)
        if code >= 0:
            col_of[code] = i
    # column-major (one contiguous row per name): becomes the DataFrame's block as is. Events
    # of other entities all land in one spare cell after the grid.
    grid: np.ndarray = np.full(k * n_entities + 1, np.inf)
    for a in steps:
        b = a + _PIVOT_ROWS
        entity = entity_of_uid[uid[a:b]]
        index = col_of[name[a:b]] * n_entities + entity
        index[entity < 0] = k * n_entities
        np.minimum.at(grid, index, t[a:b])
    grid = grid[:-1].reshape(k, n_entities)
    grid -= t0
    grid[np.isinf(grid)] = np.nan
    return columns, grid


def _first_final(columns: list[str], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time of the first final-state event, that state or None) per entity."""
    times = grid[[columns.index(s) for s in FINAL_STATES]]
    filled = np.where(np.isnan(times), np.inf, times)
    first = np.argmin(filled, axis=0)
    t = filled[first, np.arange(times.shape[1])]
    has = np.isfinite(t)
    none = np.asarray(None, dtype=object)  # None, as np.where would read it (object 0-d)
    state = np.where(has, np.asarray(FINAL_STATES, dtype=object)[first], none)
    return np.where(has, t, np.nan), state


def _positions(table: list[str], keys: np.ndarray) -> np.ndarray:
    """For each string of `table`, its position in `keys` (-1: absent). Fast path: the keys
    are a contiguous run of the table (task records in the order their events first
    appear), checked exactly; otherwise a hash join."""
    pos = np.full(len(table), -1, np.int64)
    if not len(keys) or not table:
        return pos
    try:
        k0 = table.index(keys[0])
    except ValueError:
        k0 = -1
    if (
        k0 >= 0
        and k0 + len(keys) <= len(table)
        and np.array_equal(np.asarray(table[k0 : k0 + len(keys)], dtype=object), keys)
    ):
        pos[k0 : k0 + len(keys)] = np.arange(len(keys))
        return pos
    index = pd.Index(keys)
    if index.is_unique:
        return index.get_indexer(pd.Index(table, dtype=object))
    first = np.flatnonzero(~index.duplicated())  # a uid recorded twice: its first record
    found = index[first].get_indexer(pd.Index(table, dtype=object))
    return np.where(found >= 0, first[np.maximum(found, 0)], -1)


def load_session(path: str | os.PathLike) -> SessionData:
    """Load a session directory (client.events, tasks.msgpack, <pilot>/pilot.json and the
    agent.events of each pilot's agents: its own, its sub-agents' in <pilot>/sub/p<i>/) into
    DataFrames. Missing files are tolerated: what they would have told is
    inferred from the events where possible, and noted in `warnings`."""
    with gc_paused():
        return _load_session(os.fspath(path))


def _load_session(path: str) -> SessionData:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"not a session directory: {path}")
    warnings: list[str] = []
    info = _read_json(os.path.join(path, "session.json"))
    pilot_uids = _pilot_dirs(path)
    records_path = os.path.join(path, "tasks.msgpack")
    records = read_task_record_columns(records_path) if os.path.exists(records_path) else None
    if records is None:
        warnings.append("no tasks.msgpack: task shapes from schedule_ok details")

    from .elastic import DETAIL_EVENTS

    detail_names = set(LAUNCHER_EVENTS) | set(DETAIL_EVENTS)
    if records is None:
        detail_names.add(E.SCHEDULE_OK)
    paths = [os.path.join(path, "client.events")]
    owner: dict[str, str] = {}  # an agent's events file -> its pilot (sub-agents' too)
    for p in pilot_uids:
        for f in agent_files(os.path.join(path, p), "agent.events"):
            owner[f] = p
            paths.append(f)
    ev = read_event_columns(paths, detail_names=detail_names)
    if not len(ev):
        warnings.append("no events found (client.events, <pilot>/agent.events)")
    t0 = float(ev.t.min()) if len(ev) else float(info.get("created") or 0.0)

    # -- which uids are pilots, tasks
    # pilots: those with a sandbox here, and those the client launched (LAUNCHING is a pilot
    # state only) whose sandbox is elsewhere; found without a pass over all uids
    launching = ev.name_code("LAUNCHING")
    launched: np.ndarray | list[int] = (
        np.unique(ev.uid[ev.name == launching]) if launching >= 0 else []
    )
    pilot_uids += [ev.uids[c] for c in launched if ev.uids[c] not in pilot_uids]
    pilot_index = {u: k for k, u in enumerate(pilot_uids)}
    is_pilot_uid = np.zeros(len(ev.uids), bool)
    for u in pilot_uids:  # few: a C-speed scan each beats hashing all uids
        if u in ev.uids:
            is_pilot_uid[ev.uids.index(u)] = True

    rec_uids = records["uid"] if records is not None else np.zeros(0, object)
    n_rec = len(rec_uids)
    task_of_uid = _positions(ev.uids, rec_uids)
    unknown = np.flatnonzero((task_of_uid < 0) & ~is_pilot_uid)
    extra = [ev.uids[c] for c in unknown if ev.uids[c].startswith("task.")]
    if extra:
        if records is not None:
            warnings.append(f"{len(extra)} tasks have events but no record in tasks.msgpack")
        extra_codes = [c for c in unknown if ev.uids[c].startswith("task.")]
        task_of_uid[extra_codes] = n_rec + np.arange(len(extra))
    task_uids = np.concatenate([rec_uids, np.asarray(extra, dtype=object)])
    n_tasks = len(task_uids)

    # -- tasks x event times
    columns, grid = _pivot(ev, task_of_uid, n_tasks, TASK_EVENTS, t0)
    t_final, final_state = _first_final(columns, grid)

    # the pilot a task ran on: its record, else the pilot whose agents' events it appears in
    src_pilot = np.array([pilot_index.get(owner.get(p, ""), -1) for p in ev.paths], np.int64)

    def pilot_from_files(tasks: np.ndarray) -> np.ndarray:
        if not len(tasks):
            return np.zeros(0, np.int64)
        wanted_uid = np.zeros(len(ev.uids), bool)  # the uid codes of these tasks
        wanted_uid[np.isin(task_of_uid, tasks)] = True
        rows = np.flatnonzero(wanted_uid[ev.uid])
        via_file = np.full(n_tasks, -1, np.int64)
        np.maximum.at(via_file, task_of_uid[ev.uid[rows]], src_pilot[ev.source[rows]])
        return via_file[tasks]

    pilot_code = np.full(n_tasks, -1, np.int64)
    ranks = np.ones(n_tasks, np.int64)
    cpr = np.ones(n_tasks, np.int64)
    gpr = np.zeros(n_tasks, np.int64)
    exit_code = np.full(n_tasks, np.nan)
    state = final_state
    names = np.full(n_tasks, None, dtype=object)
    has_record = np.zeros(n_tasks, bool)
    if records is not None and n_rec:  # (n_rec > 0: there are records)
        ranks[:n_rec] = records["ranks"]
        cpr[:n_rec] = records["cores_per_rank"]
        gpr[:n_rec] = records["gpus_per_rank"]
        exit_code[:n_rec] = records["exit_code"]
        state[:n_rec] = records["state"]
        names[:n_rec] = records["name"]
        has_record[:n_rec] = True
        pilot_code[:n_rec] = pd.Categorical(records["pilot"], categories=pilot_uids).codes
    unknown_pilot = np.flatnonzero(pilot_code < 0)
    pilot_code[unknown_pilot] = pilot_from_files(unknown_pilot)
    if n_rec < n_tasks:  # shapes of tasks without a record, from "ranks x cores/gpus"
        rows = np.flatnonzero(task_of_uid[ev.uid] >= n_rec)
        _shapes_from_details(ev, rows, task_of_uid[ev.uid[rows]], has_record, ranks, cpr, gpr)

    index = pd.Index(task_uids, name="uid", dtype=object)
    meta = pd.DataFrame(
        {
            "pilot": pd.Categorical.from_codes(pilot_code, categories=pilot_uids),
            "state": pd.Categorical(state),
            "exit_code": exit_code,
            "name": names,
            "ranks": ranks,
            "cores_per_rank": cpr,
            "gpus_per_rank": gpr,
            "cores": ranks * cpr,
            "gpus": ranks * gpr,
            "has_record": has_record,
            "t_final": t_final,
        },
        index=index,
    )
    times = pd.DataFrame(grid.T, index=index, columns=columns, copy=False)  # the grid as is
    tasks = pd.concat([meta, times], axis=1)

    pilot_rows = np.flatnonzero(is_pilot_uid[ev.uid]) if len(ev) else np.zeros(0, np.int64)
    pilots = _pilots(path, ev, pilot_uids, _life_rows(ev, pilot_rows), t0, warnings, owner)
    launchers = _launchers(ev, pilot_rows, t0)
    return SessionData(path, t0, tasks, pilots, launchers, ev, info, warnings)


def _shapes_from_details(ev, task_rows, task_idx, has_record, ranks, cpr, gpr) -> None:
    code = ev.name_code(E.SCHEDULE_OK)
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


def _life_rows(ev: EventColumns, rows: np.ndarray) -> np.ndarray:
    """The pilots' event rows but a sub-agent's own life (_agent_files.SUB_LIFE): the
    pilot's is its root's."""
    subs = [s for s, p in enumerate(ev.paths) if is_sub(p)]
    codes = [c for c in map(ev.name_code, SUB_LIFE) if c >= 0]
    if not subs or not codes or not len(rows):
        return rows
    drop = np.isin(ev.source[rows], subs) & np.isin(ev.name[rows], codes)
    return rows[~drop]


def _pilots(path, ev, pilot_uids, rows, t0, warnings, owner) -> pd.DataFrame:
    """rows: the pilots' event rows; owner: each agent events file's pilot."""
    n = len(pilot_uids)
    index = {u: k for k, u in enumerate(pilot_uids)}
    pilot_of_uid = np.full(len(ev.uids), -1, np.int64)
    for c in np.unique(ev.uid[rows]):
        pilot_of_uid[c] = index[ev.uids[c]]
    ent = pilot_of_uid[ev.uid[rows]]
    columns, grid = _pivot(ev, pilot_of_uid, n, PILOT_EVENTS, t0, rows=rows)
    t_final, final_state = _first_final(columns, grid)
    data: dict[str, list[object]] = {
        k: [] for k in ("nodes", "cores", "gpus", "agent_cores", "agent_gpus", "launcher")
    }
    res_code = ev.name_code(E.RESOURCES_OK)
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
    for name, c in zip(columns, grid):
        df[name] = c
    df["t_final"] = t_final
    # last event of the pilot's agents' files: the end of a pilot that never finished
    last = np.full(n, np.nan)
    bounds = np.searchsorted(ev.source, np.arange(len(ev.paths) + 1))  # rows are file by file
    for s, p in enumerate(ev.paths):
        k = index.get(owner.get(p, ""), -1)
        if k >= 0 and bounds[s + 1] > bounds[s]:
            t = float(ev.t[bounds[s] : bounds[s + 1]].max()) - t0
            last[k] = t if np.isnan(last[k]) else max(last[k], t)
    df["t_last_event"] = last
    return df


def _launchers(ev, pilot_rows, t0) -> pd.DataFrame:
    """One row per launcher instance (pilot, detail) from the pilots' event rows."""
    columns = ["pilot", "launcher", "partition", "detail", *LAUNCHER_EVENTS]
    codes = [ev.name_code(n) for n in LAUNCHER_EVENTS]
    if not len(ev) or all(c < 0 for c in codes):
        return pd.DataFrame(columns=columns)
    rows = pilot_rows[np.isin(ev.name[pilot_rows], [c for c in codes if c >= 0])]
    recs: dict[tuple, dict] = {}
    for r, d in zip(rows, ev.details(rows)):
        key = (ev.uids[ev.uid[r]], d or "")
        rec = recs.setdefault(key, {n: np.nan for n in LAUNCHER_EVENTS})
        name = ev.names[ev.name[r]]
        rec[name] = np.nanmin([rec[name], float(ev.t[r]) - t0])
    out = []
    for (pilot, detail), rec in recs.items():
        launcher, _, partition = detail.partition(" ")
        out.append(
            {
                "pilot": pilot,
                "launcher": launcher or None,
                "partition": partition.strip() or None,
                "detail": detail,
                **rec,
            }
        )
    return pd.DataFrame(out, columns=columns)
