"""The dashboard's columnar store of one session: a slot per task in numpy arrays (grown by
doubling), the time-bucket histograms, the pilots, and the small tables codes point into
(shapes, pilot uids, task names). ingest.py fills it from the session's files; views.py
answers the dashboard's JSON from it; SessionWatch (views.py) is the three together.

Per task the state is kept as *levels*: reach[k][task] is the earliest time the task was seen
at rank >= k of its linear state model (NEW 1, SCHEDULING 2, STAGING_INPUT 3,
AGENT_SCHEDULING 4, placed -- schedule_ok -- 5, EXECUTING 6, STAGING_OUTPUT 7, final 8).
Levels make the result independent of the order in which the client's and the agents' files
are read (a task often shows up in its agent's file before the client's NEW is flushed). A
histogram per level over time buckets holds +1 where a task reached it (-1 where an earlier
time replaces a later one), so the number of tasks in each state at any time -- the timeline
-- is a cumulative sum, and the current counts are running totals: no pass over all tasks per
refresh for them.

Uids: a task's ("task.*", given by the TaskManager) is unique in the session; agent-made
tasks (function workers "worker.*", service members "<group>.*") are unique per pilot, so
they are keyed "<pilot>/<uid>" (the key of `index`, the text of `keys`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from pilotfish import _json
from pilotfish.analytics.dashboard.tail import FrameTail, PilotTails

LEVELS = 8
_BUCKETS = 2048  # timeline resolution (buckets double in width when full)
KIND_TASK, KIND_WORKER, KIND_OTHER = 0, 1, 2
FAILED_KEPT = 200  # the most recent failed tasks listed (all are counted)


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


class SessionStore:
    """The aggregates of one session directory, as columns (filled by SessionIngest)."""

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
        self.records_stamp: tuple[int, int] | None = None
        # (task index, tasks.msgpack's path) until decoded, then {pilot: mean use per node}
        self.record_nodes: tuple | dict | None = None
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
                new_kinds: int | np.ndarray = kinds
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

    def _tails(self) -> list[FrameTail]:
        return [self.client, self.journal] + [t for p in self.pilots.values() for t in p.tail.all()]

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
            bc, bg = pilot.busy_cores, pilot.busy_gpus  # (set together)
            if bc is None or bg is None or len(bc) < n:
                new_c, new_g = np.zeros(n), np.zeros(n)
                if bc is not None and bg is not None:
                    new_c[: len(bc)] = bc
                    new_g[: len(bg)] = bg
                pilot.busy_cores, pilot.busy_gpus = bc, bg = new_c, new_g
            np.add.at(bc, idx, np.asarray(cs, float))
            np.add.at(bg, idx, np.asarray(gs, float))
