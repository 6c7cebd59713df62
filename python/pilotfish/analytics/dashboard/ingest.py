"""The dashboard's ingestion: what was appended to a session's files since the last refresh
(tail.FrameTail), folded into the store (store.py).

Sources, all in the session directory (or a pilot's sandbox where the journal says it is
elsewhere): client.events, <pilot>/agent.events (and its sub-agents' <pilot>/sub/p<i>/
agent.events: tail.PilotTails) and <pilot>/pilot.json, the client's journal (each task's
shape, name and pilot, as submitted), tasks.msgpack when the session has closed (the per-rank
node of each task). Nothing is read twice. A batch of events is folded in with vectorized
passes over its rows (task rows: levels, histograms, placements); the few structure rows
(pilots, partitions, launchers, service members) one at a time.
"""

from __future__ import annotations

import os
import re
import time

import msgspec
import numpy as np

from pilotfish import _events as E
from pilotfish import _json
from pilotfish import states as S
from pilotfish._agent_files import SUB_LIFE
from pilotfish.analytics.dashboard.store import (
    KIND_OTHER,
    KIND_TASK,
    FAILED_KEPT,
    KIND_WORKER,
    LEVELS,
    Pilot,
    SessionStore,
)
from pilotfish.analytics.dashboard.tail import decode_events, decode_journal

RANK = {
    S.NEW: 1,
    S.SCHEDULING: 2,
    S.STAGING_INPUT: 3,
    S.AGENT_SCHEDULING: 4,
    E.SCHEDULE_OK: 5,
    S.EXECUTING: 6,
    S.STAGING_OUTPUT: 7,
    S.DONE: 8,
    S.FAILED: 8,
    S.CANCELED: 8,
}
FINAL_KIND = {S.DONE: 1, S.FAILED: 2, S.CANCELED: 3}
PILOT_RANK = {S.NEW: 1, S.LAUNCHING: 2, S.ACTIVE: 3, S.DONE: 4, S.FAILED: 4, S.CANCELED: 4}
MEMBER_EVENTS = {
    E.MEMBER_START: "starting",
    E.MEMBER_READY: "ready",
    E.MEMBER_LEAVE: "leaving",
    E.MEMBER_LEFT: "left",
    E.MEMBER_FAIL: "failed",
}
LAUNCHER_EVENTS = {
    E.LAUNCHER_START: "starting",
    E.LAUNCHER_READY: "ready",
    E.LAUNCHER_RECOVERED: "ready",
    E.LAUNCHER_FAILED: "failed",
    E.LAUNCHER_RESTART: "restarting",
    E.LAUNCHER_RECYCLE: "recycling",
    E.LAUNCHER_STUCK: "stuck",
    E.LAUNCHER_STOP: "stopped",
}
PILOT_NOTES = {
    E.RESOURCES_OK,
    E.DRAIN_START,
    E.DRAIN_STOP,
    E.AGENT_STOP,
    E.NODE_LOST,
    E.PILOT_GROW,
    E.PILOT_SHRINK,
    E.PILOT_DRAIN,
    E.MPI_LAUNCHER,
}
STRUCT_NAMES = (
    set(MEMBER_EVENTS)
    | set(LAUNCHER_EVENTS)
    | PILOT_NOTES
    | {
        E.PARTITION,
        E.PARTITION_CLOSED,
        E.GROUP_EPOCH,
        E.GROUP_RESIZE,
        E.MEMBER_RESTART,
        E.SESSION_START,
        E.SESSION_RESUME,
        E.SESSION_STOP,
        S.NEW,
        S.LAUNCHING,
        S.ACTIVE,
    }
)
DETAIL_NAMES = STRUCT_NAMES | {S.FAILED, S.CANCELED, E.SCHEDULE_OK}
# A schedule_ok detail that names the node of each rank: "<ranks>x<cores>/<gpus> @<n>,<n>,..."
# (node indices into the pilot's node list). With it the node heatmap is live; without it,
# it comes from tasks.msgpack once the session has closed.
_PLACED = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*/\s*(\d+)\s*@\s*([\d,\s]+)$")
READ_BUDGET = 48 << 20  # bytes one refresh reads at most (a big session: in steps)
_MIN_READ = 1 << 20  # (less than this left of the budget: the refresh stops)
_CLOSED = re.compile(r"^p(\d+)\b[^:]*:\s*(.*)$", re.S)
_FAILED_REASONS = 10_000  # distinct reasons counted at most (then "other")


class SessionIngest(SessionStore):
    """The store, and `refresh()`: read what was appended and fold it in."""

    def refresh(self, budget: int = READ_BUDGET) -> None:
        """Read and fold in what was appended since the last refresh: all of it, or about
        `budget` bytes (then `behind` is True and the next refresh goes on from there -- a
        large finished session is shown while it is read, not after)."""
        t_start = time.perf_counter()
        self._discover_pilots()
        left, least = budget, min(_MIN_READ, budget // 16)
        for pilot, tail, sub in [(None, self.journal, False), (None, self.client, False)] + [
            (p, t, sub) for p in self.pilots.values() for t, sub in p.tail.discover()
        ]:
            while left > least:
                data = tail.read(limit=min(left, 16 << 20))
                if not data:
                    break
                left -= len(data)
                if tail is self.journal:
                    self._journal(data)
                    continue
                for batch in decode_events(data, DETAIL_NAMES):
                    self._batch(batch, pilot, sub)
        self.behind = any(t.unread() for t in self._tails())
        for p in self.pilots.values():
            self._pilot_json(p)
        if not self.behind:
            self._records()
        self.refreshes += 1
        self.generation += 1
        self.last_refresh_s = time.perf_counter() - t_start

    def _discover_pilots(self) -> None:
        try:
            entries = os.listdir(self.path)
        except OSError:
            return
        for entry in entries:
            if entry in self.pilots or not entry.startswith("pilot."):
                continue
            d = os.path.join(self.path, entry)
            if os.path.isdir(d) and not os.path.islink(d):
                self._pilot(entry, d)

    def _pilot_json(self, p: Pilot) -> None:
        path = os.path.join(p.sandbox, "pilot.json")
        stamp = _new_stamp(path, p.pilot_json_stamp)
        if stamp is None:
            return
        pj = self._json(path)
        if not isinstance(pj, dict):
            return
        p.pilot_json_stamp = stamp
        nodes = pj.get("nodes") or []
        if nodes and len(nodes) != len(p.nodes) and p.busy_cores is not None:
            grow = len(nodes) - len(p.busy_cores)
            if grow > 0:
                p.busy_cores = np.concatenate([p.busy_cores, np.zeros(grow)])
                p.busy_gpus = np.concatenate([p.busy_gpus, np.zeros(grow)])
        p.nodes = nodes
        p.agent_cores = int(pj.get("agent_cores") or 0)
        p.agent_gpus = int(pj.get("agent_gpus") or 0)
        p.resource = (pj.get("description") or {}).get("resource")

    def _journal(self, data: bytes) -> None:
        uids, descs, pilots = [], [], []
        for rec in decode_journal(data):
            kind = rec[0]
            if kind == "task" and len(rec) >= 4 and isinstance(rec[1], str):
                uids.append(rec[1])
                pilots.append(rec[2])
                descs.append(rec[3] if isinstance(rec[3], dict) else {})
            elif kind == "pilot" and len(rec) >= 4 and isinstance(rec[1], str):
                sandbox = rec[3] if isinstance(rec[3], str) and os.path.isabs(rec[3]) else None
                self._pilot(rec[1], sandbox)
        if not uids:
            return
        ents = self._entities(uids, KIND_TASK)
        for e, pilot, d in zip(ents.tolist(), pilots, descs):
            self.shape[e] = self._shape_code(
                (
                    int(d.get("ranks", 1) or 1),
                    int(d.get("cores_per_rank", 1) or 0),
                    int(d.get("gpus_per_rank", 0) or 0),
                )
            )
            if isinstance(pilot, str):
                self.pilot[e] = self._pilot_index(pilot)
            self.group[e] = self._group_code(d.get("name"))
            if d.get("function") is not None or d.get("fn_ref") is not None:
                self.is_call[e] = True

    def _records(self) -> None:
        """tasks.msgpack (written when the session closes): shapes, pilots, names of tasks
        the journal did not give, and the node of each rank."""
        path = os.path.join(self.path, "tasks.msgpack")
        stamp = _new_stamp(path, self.records_stamp)
        if stamp is None:
            return
        self.records_stamp = stamp
        from pilotfish.analytics._load import read_task_record_columns

        try:
            cols = read_task_record_columns(path)
        except (OSError, msgspec.DecodeError, ValueError) as e:
            self.warnings.append(f"tasks.msgpack: cannot read it: {e}")
            return
        ents = self._entities(cols["uid"].tolist(), KIND_TASK)
        key = (cols["ranks"] << 42) | (cols["cores_per_rank"] << 21) | cols["gpus_per_rank"]
        distinct, inverse = np.unique(key, return_inverse=True)
        codes = np.array(
            [
                self._shape_code((int(k >> 42), int((k >> 21) & 0x1FFFFF), int(k & 0x1FFFFF)))
                for k in distinct.tolist()
            ],
            np.int32,
        )
        self.shape[ents] = codes[inverse]
        pilot_codes = {u: self._pilot_index(u) for u in set(cols["pilot"].tolist()) if u}
        self.pilot[ents] = [pilot_codes.get(u, -1) for u in cols["pilot"].tolist()]
        no_group = self.group[ents] < 0
        if no_group.any():
            names = cols["name"][no_group].tolist()
            self.group[ents[no_group]] = [self._group_code(x) for x in names]
        self.record_nodes = (ents, path)

    def _batch(self, b, pilot: Pilot | None, sub: bool = False) -> None:
        """sub: b is from a sub-agent's file (its own life is not the pilot's: SUB_LIFE)."""
        if not len(b.t):
            return
        self.events_read += len(b.t)
        t_max = float(b.t.max())
        if self.t0 is None:
            self.t0 = float(b.t.min())
        self.t_last = max(self.t_last, t_max)
        self._cover(t_max)
        rank_lut = np.array([RANK.get(n, 0) for n in b.names], np.int8)
        struct_lut = np.array([n in STRUCT_NAMES for n in b.names], bool)
        unsched_code = b.names.index(E.UNSCHEDULE) if E.UNSCHEDULE in b.names else -1
        rank = rank_lut[b.name]
        task_row = (rank > 0) | (b.name == unsched_code)
        # entities of the uids these rows name (pilots' and the session's rows are structure).
        # Known tasks by the parser's 64-bit string keys (a dict of ints, the second key
        # checked per entity), without decoding their text; new (or agent-made) uids by text.
        local = np.unique(b.uid[task_row])
        ent_of = np.full(b.n_uids, -1, np.int64)
        pilot_rows_uid = np.zeros(b.n_uids, bool)
        if b.k1 is not None and len(local):
            k1, k2 = b.k1[local], b.k2[local]
            got = self.by_key.get(k1)
            hit = got >= 0
            hit[hit] = self.key2[got[hit]] == k2[hit]
            ent_of[local[hit]] = got[hit]
            rest = np.flatnonzero(~hit)
        else:
            k1 = k2 = None
            rest = np.arange(len(local))
        if len(rest):
            texts = b.uid_texts(local[rest])
            found = list(map(self.index.get, texts))
            bare = np.fromiter((f is not None for f in found), bool, len(found))
            if not bare.all():
                keys, kinds, at, at_bare = [], [], [], []
                for j in [j for j, f in enumerate(found) if f is None]:
                    text = texts[j]
                    if text == "session" or text.startswith("pilot.") or text in self.pilots:
                        pilot_rows_uid[int(local[rest[j]])] = True
                        found[j] = -1
                    elif pilot is None or text.startswith("task."):
                        keys.append(text)
                        kinds.append(KIND_TASK)
                        at.append(j)
                        at_bare.append(True)
                    else:
                        keys.append(f"{pilot.uid}/{text}")
                        kinds.append(KIND_WORKER if text.startswith("worker.") else KIND_OTHER)
                        at.append(j)
                        at_bare.append(False)
                if keys:
                    for j, e in zip(at, self._entities(keys, kinds).tolist()):
                        found[j] = e
                    bare[at] = at_bare
            found_ents = np.asarray(found, np.int64)
            ent_of[local[rest]] = found_ents
            if k1 is not None:  # remember tasks' keys (entities keyed by their bare uid)
                fk, fe = k1[rest][bare], found_ents[bare]
                fresh = self.by_key.get(fk) < 0
                _, first = np.unique(fk[fresh], return_index=True)
                self.by_key.put(fk[fresh][first], fe[fresh][first])
                self.key2[fe] = k2[rest][bare]
        ent = ent_of[b.uid]
        rows = np.flatnonzero(task_row & (ent >= 0))
        if len(rows):
            self._task_rows(
                ent[rows],
                rank[rows],
                b.t[rows],
                b.name[rows],
                b.names,
                pilot,
                b.name[rows] == unsched_code,
            )
        # structure: few rows, one at a time
        srows = np.flatnonzero(struct_lut[b.name] & ((ent < 0) | ~task_row))
        srows = np.union1d(srows, np.flatnonzero((rank > 0) & pilot_rows_uid[b.uid]))
        if len(srows):
            self._struct(b, srows, pilot, sub)
        # reasons of failed and canceled tasks, placements named in schedule_ok
        if b.details:
            drows = np.fromiter(b.details.keys(), np.int64, len(b.details))
            drows = drows[(ent[drows] >= 0) & (rank[drows] >= 5)]
            if len(drows):
                self._details(b, drows, ent, pilot)
        if self.placements and unsched_code >= 0:
            rows = np.flatnonzero((b.name == unsched_code) & (ent >= 0))
            for e, t in zip(ent[rows].tolist(), b.t[rows].tolist()):
                self._unplace(e, t)
        if self._pending_place:
            self._apply_placements()

    def _task_rows(self, e, r, t, name, names, pilot, unsched) -> None:
        # the latest placement and release (a retried task is placed again)
        sched_code = names.index(E.SCHEDULE_OK) if E.SCHEDULE_OK in names else -1
        for which, arr in ((name == sched_code, self.t_sched), (unsched, self.t_unsched)):
            if which.any():
                np.maximum.at(arr, e[which], t[which])
        if pilot is not None:  # a task's pilot: the agent file it appears in
            unknown = self.pilot[e] < 0
            if unknown.any():
                self.pilot[e[unknown]] = self._pilot_index(pilot.uid)
        keep = r > 0
        e, r, t, name = e[keep], r[keep], t[keep], name[keep]
        if not len(e):
            return
        order = np.lexsort((t, e))
        e, r, t, name = e[order], r[order], t[order], name[order]
        np.maximum.at(self.rank, e, r)
        user_kind = self.kind
        for lvl in range(1, LEVELS + 1):
            m = r >= lvl
            if not m.any():
                break
            em, tm = e[m], t[m]
            first = np.empty(len(em), bool)
            first[0] = True
            np.not_equal(em[1:], em[:-1], out=first[1:])
            e1, t1 = em[first], tm[first]
            reach = self.reach[lvl - 1]
            old = reach[e1]
            ch = t1 < old
            if not ch.any():
                continue
            e1, t1, old = e1[ch], t1[ch], old[ch]
            reach[e1] = t1
            user = user_kind[e1] == KIND_TASK
            np.add.at(self.hist[lvl - 1], self._bucket(t1[user]), 1)
            was = user & np.isfinite(old)
            np.subtract.at(self.hist[lvl - 1], self._bucket(old[was]), 1)
            self.level_total[lvl - 1] += int(user.sum()) - int(was.sum())
        fin = r == LEVELS
        if fin.any():
            ef, tf, nf = e[fin], t[fin], name[fin]
            first = np.empty(len(ef), bool)
            first[0] = True
            np.not_equal(ef[1:], ef[:-1], out=first[1:])
            ef, tf, nf = ef[first], tf[first], nf[first]
            new = self.final[ef] == 0
            ef, tf, nf = ef[new], tf[new], nf[new]
            kind_lut = np.array([FINAL_KIND.get(n, 0) for n in names], np.int8)
            k = kind_lut[nf]
            self.final[ef] = k
            user = user_kind[ef] == KIND_TASK
            for j in (1, 2, 3):
                sel = user & (k == j)
                if sel.any():
                    np.add.at(self.hist_final[j - 1], self._bucket(tf[sel]), 1)
                    self.final_total[j - 1] += int(sel.sum())

    def _details(self, b, rows, ent, pilot) -> None:
        sched = b.names.index(E.SCHEDULE_OK) if E.SCHEDULE_OK in b.names else -1
        rows = rows.tolist()
        details = b.details
        if sched >= 0:  # placements only where the detail names nodes ("... @n,n")
            is_sched = b.name == sched
            rows = [r for r in rows if not is_sched[r] or "@" in details[r]]
        texts = [details[r] for r in rows]
        names = [b.names[c] for c in b.name[rows].tolist()] if rows else []
        for r, name, detail in zip(rows, names, texts):
            e = int(ent[r])
            if name in (S.FAILED, S.CANCELED):
                if name == S.FAILED and self.kind[e] == KIND_TASK and e not in self.failed:
                    reason = (detail or "")[:500]
                    self.failed[e] = (float(b.t[r]), reason)
                    head = reason.split("\n", 1)[0][:160]
                    if head in self.failed_reasons or len(self.failed_reasons) < _FAILED_REASONS:
                        self.failed_reasons[head] = self.failed_reasons.get(head, 0) + 1
                    else:
                        self.failed_reasons["(other reasons)"] = (
                            self.failed_reasons.get("(other reasons)", 0) + 1
                        )
                    if len(self.failed) > 4 * FAILED_KEPT:
                        for old in sorted(self.failed, key=lambda x: self.failed[x][0])[
                            :-FAILED_KEPT
                        ]:
                            del self.failed[old]
            elif name == E.SCHEDULE_OK and pilot is not None and detail:
                m = _PLACED.match(detail)
                if m:
                    ranks, cpr, gpr = int(m.group(1)), int(m.group(2)), int(m.group(3))
                    nodes = [int(x) for x in m.group(4).replace(" ", "").split(",") if x]
                    self._place(e, pilot, nodes, cpr, gpr, (ranks, cpr, gpr), float(b.t[r]))

    def _struct(self, b, rows, pilot: Pilot | None, sub: bool = False) -> None:
        uids = b.uid_texts(b.uid[rows])
        for r, uid in zip(rows.tolist(), uids):
            name = b.names[b.name[r]]
            if sub and name in SUB_LIFE and pilot is not None and uid == pilot.uid:
                continue  # a sub-agent's own start, drain, stop: the pilot's are its root's
            detail = b.details.get(r)
            t = float(b.t[r])
            if name == E.SESSION_STOP:
                self.stopped = True
            elif name in (E.SESSION_START, E.SESSION_RESUME):
                self.stopped, self.restarted = False, True
            elif name in PILOT_RANK and uid != "session":
                p = self._pilot(uid)
                rk = PILOT_RANK[name]
                if rk >= p.rank:
                    p.rank, p.state = rk, name
                if name in (S.FAILED, S.CANCELED) and detail:
                    p.notes.append((t, name, detail[:300]))
            elif pilot is None:
                continue
            elif name in LAUNCHER_EVENTS:
                head = (detail or "").split(":", 1)[0].strip() or "launcher"
                rec = pilot.launchers.setdefault(
                    head, {"name": head, "state": None, "since": t, "detail": None}
                )
                rec["state"], rec["since"] = LAUNCHER_EVENTS[name], t
                if name == E.LAUNCHER_FAILED:
                    rec["detail"] = (detail or "")[:300]
            elif name == E.PARTITION:  # detail: JSON {index, nodes, launcher}
                try:
                    d = _json.loads(detail or "{}")
                except ValueError:
                    d = None
                if not isinstance(d, dict):
                    continue
                k = d.get("index", len(pilot.partitions))
                part = pilot.partitions.setdefault(k, {"index": k})
                nodes = d.get("nodes")
                part.update(
                    nodes=len(nodes) if isinstance(nodes, list) else nodes,
                    launcher=d.get("launcher"),
                    state="open",
                )
            elif name == E.PARTITION_CLOSED:  # detail: "p<k> (<nodes>): <why>"
                m = _CLOSED.match(detail or "")
                k = int(m.group(1)) if m else len(pilot.partitions)
                part = pilot.partitions.setdefault(k, {"index": k})
                part.update(state="closed", why=(m.group(2) if m else detail or "")[:300])
            elif name in MEMBER_EVENTS or name == E.MEMBER_RESTART:
                key = f"{pilot.uid}/{uid}"
                mem = self.members.setdefault(
                    key,
                    {
                        "uid": uid,
                        "group": None,
                        "state": None,
                        "endpoint": None,
                        "since": t,
                        "why": None,
                    },
                )
                if name == E.MEMBER_START:
                    mem["group"] = detail
                    g = self._service(pilot, detail)
                    g["members"].add(key)
                if name in MEMBER_EVENTS:
                    mem["state"], mem["since"] = MEMBER_EVENTS[name], t
                if name == E.MEMBER_READY:
                    mem["endpoint"] = detail
                elif name in (E.MEMBER_FAIL, E.MEMBER_LEAVE):
                    mem["why"] = (detail or "")[:300]
            elif name in (E.GROUP_EPOCH, E.GROUP_RESIZE):
                g = self._service(pilot, uid)
                if name == E.GROUP_RESIZE:
                    g["target"] = detail
                else:
                    parts = (detail or "").split()
                    g["epoch"] = parts[0] if parts else None
                    g["view"] = parts[1] if len(parts) > 1 else None
                    g["epochs"].append((t, g["epoch"], g["view"]))
                    del g["epochs"][:-50]
            elif name in PILOT_NOTES:
                pilot.notes.append((t, name, (detail or "")[:300]))
                del pilot.notes[:-30]
                if name == E.NODE_LOST and detail:
                    pilot.lost.add(detail.split()[0])

    def _service(self, pilot: Pilot, name) -> dict:
        key = f"{pilot.uid}/{name}"
        return self.services.setdefault(
            key,
            {
                "pilot": pilot.uid,
                "name": name,
                "epoch": None,
                "view": None,
                "target": None,
                "epochs": [],
                "members": set(),
            },
        )


def _new_stamp(path: str, seen) -> tuple[int, int] | None:
    """The file's (mtime ns, size) if it is there and not the stamp `seen`, else None."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    return None if stamp == seen else stamp
