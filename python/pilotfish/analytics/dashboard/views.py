"""The dashboard's views: the JSON of each endpoint (/api/summary, timeline, nodes, queue,
failed, pilots, services, pools), answered from the store (store.py) that ingestion
(ingest.py) keeps up to date. SessionWatch is the three: a session followed as it runs.

Current counts are the store's running totals (O(1)); the timeline, a cumulative sum of its
histograms; the queue (tasks at the agent not yet placed, by shape) and the cores in use, one
vectorized pass over the task arrays (~ms for a million tasks).
"""

from __future__ import annotations

import math
import os
import time

import msgspec
import numpy as np

from pilotfish import states as S
from pilotfish.analytics.dashboard.ingest import SessionIngest
from pilotfish.analytics.dashboard.store import FAILED_KEPT, KIND_TASK, KIND_WORKER, LEVELS

FINALS = (S.DONE, S.FAILED, S.CANCELED)
# the task states shown, each as (name, level it starts at, level it ends at)
STATE_SPANS = (
    (S.NEW, 1, 2),
    (S.SCHEDULING, 2, 3),
    (S.STAGING_INPUT, 3, 4),
    (S.AGENT_SCHEDULING, 4, 6),
    (S.EXECUTING, 6, 7),
    (S.STAGING_OUTPUT, 7, 8),
)
# tasks.msgpack's records (TaskRecord, array-like), for their per-rank nodes
_decode_nodes = msgspec.msgpack.Decoder(
    list[tuple[str, object, object, int, int, int, str, object, list[int]]]
).decode


class SessionWatch(SessionIngest):
    """A session followed as it runs: `refresh()` reads what was appended (SessionIngest);
    the methods below answer the dashboard's JSON from the aggregates."""

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
        """/api/pilots: per pilot its state, size, cores and GPUs in use, partitions,
        launchers and notable events."""
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
            if self.live_nodes and p.busy_cores is not None and p.busy_gpus is not None:
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
        out: dict = {}
        if not self.live_nodes:
            return out
        for uid, p in self.pilots.items():
            if p.busy_cores is None or p.busy_gpus is None or not p.nodes:
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
        """/api/failed: how many failed, their reasons grouped, the most recent with name
        and reason."""
        recent = sorted(self.failed.items(), key=lambda kv: -kv[1][0])[:FAILED_KEPT]
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
        out: dict = {}
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
