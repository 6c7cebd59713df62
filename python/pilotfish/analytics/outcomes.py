"""How the tasks ended: per task group (a workload's `name`) and, for each task that did not
end DONE, why (the reason its final state carries in the session's journal, or its agent's).
For `pilotfish report`."""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from pilotfish import _events as E
from pilotfish import states as S
from pilotfish._agent_files import pilot_finals
from pilotfish._journal import read_journal

_PILOT_DIR = re.compile(r"pilot\.\d+")


def final_reasons(session_dir: str) -> dict[str, tuple[int | None, str | None]]:
    """uid -> (exit code, reason) of every task whose final state the session's journal or
    one of its pilots' agent journals holds (the session's wins: it is what the client saw)."""
    out: dict[str, tuple[int | None, str | None]] = {}
    for rec in read_journal(os.path.join(session_dir, "journal")):
        if rec and rec[0] == "final" and len(rec) >= 6:
            out[rec[1]] = (rec[3], rec[5])
    try:
        names = sorted(os.listdir(session_dir))
    except OSError:
        names = []
    for name in names:
        if _PILOT_DIR.fullmatch(name):  # (each of its agents: sub-agents' too)
            for uid, rec in pilot_finals(os.path.join(session_dir, name)).items():
                if uid not in out and len(rec) >= 6:
                    out[uid] = (rec[3], rec[5])
    return out


def by_group(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per task group (name; tasks without one: "(none)"), in the order the groups first
    appear: tasks, DONE, FAILED, CANCELED, other (not final), the median and total run time
    (exec_start -> exec_stop, s) and the core-seconds of those runs."""
    if not len(tasks):
        return pd.DataFrame(
            columns=[
                "tasks",
                S.DONE,
                S.FAILED,
                S.CANCELED,
                "other",
                "median_run",
                "run_seconds",
                "core_seconds",
            ]
        )
    t = tasks
    names = (
        t["name"].fillna("(none)").astype(str)
        if "name" in t
        else pd.Series("(none)", index=t.index)
    )
    run = (
        (t[E.EXEC_STOP] - t[E.EXEC_START])
        if {E.EXEC_START, E.EXEC_STOP} <= set(t)
        else pd.Series(np.nan, index=t.index)
    )
    cores = t["cores"] if "cores" in t else pd.Series(1, index=t.index)
    frame = pd.DataFrame(
        {
            "name": names.values,
            "state": t["state"].values,
            "run": run.values,
            "core_s": (run * cores).values,
        }
    )
    rows = {}
    for name, g in frame.groupby("name", sort=False):
        states = g["state"].value_counts()
        n = len(g)
        final = sum(int(states.get(s, 0)) for s in (S.DONE, S.FAILED, S.CANCELED))
        rows[name] = {
            "tasks": n,
            S.DONE: int(states.get(S.DONE, 0)),
            S.FAILED: int(states.get(S.FAILED, 0)),
            S.CANCELED: int(states.get(S.CANCELED, 0)),
            "other": n - final,
            "median_run": float(g["run"].median()) if g["run"].notna().any() else float("nan"),
            "run_seconds": float(g["run"].sum(min_count=1) or 0.0),
            "core_seconds": float(g["core_s"].sum(min_count=1) or 0.0),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def not_done(
    tasks: pd.DataFrame, reasons: dict, limit: int | None = None
) -> tuple[list[tuple[str, str, str, int | None, str]], int]:
    """([(uid, group, state, exit code, reason)], how many) of the tasks that did not end
    DONE: FAILED first, then by uid; at most `limit` rows (a million failed tasks are counted,
    not listed)."""
    if not len(tasks):
        return [], 0
    t = tasks[tasks["state"] != S.DONE]
    uids = np.asarray(t.index.astype(str))
    t = t.iloc[np.lexsort((uids, (t["state"] != S.FAILED).to_numpy()))]
    total = len(t)
    if limit is not None:
        t = t.iloc[:limit]
    out = []
    for uid, row in t.iterrows():
        code, why = reasons.get(uid, (None, None))
        if code is None and "exit_code" in t and pd.notna(row.get("exit_code")):
            code = int(row["exit_code"])
        name = row.get("name")
        out.append(
            (
                str(uid),
                "(none)" if name is None or pd.isna(name) else str(name),
                str(row["state"]),
                code,
                why or "",
            )
        )
    return out, total
