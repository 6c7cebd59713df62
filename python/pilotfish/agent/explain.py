"""Why is it pending? The agent's answer for one task: where it is, what it waits for, which
nodes could ever hold it -- HyperQueue's `hq task explain`, for a pilot.

Read only: nothing here changes a task, so an answer never disturbs the run. Asked two ways:
by the session's client (`task.explain()`: the Explain message, answered with Explained) and
by `pilotfish explain SESSION TASK` from any shell of the user (not the session's client, so
it cannot speak on the agent's socket: it drops a request file in <sandbox>/explain/, which
the loop looks at once a second -- see requests()). The answer is a dict of plain values
(msgpack and JSON both carry it); pilotfish/_explain.py holds its keys and renders it.

The facts come from the rooms that own them, each reading its own state: the task table (the
task's state, its partition), the partition's scheduler (its queue position, reservations,
colocation, the plan: Scheduler.explain), the placer (free cores and GPUs per node now), the
launchers (one still starting), the function pool (a call's queue and workers:
FunctionPool.explain) and the service registry (a member's group and the holds on its view:
ServiceRegistry.explain). This module only words them.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import time
from typing import Any

from .. import _explain as X
from .. import states as S
from .._util import write_private
from .partition import READY
from .tasks import BACKOFF, DROPPED, FINAL, HELD, NEW, PLACED, RUNNING, WAITING

log = logging.getLogger("pilotfish.agent")

REQUEST_DIR = "explain"  # <sandbox>/explain/<id>.req (a JSON list of uids) -> <id>.json
POLL_S = 1.0  # how often the loop looks for request files
MAX_UIDS = 1000  # uids per request at most
MAX_REQUEST_BYTES = 1 << 20
MAX_PER_POLL = 16  # request files answered per look at most (the rest: the next)
MAX_REMEMBERED = 4096  # answered entries that could not be removed, remembered at most
LOG_EVERY_S = 60.0  # refused requests are logged as one line per this at most
NAMES = 8  # node names listed per answer at most (the counts are exact)


def explain(uids: list[str], table: Any, pool: Any, services: Any, clock: Any) -> list[dict]:
    """One answer per uid, in order."""
    return [explain_one(uid, table, pool, services, clock) for uid in uids[:MAX_UIDS]]


def explain_one(uid: str, table: Any, pool: Any, services: Any, clock: Any) -> dict:
    now, mono = clock.now(), clock.mono()
    t = table.tasks.get(uid)
    if t is None:
        facts = pool.explain(uid) if pool is not None else None
        if facts is not None:
            return _call(uid, facts, table)
        return {
            X.UID: uid,
            X.WHERE: X.UNKNOWN,
            X.WAITS_FOR: [
                "the agent holds no such live task: it ended (its final state is in the "
                "session's events), was never sent to this pilot, or is still on its way"
            ],
        }
    spec = t.spec
    out: dict = {
        X.UID: uid,
        X.REQUEST: [spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank],
    }
    p = t.partition
    if p is not None:
        out[X.PARTITION] = p.index
    est = _estimate(t, p)
    if est is not None:
        out[X.ESTIMATE] = est
    waits: list[str] = []
    out[X.WAITS_FOR] = waits
    state = t.state
    if state is WAITING and p is not None:
        out[X.WHERE] = X.QUEUED
        out[X.WAITED_S] = max(0.0, mono - t.queued)
        _queued(t, p, mono, out, waits)
    elif state is NEW:
        out[X.WHERE] = X.ARRIVING
        waits.append("just received (input staged, being bound to a partition)")
    elif state in (PLACED, HELD):
        out[X.WHERE] = X.HELD
        out[X.NODES] = _slot_nodes(t)
        lm = t.held
        if lm is not None:
            waits.append(
                f"placed on {', '.join(out[X.NODES][:NAMES])}; waits for its launcher "
                f"{lm.name} (partition p{lm.partition.index}) to start"
                + (f": {lm.reason}" if lm.reason else "")
            )
        else:
            waits.append(f"placed on {', '.join(out[X.NODES][:NAMES])}; being launched")
    elif state is RUNNING:
        out[X.WHERE] = X.RUNNING
        out[X.NODES] = _slot_nodes(t)
        how = getattr(t.lm, "name", None)
        if how:
            out[X.LAUNCHER] = how
        waits.append(
            f"running on {', '.join(out[X.NODES][:NAMES])}"
            + (f", launched by {how}" if how else "")
            + (f" (attempt {t.attempt + 1})" if t.attempt else "")
        )
    elif state is BACKOFF:
        out[X.WHERE] = X.BACKOFF
        waits.append(
            f"attempt {t.attempt} failed ({t.reason or 'no reason'}); queued again "
            f"after its retry backoff"
        )
    elif state in (DROPPED, FINAL):
        out[X.WHERE] = X.ENDING
        waits.append(f"ending: {t.final_state or ''} {t.reason or ''}".strip())
    if services is not None:
        _member(services.explain(uid), waits)
    if p is not None and not p.open:
        waits.append(f"its partition p{p.index} is closed: {p.closed_reason}")
    if p is not None and state is not RUNNING:
        out.update(_capacity(spec, p))
    out[X.AT] = now
    if state in _STATE:
        out[X.STATE] = _STATE[state]
    return out


# the task state (states.py) the client sees while the agent holds it so
_STATE = {
    NEW: S.AGENT_SCHEDULING,
    WAITING: S.AGENT_SCHEDULING,
    PLACED: S.AGENT_SCHEDULING,
    HELD: S.AGENT_SCHEDULING,
    RUNNING: S.EXECUTING,
    BACKOFF: S.AGENT_SCHEDULING,
}


def _queued(t, p, mono: float, out: dict, waits: list) -> None:
    """A task in its partition's queue: what keeps it there."""
    spec = t.spec
    q = p.scheduler.explain(t, mono)
    names = p.names
    now_nodes = _fit_now(spec, p)
    out[X.FREE_NOW] = _names(names, now_nodes)
    per = (
        f"{spec.cores_per_rank} free core{'s' if spec.cores_per_rank != 1 else ''}"
        + (
            f" and {spec.gpus_per_rank} GPU{'s' if spec.gpus_per_rank != 1 else ''}"
            if spec.gpus_per_rank
            else ""
        )
        + (f" and {spec.mem_per_rank} MiB" if spec.mem_per_rank else "")
    )
    fit_ranks = sum(n for _, n in now_nodes)
    group_node = q.get("group_node")
    if group_node is not None:
        free = p.placer.free(group_node)
        waits.append(
            f"its colocation group {spec.colocate!r} is on {names[group_node]}: "
            f"waits for {spec.ranks} x {per} there (free now: {free[0]} cores, "
            f"{free[1]} GPUs)"
        )
    elif not now_nodes:
        waits.append(
            f"no node has {per} now"
            + (f" for any of its {spec.ranks} ranks" if spec.ranks > 1 else "")
        )
    elif fit_ranks < spec.ranks:
        waits.append(
            f"only {fit_ranks} of its {spec.ranks} ranks fit now ({len(now_nodes)} "
            f"node{'s' if len(now_nodes) != 1 else ''} with {per})"
        )
    if "reserved" in q:
        rn = [names[i] for i in q["reserved"]]
        waits.append(
            f"holds a reservation on {', '.join(rn[:NAMES])}"
            f"{' ...' if len(rn) > NAMES else ''} (it waited longest): starts there "
            "as soon as the tasks running on them end"
        )
    elif "reserved_by" in q:
        other, rn = q["reserved_by"]
        rn = [names[i] for i in rn]
        waits.append(
            f"task {other} holds a reservation on {', '.join(rn[:NAMES])}"
            f"{' ...' if len(rn) > NAMES else ''}: nothing else starts there "
            "until it does"
        )
    if q.get("ahead"):
        waits.append(
            f"{q['ahead']} earlier task{'s' if q['ahead'] != 1 else ''} of the "
            f"same shape go{'es' if q['ahead'] == 1 else ''} first"
        )
    if q.get("heads_before"):
        waits.append(
            f"the {q['policy']} policy starts {q['heads_before']} other shape"
            f"{'s' if q['heads_before'] != 1 else ''} of work before it (harder to "
            f"place, higher priority or waiting longer)"
        )
    if "plan_rank" in q:
        waits.append(f"the plan in force starts it as number {q['plan_rank'] + 1}")
    if q.get("blocked_s"):
        waits.append(f"its shape has found no room for {q['blocked_s']:.1f} s")
    if not q["aged"] and q["policy"] != "fifo":
        waits.append(
            f"after {q['aging_s']:g} s of waiting it goes ahead of every task of "
            f"its priority that waited less"
        )
    if p.launchers and not p.is_ready:
        lm = p.launchers.get(p.default_launcher)
        if lm is not None and lm.state != READY:
            waits.append(
                f"its partition's launcher {lm.name} is {lm.state}"
                + (f": {lm.reason}" if lm.reason else "")
            )
    if not waits:
        waits.append("nothing: it fits now and starts in the next scheduling round")


def _fit_now(spec, p) -> list[tuple[int, int]]:
    """[(node index, ranks that fit there now)] of the nodes with room for a rank."""
    out = []
    placer = p.placer
    c, g, m = spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank
    for i in range(len(p.names)):
        fc, fg, fm = placer.free(i)
        n = _ranks(fc, fg, fm, c, g, m)
        if n:
            out.append((i, min(n, spec.ranks)))
    return out


def _capacity(spec, p) -> dict:
    """Which nodes could ever hold it (empty, all theirs) and whether the partition could."""
    c, g, m = spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank
    ever = [(i, n) for i, (nc, ng, nm) in enumerate(p.shape) if (n := _ranks(nc, ng, nm, c, g, m))]
    if spec.colocate is not None:  # all its ranks on one node
        ever = [(i, n) for i, n in ever if n >= spec.ranks]
    total = sum(n for _, n in ever)
    out = {X.FITS_EVER: _names(p.names, ever), X.RANKS_EVER: total}
    if total < spec.ranks:
        out[X.NEVER] = (
            f"partition p{p.index} holds at most {total} of its {spec.ranks} ranks even empty"
        )
    return out


def _ranks(fc: int, fg: int, fm: int, c: int, g: int, m: int) -> int:
    n = fc // c if c else 1 << 30
    if g:
        n = min(n, fg // g)
    if m and fm:  # 0: memory not tracked there
        n = min(n, fm // m)
    return n


def _names(names: list[str], picked: list[tuple[int, int]]) -> dict:
    return {"count": len(picked), "names": [names[i] for i, _ in picked[:NAMES]]}


def _slot_nodes(t) -> list[str]:
    seen: dict[str, None] = {}
    for s in t.slots or ():
        seen.setdefault(s.node, None)
    return list(seen)


def _estimate(t, p) -> dict | None:
    """The duration the scheduler works with: the user's, or one learned from the run."""
    if t.spec.duration is not None:
        return {"seconds": t.spec.duration, "source": "given"}
    if p is None:
        return None
    e = p.scheduler.expected(t.spec)
    if e is None:
        return None
    return {
        "seconds": e.seconds,
        "source": "learned",
        "std": e.std,
        "n": e.n,
        "from": "finished tasks of its kind (same executable and shape)"
        if e.source == "kind"
        else "finished tasks of its executable",
    }


def _call(uid: str, facts: dict, table) -> dict:
    """A function call (FunctionPool.explain's facts): its queue, or the worker running it."""
    waits: list[str] = []
    out = {X.UID: uid, X.WAITS_FOR: waits}
    worker = facts.get("worker")
    if worker is not None:
        out[X.WHERE] = X.RUNNING
        out[X.STATE] = S.EXECUTING
        node = ""
        wt = table.tasks.get(worker)
        if wt is not None:
            out[X.NODES] = _slot_nodes(wt)
            node = f" on {', '.join(out[X.NODES])}"
        waits.append(f"a function call, sent to worker {worker}{node} ({facts['worker_state']})")
        return out
    out[X.WHERE] = X.QUEUED
    out[X.STATE] = S.AGENT_SCHEDULING
    if facts.get("parked"):
        waits.append("a function call whose callable has not reached the agent yet")
        return out
    ranks, cores, gpus, _ = out[X.REQUEST] = facts["shape"]
    ahead, ready = facts["ahead"], facts["ready"]
    waits.append(
        f"a function call queued for a worker of {ranks} x ({cores} cores, "
        f"{gpus} GPUs): {ahead} call{'s' if ahead != 1 else ''} ahead; "
        f"{ready} worker{'s' if ready != 1 else ''} ready, {facts['starting']} "
        f"starting (at most {facts['cap']} at once)"
    )
    if facts["misfit"]:
        waits.append(f"no worker of that shape can start: {facts['misfit']}")
    return out


def _member(facts: dict | None, waits: list) -> None:
    """A service member (ServiceRegistry.explain's facts)."""
    if facts is None:
        return
    line = f"a member of service group {facts['group']!r} ({facts['state']}"
    if facts["endpoint"]:
        line += f", at {facts['endpoint']}"
    line += (
        f"; the group's view is epoch {facts['epoch']} with {facts['view']} of "
        f"{facts['target']} members)"
    )
    waits.append(line)
    if "pending" in facts:
        holders = facts["holders"]
        who = ", ".join("the client" if o is None else f"task {o}" for o in holders)
        waits.append(
            f"its {facts['pending']} waits for the view's "
            f"hold{'s' if len(holders) != 1 else ''} to be released (held by {who})"
        )


# -- requests from `pilotfish explain` -----------------------------------------------------
# Any task of the pilot can write into <sandbox>/explain/ (it runs as the user): what lies
# there is read as hostile. A request is parsed alone -- whatever it holds (nested 200 KB
# deep, not UTF-8, not a list of strings) is answered with why and counted, never raised
# into the loop -- and only a regular file is read (opened without following a link, without
# blocking on a FIFO). An entry the agent cannot take away after answering it (a directory:
# the agent removes none, nor what is inside) is remembered by its name, inode and kind, and
# never answered again; a new entry of that name is a new request.
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)


class RequestReader:
    """The request files of one sandbox, read once a second by the agent's loop (poll):
    what it answered, refused and dropped (counts), and the entries it answered but could
    not remove (remembered, at most MAX_REMEMBERED; past that such an entry is skipped
    unanswered and counted)."""

    def __init__(self, sandbox: str):
        self.dir = os.path.join(sandbox, REQUEST_DIR)
        self.counts = {"answered": 0, "rejected": 0, "dropped": 0, "skipped": 0}
        self._left: set[tuple[str, int, int]] = set()  # (name, inode, kind) answered, still there
        self._logged = {"rejected": 0, "dropped": 0, "skipped": 0}
        self._last_log = -math.inf
        self._last_why = ""
        self._traced = False

    @property
    def remembered(self) -> int:
        return len(self._left)

    def poll(self, answer) -> int:
        """Answer the request files there (MAX_PER_POLL at most; the rest the next time):
        <id>.req holds a JSON list of uids; the answer goes to <id>.json (0600, written whole,
        then renamed): {"answers": answer(uids)}, or {"error": why}. Returns how many were
        answered."""
        try:
            it = os.scandir(self.dir)
        except OSError:
            return 0
        n = 0
        seen: set[tuple[str, int, int]] = set()
        complete = True
        with it:
            for e in it:
                if not e.name.endswith(".req"):
                    continue
                if n >= MAX_PER_POLL:
                    complete = False
                    break
                try:
                    key = (e.name, e.inode(), _kind(e))
                except OSError:  # gone since it was listed
                    continue
                seen.add(key)
                if key in self._left:
                    continue
                try:
                    n += self._one(e, key, answer)
                except Exception as err:  # noqa: BLE001 -- a request never ends the loop
                    self._count("rejected", f"{e.name}: {type(err).__name__}: {err}")
        if complete:  # what is no longer there is forgotten (a new entry is a new request)
            self._left &= seen
        self._log()
        return n

    def _one(self, e: os.DirEntry, key: tuple[str, int, int], answer) -> int:
        rid = e.name[:-4]
        if not rid or not all(ch.isalnum() or ch in "-_" for ch in rid):
            # not a name `pilotfish explain` makes: dropped unanswered (its answer's name
            # could be anything)
            self._count("dropped", f"{e.name!r}: not a request id")
            if not _remove(e.path, key[2]):
                self._remember(key)
            return 0
        try:
            uids = self._read(e.path, key[2])
        except _Refused as why:
            body: Any = {"error": f"request {e.name}: {why}"}
            self._count("rejected", body["error"])
        else:
            try:
                body = {"answers": answer(uids[:MAX_UIDS])}
            except Exception as err:  # read only: an asker's bad luck, not the run's
                if not self._traced:  # the agent's own fault: its trace, once
                    self._traced = True
                    log.exception("explain request %s: the answer failed", e.name)
                body = {
                    "error": f"request {e.name}: the agent could not answer it: "
                    f"{type(err).__name__}: {err}"
                }
                self._count("rejected", body["error"])
            else:
                self.counts["answered"] += 1
        if not _remove(e.path, key[2]):
            if not self._remember(key):
                return 0
        try:
            write_private(os.path.join(self.dir, rid + ".json"), json.dumps(body).encode())
        except OSError:
            pass
        return 1

    def _read(self, path: str, kind: int) -> list[str]:
        """The uids of a request file, or _Refused(why)."""
        if kind != stat.S_IFREG:
            raise _Refused(f"not a regular file ({_KINDS.get(kind, 'of another kind')})")
        try:
            fd = os.open(path, _OPEN)
        except OSError as err:
            if err.errno == errno.ELOOP:  # replaced by a link since it was listed
                raise _Refused("not a regular file (a symbolic link)") from None
            raise _Refused(err.strerror or str(err)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # replaced since it was listed
                raise _Refused(
                    f"not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'of another kind')})"
                )
            raw = os.read(fd, MAX_REQUEST_BYTES + 1)
        except OSError as err:
            raise _Refused(err.strerror or str(err)) from None
        finally:
            os.close(fd)
        if len(raw) > MAX_REQUEST_BYTES:
            raise _Refused(f"larger than {MAX_REQUEST_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _Refused(f"not UTF-8 (byte {err.start})") from None
        try:
            uids = json.loads(text)
        except RecursionError:  # (the C parser counts its depth against the recursion limit)
            raise _Refused("nested too deep (a request is a flat JSON list of task uids)") from None
        except ValueError as err:
            raise _Refused(f"not JSON: {err}"[:300]) from None
        if not isinstance(uids, list) or not all(isinstance(u, str) for u in uids):
            raise _Refused("not a JSON list of task uids")
        return uids

    def _remember(self, key: tuple[str, int, int]) -> bool:
        """Remember an entry that stays; False (counted) when too many are remembered."""
        if len(self._left) >= MAX_REMEMBERED:
            self._count("skipped", f"{key[0]}: more than {MAX_REMEMBERED} entries left there")
            return False
        self._left.add(key)
        return True

    def _count(self, what: str, why: str) -> None:
        self.counts[what] += 1
        self._last_why = why

    def _log(self) -> None:
        """One line per LOG_EVERY_S at most, with the counts since the last: a task writing
        bad requests as fast as it can does not flood agent.log."""
        new = {k: self.counts[k] - v for k, v in self._logged.items()}
        if not any(new.values()):
            return
        now = time.monotonic()
        if now - self._last_log < LOG_EVERY_S:
            return
        self._last_log = now
        self._logged = {k: self.counts[k] for k in self._logged}
        log.warning(
            "explain requests refused: %d, dropped: %d, skipped: %d since the last "
            "report (%d refused in all); the latest: %s",
            new["rejected"],
            new["dropped"],
            new["skipped"],
            self.counts["rejected"],
            self._last_why,
        )


class _Refused(Exception):
    """Why a request is answered with an error."""


def _kind(e: os.DirEntry) -> int:
    """An entry's file type (S_IFREG, S_IFDIR, ...), without following a link."""
    if e.is_symlink():
        return stat.S_IFLNK
    if e.is_file(follow_symlinks=False):
        return stat.S_IFREG
    if e.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    return stat.S_IFMT(e.stat(follow_symlinks=False).st_mode)


def _remove(path: str, kind: int) -> bool:
    """Take an answered entry away (a directory never: it stays); whether it is gone."""
    if kind == stat.S_IFDIR:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


_READERS: dict[str, RequestReader] = {}


def requests(sandbox: str, answer) -> int:
    """Answer every request file in <sandbox>/explain/ (RequestReader.poll, one reader per
    sandbox kept across calls: the agent's loop calls this once a second). answer(uids) ->
    list. Returns how many were answered."""
    reader = _READERS.get(sandbox)
    if reader is None:
        reader = _READERS[sandbox] = RequestReader(sandbox)
    return reader.poll(answer)
