"""A session followed as it runs: running aggregates over its events, updated from what was
appended since the last refresh (tail.FrameTail), answered as the dashboard's JSON.

Sources, all in the session directory (or a pilot's sandbox where the journal says it is
elsewhere): client.events, <pilot>/agent.events (and its sub-agents' <pilot>/sub/p<i>/
agent.events: tail.PilotTails) and <pilot>/pilot.json, the client's journal
(each task's shape, name and pilot, as submitted), tasks.msgpack when the session has closed
(the per-rank node of each task). Nothing is read twice.

Per task (one slot in columnar arrays, grown by doubling) the state is kept as *levels*:
reach[k][task] is the earliest time the task was seen at rank >= k of its linear state model
(NEW 1, SCHEDULING 2, STAGING_INPUT 3, AGENT_SCHEDULING 4, placed -- schedule_ok -- 5,
EXECUTING 6, STAGING_OUTPUT 7, final 8). Levels make the result independent of the order in
which the client's and the agents' files are read (a task often shows up in its agent's file
before the client's NEW is flushed). A histogram per level over time buckets holds +1 where a
task reached it (-1 where an earlier time replaces a later one), so the number of tasks in
each state at any time -- the timeline -- is a cumulative sum, and the current counts are
running totals: no pass over all tasks per refresh for them. The queue (tasks at the agent not
yet placed, by shape) and the cores in use are one vectorized pass over the task arrays
(~ms for a million tasks).

Uids: a task's ("task.*", given by the TaskManager) is unique in the session; agent-made
tasks (function workers "worker.*", service members "<group>.*") are unique per pilot, so
they are keyed "<pilot>/<uid>".
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np

from pilotfish import _events as E
from pilotfish import _json
from pilotfish import states as S
from pilotfish._agent_files import SUB_LIFE
from pilotfish.analytics.dashboard.tail import FrameTail, PilotTails, decode_events, decode_journal

FINALS = (S.DONE, S.FAILED, S.CANCELED)
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
LEVELS = 8
FINAL_KIND = {S.DONE: 1, S.FAILED: 2, S.CANCELED: 3}
# the task states shown, each as (name, level it starts at, level it ends at)
STATE_SPANS = (
    (S.NEW, 1, 2),
    (S.SCHEDULING, 2, 3),
    (S.STAGING_INPUT, 3, 4),
    (S.AGENT_SCHEDULING, 4, 6),
    (S.EXECUTING, 6, 7),
    (S.STAGING_OUTPUT, 7, 8),
)
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
_BUCKETS = 2048  # timeline resolution (buckets double in width when full)
_FAILED_KEPT = 200  # the most recent failed tasks listed (all are counted)
_FAILED_REASONS = 10_000  # distinct reasons counted at most (then "other")

KIND_TASK, KIND_WORKER, KIND_OTHER = 0, 1, 2
# tasks.msgpack's records (TaskRecord, array-like), for their per-rank nodes
_decode_nodes = msgspec.msgpack.Decoder(
    list[tuple[str, object, object, int, int, int, str, object, list[int]]]
).decode


class _KeyTable:
    """uint64 key -> int64 value, looked up and filled a whole array at a time (open
    addressing with linear probing in numpy arrays; kept at most half full): a dict
    lookup per uid and batch costs ~0.6 us, this ~0.05."""

    def __init__(self, bits: int = 16):
        self.keys = np.zeros(1 << bits, np.uint64)
        self.vals = np.full(1 << bits, -1, np.int64)
        self.n = 0

    def get(self, k: np.ndarray) -> np.ndarray:
        """The value of each key; -1 where a key is not in the table."""
        mask = np.uint64(len(self.keys) - 1)
        out = np.full(len(k), -1, np.int64)
        pending = np.arange(len(k))
        slot = (k & mask).astype(np.int64)
        while len(pending):
            tv = self.vals[slot]
            used = tv >= 0
            match = used & (self.keys[slot] == k[pending])
            out[pending[match]] = tv[match]
            go_on = used & ~match
            pending = pending[go_on]
            slot = (slot[go_on] + 1) & int(mask)
        return out

    def put(self, k: np.ndarray, v: np.ndarray) -> None:
        """Keys not in the table yet, each once."""
        if 2 * (self.n + len(k)) > len(self.keys):
            used = self.vals >= 0
            old_k, old_v = self.keys[used], self.vals[used]
            size = len(self.keys)
            while 2 * (self.n + len(k)) > size:
                size *= 2
            self.keys = np.zeros(size, np.uint64)
            self.vals = np.full(size, -1, np.int64)
            self.n = 0
            self.put(old_k, old_v)
        mask = len(self.keys) - 1
        pending = np.arange(len(k))
        slot = (k & np.uint64(mask)).astype(np.int64)
        while len(pending):
            free = self.vals[slot] < 0
            cand, cslot = pending[free], slot[free]
            taken, first = np.unique(cslot, return_index=True)  # one key per free slot
            winners = cand[first]
            self.keys[taken] = k[winners]
            self.vals[taken] = v[winners]
            placed = np.zeros(len(k), bool)
            placed[winners] = True
            left = ~placed[pending]
            pending = pending[left]
            slot = (slot[left] + 1) & mask
        self.n += len(k)


@dataclass
class Pilot:
    uid: str
    sandbox: str
    tail: PilotTails  # its agents' agent.events: its own, its sub-agents'
    state: str | None = None
    rank: int = 0
    nodes: list = field(default_factory=list)  # [name, cores, gpus, mem] (pilot.json)
    agent_cores: int = 0
    agent_gpus: int = 0
    resource: str | None = None
    pilot_json_stamp: tuple | None = None
    partitions: dict = field(default_factory=dict)  # index -> dict
    launchers: dict = field(default_factory=dict)  # detail head -> dict
    notes: list = field(default_factory=list)  # (t, what, detail)
    lost: set = field(default_factory=set)
    busy_cores: np.ndarray | None = None  # per node, when placements are known
    busy_gpus: np.ndarray | None = None


class SessionWatch:
    """The aggregates of one session directory; `refresh()` reads what was appended."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"not a session directory: {path}")
        self.info = self._json(os.path.join(self.path, "session.json")) or {}
        self.client = FrameTail(os.path.join(self.path, "client.events"))
        self.journal = FrameTail(os.path.join(self.path, "journal"))
        self.pilots: dict[str, Pilot] = {}
        self.stopped = False  # the client's session_stop read (and no resume after it)
        self.restarted = False
        self.refreshes = 0
        self.events_read = 0
        self.last_refresh_s = 0.0
        self.t_last = -math.inf
        self.t0 = float(self.info.get("created") or 0.0) or None
        self.width = 0.25
        self.hist = np.zeros((LEVELS, _BUCKETS), np.int64)
        self.hist_final = np.zeros((3, _BUCKETS), np.int64)
        self.level_total = np.zeros(LEVELS, np.int64)
        self.final_total = np.zeros(3, np.int64)
        self.max_bucket = 0
        # tasks, as columns
        self.n = 0
        self.index: dict[str, int] = {}
        self.by_key = _KeyTable()  # parser's first uid key -> entity
        self.keys: list[str] = []
        cap = 1024
        self.rank = np.zeros(cap, np.int8)
        self.final = np.zeros(cap, np.int8)
        self.kind = np.zeros(cap, np.int8)
        self.reach = np.full((LEVELS, cap), np.inf)
        self.t_sched = np.full(cap, -np.inf)
        self.t_unsched = np.full(cap, -np.inf)
        self.shape = np.zeros(cap, np.int32)  # into self.shapes
        self.pilot = np.full(cap, -1, np.int16)  # into self.pilot_uids
        self.group = np.full(cap, -1, np.int32)  # task name, into self.group_names
        self.is_call = np.zeros(cap, bool)
        self.key2 = np.zeros(cap, np.uint64)  # the second key of each entity's uid
        self.shapes: list[tuple[int, int, int]] = [(1, 1, 0)]
        self.shape_index = {(1, 1, 0): 0}
        self.pilot_uids: list[str] = []
        self.group_names: list[str] = []
        self.group_index: dict[str, int] = {}
        self.failed: dict[int, tuple[float, str]] = {}  # task -> (t, reason), recent ones
        self.failed_reasons: dict[str, int] = {}
        self.placements: dict[int, tuple] = {}  # task -> (pilot, nodes, cores, GPUs, t)
        self._pending_place: list[tuple] = []
        self.live_nodes = False
        self.services: dict[str, dict] = {}  # "<pilot>/<group>" -> group
        self.members: dict[str, dict] = {}  # "<pilot>/<member uid>" -> member
        self.records_stamp = None
        self.record_nodes = None  # (task index, raw nodes) from tasks.msgpack
        self.warnings: list[str] = []
        self.generation = 0
        self.behind = False  # the last refresh stopped at its budget: more to read

    # ------------------------------------------------------------------ small helpers
    @staticmethod
    def _json(path: str):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as fh:
                return _json.loads(fh.read(4 << 20))
        except (OSError, ValueError):
            return None

    def _pilot_index(self, uid: str) -> int:
        try:
            return self.pilot_uids.index(uid)
        except ValueError:
            self.pilot_uids.append(uid)
            return len(self.pilot_uids) - 1

    def _group_code(self, name) -> int:
        if not name:
            return -1
        c = self.group_index.get(name)
        if c is None:
            c = self.group_index[name] = len(self.group_names)
            self.group_names.append(str(name))
        return c

    def _shape_code(self, key: tuple[int, int, int]) -> int:
        c = self.shape_index.get(key)
        if c is None:
            c = self.shape_index[key] = len(self.shapes)
            self.shapes.append(key)
        return c

    def _grow(self, need: int) -> None:
        cap = len(self.rank)
        if need <= cap:
            return
        new = max(need, 2 * cap)

        def grown(a, fill):
            b = np.full(a.shape[:-1] + (new,), fill, a.dtype)
            b[..., :cap] = a
            return b

        self.rank, self.final, self.kind = (
            grown(self.rank, 0),
            grown(self.final, 0),
            grown(self.kind, 0),
        )
        self.reach = grown(self.reach, np.inf)
        self.t_sched, self.t_unsched = grown(self.t_sched, -np.inf), grown(self.t_unsched, -np.inf)
        self.shape, self.pilot, self.group = (
            grown(self.shape, 0),
            grown(self.pilot, -1),
            grown(self.group, -1),
        )
        self.is_call = grown(self.is_call, False)
        self.key2 = grown(self.key2, 0)

    def _entities(self, keys: list[str], kinds) -> np.ndarray:
        """The entity of each key, made where new (kinds: one per key, or one for all)."""
        index = self.index
        got = list(map(index.get, keys))
        if None in got:
            if isinstance(kinds, int):
                new = list(dict.fromkeys(k for k, g in zip(keys, got) if g is None))
                new_kinds = kinds
            else:
                fresh = dict(((k, c) for k, c, g in zip(keys, kinds, got) if g is None))
                new, new_kinds = list(fresh), np.fromiter(fresh.values(), np.int8, len(fresh))
            n0 = self.n
            self._grow(n0 + len(new))
            index.update(zip(new, range(n0, n0 + len(new))))
            self.keys.extend(new)
            self.kind[n0 : n0 + len(new)] = new_kinds
            self.n = n0 + len(new)
            got = list(map(index.get, keys))
        return np.fromiter(got, np.int64, len(got))

    def _pilot(self, uid: str, sandbox: str | None = None) -> Pilot:
        p = self.pilots.get(uid)
        if p is None:
            sandbox = sandbox or os.path.join(self.path, uid)
            p = self.pilots[uid] = Pilot(uid, sandbox, PilotTails(sandbox))
            self._pilot_index(uid)
        return p

    # ------------------------------------------------------------------ time buckets
    def _bucket(self, t: np.ndarray) -> np.ndarray:
        return np.clip(((t - self.t0) / self.width).astype(np.int64), 0, _BUCKETS - 1)

    def _cover(self, t_max: float) -> None:
        """Widen the buckets until t_max falls in the histogram."""
        if self.t0 is None:
            return
        while (t_max - self.t0) / self.width >= _BUCKETS:
            for h in (self.hist, self.hist_final):
                merged = h.reshape(h.shape[0], _BUCKETS // 2, 2).sum(axis=2)
                h[:] = 0
                h[:, : _BUCKETS // 2] = merged
            self.width *= 2
            self.max_bucket //= 2
        self.max_bucket = max(self.max_bucket, int((t_max - self.t0) / self.width))

    # ------------------------------------------------------------------ reading
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
            found = np.asarray(found, np.int64)
            ent_of[local[rest]] = found
            if k1 is not None:  # remember tasks' keys (entities keyed by their bare uid)
                fk, fe = k1[rest][bare], found[bare]
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
                    if len(self.failed) > 4 * _FAILED_KEPT:
                        for old in sorted(self.failed, key=lambda x: self.failed[x][0])[
                            :-_FAILED_KEPT
                        ]:
                            del self.failed[old]
            elif name == E.SCHEDULE_OK and pilot is not None and detail:
                m = _PLACED.match(detail)
                if m:
                    ranks, cpr, gpr = int(m.group(1)), int(m.group(2)), int(m.group(3))
                    nodes = [int(x) for x in m.group(4).replace(" ", "").split(",") if x]
                    self._place(e, pilot, nodes, cpr, gpr, (ranks, cpr, gpr), float(b.t[r]))

    # Placements change per-node sums in batches: _place/_unplace queue (pilot, nodes, cores,
    # GPUs, sign) and _apply_placements adds them with one np.add.at per pilot.
    def _place(
        self, e: int, pilot: Pilot, nodes: list, cpr: int, gpr: int, shape, t: float
    ) -> None:
        self.live_nodes = True
        if self.shape[e] == 0 and shape != (1, 1, 0):
            self.shape[e] = self._shape_code(shape)
        if e in self.placements:
            self._unplace(e, t)
        self.placements[e] = (pilot, nodes, cpr, gpr, t)
        self._pending_place.append((pilot, nodes, cpr, gpr))

    def _unplace(self, e: int, t: float) -> None:
        placed = self.placements.get(e)
        if placed is not None and t >= placed[4]:  # (not a newer placement's)
            del self.placements[e]
            pilot, nodes, cpr, gpr, _ = placed
            self._pending_place.append((pilot, nodes, -cpr, -gpr))

    def _apply_placements(self) -> None:
        by_pilot: dict[str, tuple[Pilot, list, list, list]] = {}
        for pilot, nodes, c, g in self._pending_place:
            rec = by_pilot.setdefault(pilot.uid, (pilot, [], [], []))
            rec[1].extend(nodes)
            rec[2].extend([c] * len(nodes))
            rec[3].extend([g] * len(nodes))
        self._pending_place.clear()
        for pilot, nodes, cs, gs in by_pilot.values():
            if not nodes:
                continue
            idx = np.asarray(nodes, np.int64)
            n = max(len(pilot.nodes), int(idx.max()) + 1)
            if pilot.busy_cores is None or len(pilot.busy_cores) < n:
                old_c, old_g = pilot.busy_cores, pilot.busy_gpus
                pilot.busy_cores, pilot.busy_gpus = np.zeros(n), np.zeros(n)
                if old_c is not None:
                    pilot.busy_cores[: len(old_c)] = old_c
                    pilot.busy_gpus[: len(old_g)] = old_g
            np.add.at(pilot.busy_cores, idx, np.asarray(cs, float))
            np.add.at(pilot.busy_gpus, idx, np.asarray(gs, float))

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
                m = self.members.setdefault(
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
                    m["group"] = detail
                    g = self._service(pilot, detail)
                    g["members"].add(key)
                if name in MEMBER_EVENTS:
                    m["state"], m["since"] = MEMBER_EVENTS[name], t
                if name == E.MEMBER_READY:
                    m["endpoint"] = detail
                elif name in (E.MEMBER_FAIL, E.MEMBER_LEAVE):
                    m["why"] = (detail or "")[:300]
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

    # ------------------------------------------------------------------ answers (JSON-able)
    @property
    def finished(self) -> bool:
        """The session has closed: its client said so, or (a session written without that
        event) tasks.msgpack, written at close, is there and nothing started it again."""
        return self.stopped or (self.records_stamp is not None and not self.restarted)

    def now(self) -> float:
        """The session's present: its last event once it has ended (or for a simulated
        pilot's virtual clock), else the wall clock."""
        if self.finished or not math.isfinite(self.t_last):
            return self.t_last if math.isfinite(self.t_last) else time.time()
        if any(p.resource == "simulated" for p in self.pilots.values()):
            return self.t_last
        return max(time.time(), self.t_last)

    def states(self) -> dict[str, int]:
        """Tasks now in each task state (the user's tasks; running totals, O(1))."""
        lt = self.level_total
        out = {
            name: int(lt[a - 1] - (lt[b - 1] if b <= LEVELS else 0)) for name, a, b in STATE_SPANS
        }
        for k, name in enumerate(FINALS):
            out[name] = int(self.final_total[k])
        return out

    def summary(self) -> dict:
        """/api/summary: the session, whether it is live, the counts by state, what was read."""
        lt = self.level_total
        return {
            "session": self.info.get("uid") or os.path.basename(self.path),
            "path": self.path,
            "live": not self.finished,
            "now": self.now(),
            "t0": self.t0,
            "elapsed_s": (self.now() - self.t0) if self.t0 else 0.0,
            "tasks": int(lt[0]) if lt[0] else int(sum(self.states().values())),
            "states": self.states(),
            "queued_at_agent": int(lt[3] - lt[4]),
            "placed_waiting_launch": int(lt[4] - lt[5]),
            "pilots": len(self.pilots),
            "events_read": self.events_read,
            "bytes_read": sum(t.bytes_read for t in self._tails()),
            "catching_up": self.behind,
            "bytes_total": self._bytes_total(),
            "refreshes": self.refreshes,
            "refresh_ms": round(1000 * self.last_refresh_s, 2),
            "warnings": self.warnings[-5:]
            + [f"{self._shown(t.path)}: {t.problem}" for t in self._tails() if t.problem],
        }

    def _shown(self, path: str) -> str:
        """A file's path as a warning names it: in the session, from there (which agent's)."""
        inside = path.startswith(self.path + os.sep)
        return os.path.relpath(path, self.path) if inside else path

    def _bytes_total(self) -> int:
        total = 0
        for t in self._tails():
            try:
                total += os.stat(t.path, follow_symlinks=False).st_size
            except OSError:
                pass
        return total

    def _tails(self) -> list[FrameTail]:
        return [self.client, self.journal] + [t for p in self.pilots.values() for t in p.tail.all()]

    def timeline(self, points: int = 400) -> dict:
        """Tasks in each state over time (at most `points` samples)."""
        last = self.max_bucket + 1
        if self.t0 is None or not self.events_read:
            return {"t": [], "series": {}, "width_s": self.width}
        cum = np.cumsum(self.hist[:, :last], axis=1)
        fcum = np.cumsum(self.hist_final[:, :last], axis=1)
        step = max(1, -(-last // points))
        idx = np.arange(step - 1, last, step)
        if idx[-1] != last - 1:
            idx = np.append(idx, last - 1)
        series = {}
        for name, a, b in STATE_SPANS:
            v = cum[a - 1] - (cum[b - 1] if b <= LEVELS else 0)
            series[name] = v[idx].tolist()
        for k, name in enumerate(FINALS):
            series[name] = fcum[k][idx].tolist()
        return {"t": ((idx + 1) * self.width).tolist(), "series": series, "width_s": self.width}

    def _busy_mask(self) -> np.ndarray:
        n = self.n
        return (self.t_sched[:n] > self.t_unsched[:n]) & (self.final[:n] == 0)

    def _shape_arrays(self):
        sh = np.asarray(self.shapes, np.int64).reshape(-1, 3)
        return sh[:, 0], sh[:, 1], sh[:, 2]

    def pilots_json(self) -> dict:
        """/api/pilots: per pilot its state, size, cores and GPUs in use, partitions, launchers and notable events."""
        n = self.n
        ranks, cpr, gpr = self._shape_arrays()
        busy = self._busy_mask()
        code = self.shape[:n][busy]
        pc = self.pilot[:n][busy].astype(np.int64)
        k = len(self.pilot_uids) + 1
        cores = np.bincount(pc + 1, weights=(ranks * cpr)[code], minlength=k)
        gpus = np.bincount(pc + 1, weights=(ranks * gpr)[code], minlength=k)
        out = []
        for uid, p in self.pilots.items():
            i = self._pilot_index(uid) + 1
            out.append(
                {
                    "uid": uid,
                    "state": p.state or ("ACTIVE?" if p.tail.bytes_read else None),
                    "resource": p.resource,
                    "nodes": len(p.nodes),
                    "cores": int(sum(int(x[1]) for x in p.nodes)) - p.agent_cores,
                    "gpus": int(sum(int(x[2]) for x in p.nodes)) - p.agent_gpus,
                    "busy_cores": int(cores[i]),
                    "busy_gpus": int(gpus[i]),
                    "partitions": sorted(p.partitions.values(), key=lambda x: str(x.get("index"))),
                    "launchers": list(p.launchers.values()),
                    "notes": [{"t": t, "event": w, "detail": d} for t, w, d in p.notes[-10:]],
                    "lost_nodes": sorted(p.lost)[:50],
                }
            )
        alloc = self._json(os.path.join(self.path, "autoalloc.json"))  # (client/autoalloc.py)
        return {"pilots": out, "allocations": alloc if isinstance(alloc, dict) else {}}

    def nodes_json(self) -> dict:
        """Per node of each pilot: cores and GPUs, and those in use -- now (placements named
        in the events), or, for a closed session without them, the mean over the pilot's
        active time (from tasks.msgpack)."""
        out = []
        mean = None if self.live_nodes else self._mean_use()
        for uid, p in self.pilots.items():
            cores = np.array([int(x[1]) for x in p.nodes], np.int64)
            gpus = np.array([int(x[2]) for x in p.nodes], np.int64)
            rec = {
                "uid": uid,
                "names": [str(x[0]) for x in p.nodes],
                "cores": cores.tolist(),
                "gpus": gpus.tolist(),
                "lost": sorted(p.lost)[:2048],
            }
            if self.live_nodes and p.busy_cores is not None:
                rec["mode"] = "now"
                rec["busy_cores"] = p.busy_cores[: len(cores)].round(2).tolist()
                rec["busy_gpus"] = p.busy_gpus[: len(cores)].round(2).tolist()
            elif mean is not None and uid in mean:
                rec["mode"] = "mean"
                rec["busy_cores"], rec["busy_gpus"] = mean[uid]
            else:
                rec["mode"] = "unknown"
            out.append(rec)
        return {"pilots": out, "live": self.live_nodes}

    def _mean_use(self):
        """{pilot: (mean busy cores per node, mean busy GPUs per node)} over each pilot's
        span of placements, from the per-rank nodes in tasks.msgpack (decoded once)."""
        if self.record_nodes is None:
            return None
        if isinstance(self.record_nodes, dict):
            return self.record_nodes
        ents, path = self.record_nodes
        try:
            with open(path, "rb") as fh:
                recs = _decode_nodes(fh.read())
        except (OSError, msgspec.DecodeError, ValueError) as e:
            self.warnings.append(f"tasks.msgpack nodes: {e}")
            self.record_nodes = {}
            return {}
        nodes = [r[8] for r in recs]
        counts = np.fromiter(map(len, nodes), np.int64, len(nodes))
        flat = np.fromiter((x for ns in nodes for x in ns), np.int64, int(counts.sum()))
        task = np.repeat(ents, counts)
        dur = np.clip(self.t_unsched[task] - self.t_sched[task], 0, None)
        dur[~np.isfinite(dur)] = 0.0
        ranks, cpr, gpr = self._shape_arrays()
        code = self.shape[task]
        result = {}
        for uid, p in self.pilots.items():
            i = self._pilot_index(uid)
            mine = self.pilot[task] == i
            n = max(len(p.nodes), 1)
            sel = mine & (flat < n)
            placed = self.t_sched[: self.n][
                (self.pilot[: self.n] == i) & np.isfinite(self.t_sched[: self.n])
            ]
            freed = self.t_unsched[: self.n][
                (self.pilot[: self.n] == i) & np.isfinite(self.t_unsched[: self.n])
            ]
            span = (freed.max() - placed.min()) if len(placed) and len(freed) else 0.0
            if span <= 0:
                continue
            cs = np.bincount(flat[sel], weights=(cpr[code] * dur)[sel], minlength=n) / span
            gs = np.bincount(flat[sel], weights=(gpr[code] * dur)[sel], minlength=n) / span
            result[uid] = (cs[:n].round(2).tolist(), gs[:n].round(2).tolist())
        self.record_nodes = result
        return result

    def queue_json(self) -> dict:
        """Tasks waiting at an agent (not yet placed), by pilot and shape: how many, how long
        the oldest has waited, and why they wait; and those not yet at an agent."""
        n = self.n
        now = self.now()
        user = self.kind[:n] == KIND_TASK
        rank = self.rank[:n]
        waiting = np.flatnonzero(user & (rank == 4) & (self.final[:n] == 0))
        ranks, cpr, gpr = self._shape_arrays()
        pilots = self.pilots_json()["pilots"]
        by_uid = {p["uid"]: p for p in pilots}
        groups = []
        if len(waiting):
            key = (
                (self.pilot[waiting].astype(np.int64) + 1) * (len(self.shapes) + 1)
                + self.shape[waiting]
            ) * 2 + self.is_call[waiting]  # calls apart from tasks
            distinct, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
            since = np.full(len(distinct), np.inf)
            np.minimum.at(since, inverse, self.reach[3][waiting])
            calls = np.bincount(inverse, weights=self.is_call[waiting], minlength=len(distinct))
            free_nodes = self._free_nodes()
            for k, (kv, c) in enumerate(zip(distinct.tolist(), counts.tolist())):
                pi, sc = divmod(kv // 2, len(self.shapes) + 1)
                puid = self.pilot_uids[pi - 1] if pi > 0 else None
                shape = self.shapes[sc]
                groups.append(
                    {
                        "pilot": puid,
                        "shape": f"{shape[0]}x{shape[1]}/{shape[2]}",
                        "ranks": shape[0],
                        "cores_per_rank": shape[1],
                        "gpus_per_rank": shape[2],
                        "count": c,
                        "calls": int(calls[k]),
                        "waited_s": max(0.0, now - float(since[k])),
                        "why": self._why(
                            by_uid.get(puid), shape, free_nodes.get(puid), int(calls[k]) == c
                        ),
                    }
                )
            groups.sort(key=lambda g: -g["waited_s"])
        before = np.flatnonzero(user & (rank >= 1) & (rank <= 3) & (self.final[:n] == 0))
        oldest = float(self.reach[0][before].min()) if len(before) else None
        return {
            "groups": groups[:200],
            "shapes_waiting": len(groups),
            "before_agent": int(len(before)),
            "before_agent_waited_s": max(0.0, now - oldest) if oldest else 0.0,
            "placed_waiting_launch": int(self.level_total[4] - self.level_total[5]),
        }

    def _free_nodes(self) -> dict:
        out = {}
        if not self.live_nodes:
            return out
        for uid, p in self.pilots.items():
            if p.busy_cores is None or not p.nodes:
                continue
            cores = np.array([int(x[1]) for x in p.nodes], float)
            gpus = np.array([int(x[2]) for x in p.nodes], float)
            k = min(len(cores), len(p.busy_cores))
            out[uid] = (cores[:k] - p.busy_cores[:k], gpus[:k] - p.busy_gpus[:k])
        return out

    def _why(self, p: dict | None, shape, free_nodes, calls: bool) -> str:
        ranks, cpr, gpr = shape
        if p is None:
            return "its pilot is not known yet"
        if p["state"] not in (S.ACTIVE, "ACTIVE?"):
            return f"pilot {p['uid']} is {p['state'] or 'not started'}: not active yet"
        starting = [x["name"] for x in p["launchers"] if x["state"] in ("starting", "restarting")]
        if starting and not any(x["state"] == "ready" for x in p["launchers"]):
            return f"its launcher is starting ({', '.join(starting[:3])})"
        if calls:
            return "function calls: waiting for a worker of this shape to take them"
        free_c = p["cores"] - p["busy_cores"]
        free_g = p["gpus"] - p["busy_gpus"]
        need_c, need_g = ranks * cpr, ranks * gpr
        if need_c > free_c or need_g > free_g:
            return (
                f"needs {need_c} cores and {need_g} GPUs; the pilot has {free_c} cores and "
                f"{free_g} GPUs free now: waits for running tasks to end"
            )
        if free_nodes is not None:
            fc, fg = free_nodes
            fits = int(np.sum((fc >= cpr) & (fg >= gpr)))
            if fits == 0:
                return (
                    f"no node has {cpr} free cores and {gpr} free GPUs now "
                    f"({free_c} cores, {free_g} GPUs free in all, spread over nodes)"
                )
            return (
                f"{fits} nodes have room for a rank now: placed at the scheduler's next "
                "round, unless higher-priority tasks take it first"
            )
        return (
            f"{free_c} cores and {free_g} GPUs are free in all; a rank needs {cpr} cores and "
            f"{gpr} GPUs on one node (placement per node is not in the events)"
        )

    def failed_json(self) -> dict:
        """/api/failed: how many failed, their reasons grouped, the most recent with name and reason."""
        recent = sorted(self.failed.items(), key=lambda kv: -kv[1][0])[:_FAILED_KEPT]
        rows = []
        for e, (t, reason) in recent:
            g = int(self.group[e])
            rows.append(
                {
                    "uid": self.keys[e],
                    "name": self.group_names[g] if g >= 0 else None,
                    "t": t - (self.t0 or 0.0),
                    "reason": reason,
                }
            )
        reasons = sorted(self.failed_reasons.items(), key=lambda kv: -kv[1])[:20]
        return {
            "count": int(self.final_total[1]),
            "canceled": int(self.final_total[2]),
            "by_reason": [{"reason": r, "count": c} for r, c in reasons],
            "recent": rows,
        }

    def services_json(self) -> dict:
        """/api/services: per service group its epoch, view, target and members by state."""
        groups = []
        for key, g in self.services.items():
            members = [self.members[m] for m in sorted(g["members"]) if m in self.members]
            counts: dict[str, int] = {}
            for m in members:
                counts[m["state"] or "?"] = counts.get(m["state"] or "?", 0) + 1
            groups.append(
                {
                    "pilot": g["pilot"],
                    "name": g["name"],
                    "epoch": g["epoch"],
                    "view": g["view"],
                    "target": g["target"],
                    "states": counts,
                    "epochs": [
                        {"t": t - (self.t0 or 0.0), "epoch": ep, "view": v}
                        for t, ep, v in g["epochs"][-10:]
                    ],
                    "members": [
                        {k: m[k] for k in ("uid", "state", "endpoint", "why")}
                        for m in members[-50:]
                    ],
                }
            )
        return {"groups": groups}

    def pools_json(self) -> dict:
        """Function pools: workers (agent tasks "worker.*") and calls (function tasks), per
        pilot and state."""
        n = self.n
        out = {}
        names = ("queued", "placed", "running", "ending", "done", "failed", "canceled")

        def state_counts(sel):
            r, f = self.rank[:n][sel], self.final[:n][sel]
            return {
                "queued": int(np.sum((f == 0) & (r <= 4))),
                "placed": int(np.sum((f == 0) & (r == 5))),
                "running": int(np.sum((f == 0) & (r == 6))),
                "ending": int(np.sum((f == 0) & (r == 7))),
                "done": int(np.sum(f == 1)),
                "failed": int(np.sum(f == 2)),
                "canceled": int(np.sum(f == 3)),
            }

        workers = np.flatnonzero(self.kind[:n] == KIND_WORKER)
        calls = np.flatnonzero(self.is_call[:n])
        for label, idx in (("workers", workers), ("calls", calls)):
            if not len(idx):
                continue
            for pi in np.unique(self.pilot[idx]).tolist():
                uid = self.pilot_uids[pi] if pi >= 0 else "?"
                sel = np.zeros(n, bool)
                sel[idx[self.pilot[idx] == pi]] = True
                out.setdefault(uid, {"pilot": uid})[label] = state_counts(sel)
        return {"pools": list(out.values()), "states": names}


def _new_stamp(path: str, seen) -> tuple[int, int] | None:
    """The file's (mtime ns, size) if it is there and not the stamp `seen`, else None."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    return None if stamp == seen else stamp
