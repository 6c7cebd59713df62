"""The PMI jobs whose ranks one process spawns: a node executor (agent/node_executor.py) for
its node, or the agent (worlds.py) for its own. Glue between the spawner and the PMI server
(server.py): a job per task world, each rank's descriptor and PMI variables for the Rust core,
the ranks' ends closed once spawned, fences and failures handed to the owner, the launch
timeout for PMI init, the job closed once its local ranks are reaped.

    pmi = NodePmi("n1", on_fence=..., on_fail=...)
    fds = pmi.start(kvsname, size, nodes_of_ranks, [(rank, key), ...], init_timeout)
    # spawn key k with pass_fd=fds[k][0] and env += fds[k][1]; then:
    pmi.spawned(kvsname)
    ... poll pmi.fileno(); pmi.poll(); pmi.tick() now and then; pmi.reaped(key) at each exit

Every node tells a world's ranks the world's own name (kvsname: 128 random bits drawn by the
agent for each task attempt, launch/pmi.py), the name the owner and the node wire know it by.
MPICH knows a rank's world by that name (and names its shared memory on the node after it,
/dev/shm/mpich_shm_<FNV-1a of it>_<node>): ranks of one world told different names take each
other for another world's, and MPI_Intercomm_create_from_groups aborts them. Another user cannot
predict the next world's name. A world whose ranks all live here is served under a fresh name
where its shared memory exists (mpich.pick_name); a world across nodes is refused on the node
where it does (ValueError: its ranks there fail, naming why) -- never served under two names.

on_fence(kvsname, epoch, step): this node's ranks all entered fence `epoch` (a world whose
ranks all live here completes its fences itself: no owner round trip). A node executor's
(wire=True) sends its keys in bounded parts, each step an encoded PmiFence payload
(fence.py): the first part at once, each next when the owner pulls it; the union comes
back the same way, through fence_done. The agent's own (wire=False) hands its whole
contribution over as a dict and takes the union's parts through fence_part.

on_fail(kvsname, rank, why, kind): the job cannot go on -- kind "abort" (MPI_Abort), "error"
(a malformed or oversized PMI input or fence step, rank -1 for the job), "lost" (a rank
closed its connection or exited before finalize: it died), "noinit" (a rank ended without
ever speaking PMI: not a program of the MPICH ABI -- judged when its process is reaped, from
its connection's state then, whoever else holds its descriptor), "timeout" (a rank did not
reach PMI init in time). The job is not served after a failure; its ranks read EOF.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from typing import Any

from ... import _node_wire as W
from .env import core_rank
from .fence import FenceError, decode, part, pull, split
from .job import PmiJob
from .server import PmiServer

log = logging.getLogger("pilotfish.pmi")

FailFn = Callable[[str, int, str, str], None]


class _Local:
    __slots__ = ("job", "keys", "left", "deadline", "timeout", "reported", "out", "got")

    def __init__(self, job: PmiJob, keys: dict[int, int], deadline: float, timeout: float):
        self.job = job
        self.keys = keys  # spawn key -> rank
        self.left = set(keys)  # keys not reaped yet
        self.deadline = deadline  # monotonic: every local rank must have sent init by then
        self.timeout = timeout
        self.reported = False  # a failure was reported (once per job)
        self.out: list[dict[str, str] | None] = []  # this fence's parts, until pulled
        self.got = 0  # parts of the union taken in this fence


class NodePmi:
    def __init__(
        self,
        node: str,
        on_fence: Callable[[str, int, Any], None],
        on_fail: FailFn,
        mono: Callable[[], float] = time.monotonic,
        wire: bool = True,
    ):
        self.node = node
        self._on_fence = on_fence
        self._on_fail = on_fail
        self.mono = mono
        self.wire = wire  # fences in encoded parts (a node executor's), or whole (the agent's)
        self.server = PmiServer(on_abort=self._abort, on_error=self._error, on_lost=self._lost)
        self.jobs: dict[str, _Local] = {}
        self.by_key: dict[int, str] = {}  # spawn key -> kvsname
        self._next_deadline = float("inf")

    def fileno(self) -> int:
        return self.server.fileno()

    def poll(self) -> None:
        self.server.poll()

    # -- a world's local ranks ------------------------------------------------------------------
    def start(
        self,
        kvsname: str,
        size: int,
        nodes: Sequence[str],
        ranks: Sequence[tuple[int, int]],
        init_timeout: float,
    ) -> dict[int, tuple[int, dict[str, str]]]:
        """Serve the local `ranks` [(rank, spawn key)] of a world of `size` ranks whose rank r
        lives on nodes[r]; per key, what its spawn takes: (pass_fd, PMI variables). Raises
        ValueError for a world it cannot serve (the spawner fails those ranks, naming why)."""
        if len(nodes) != size:
            raise ValueError(f"world {kvsname}: {len(nodes)} rank nodes for size {size}")
        ids: dict[str, int] = {}
        node_of_rank = [ids.setdefault(n, len(ids)) for n in nodes]
        alone = len(ids) == 1
        job = self.server.add_job(
            kvsname,
            size,
            [r for r, _ in ranks],
            node_of_rank=node_of_rank,
            on_fence=None if alone else self._fence,
        )  # (alone: the server completes its fences itself, every rank is here)
        if job.name != kvsname and not alone:  # (one world, one name: see above)
            job.close(remove_shm=False)  # (nothing of its own there yet)
            raise ValueError(
                f"its MPICH shared memory name on {self.node} is taken (a killed run's or "
                "another user's file in /dev/shm, or a live job's world id)"
            )
        keys = {int(k): int(r) for r, k in ranks}
        deadline = self.mono() + init_timeout
        self.jobs[kvsname] = _Local(job, keys, deadline, init_timeout)
        self._next_deadline = min(self._next_deadline, deadline)
        for k in keys:
            self.by_key[k] = kvsname
        return {k: core_rank(job, r) for k, r in keys.items()}

    def spawned(self, kvsname: str) -> None:
        """Its ranks hold their ends now: ours go, so that a rank's death reaches us as EOF."""
        loc = self.jobs.get(kvsname)
        if loc is not None:
            loc.job.close_rank_fds()

    def unspawned(self, kvsname: str, key: int) -> None:
        """A rank that could not be spawned: its end is closed with the others; counted as
        reaped (it never ran: its spawn failure names why, not its connection)."""
        self.reaped(key, exited=False)

    def fence_done(self, kvsname: str, epoch: int, step: Any) -> None:
        """A fence step from the owner (the wire's PmiFenceDone payload): a part of the union
        (the last completes the fence; while more follow, the next is pulled), or a pull of
        this node's next part. A whole union as a dict completes the fence at once."""
        loc = self.jobs.get(kvsname)
        if loc is None or loc.job.failed is not None or loc.job.closed:
            return
        try:
            s = decode(step, "the agent")
            if isinstance(s, W.PmiPull):
                self._send_part(loc, epoch, s.part)
                return
            self.fence_part(kvsname, epoch, s.keys, s.more)
            if s.more and loc.job.failed is None:
                loc.got += 1
                self._on_fence(kvsname, epoch, pull(loc.got))
            else:
                loc.got = 0
        except FenceError as e:
            self._report(loc.job, -1, f"PMI error on {self.node}: {e}", "error")
            loc.job.fail(str(e))

    def fence_part(self, kvsname: str, epoch: int, keys: dict, more: bool) -> None:
        """A part of fence `epoch`'s union for this node's job (the last one completes it)."""
        loc = self.jobs.get(kvsname)
        if loc is not None:
            try:
                loc.job.fence_part(epoch, keys, more)
            except ValueError as e:  # a stale or doubled answer: the job fails, named
                self._report(loc.job, -1, f"fence {epoch}: {e}", "error")
                loc.job.fail(str(e))

    def pending(self, kvsname: str) -> int:
        """Bytes this node's ranks of the world have put and not fenced yet."""
        loc = self.jobs.get(kvsname)
        return loc.job.pending_bytes if loc is not None else 0

    def elsewhere(self, kvsname: str, nbytes: int) -> None:
        """The owner holds `nbytes` of the world's current fence from other nodes: they count
        against the job's cap too (a local put that would pass it fails the world)."""
        loc = self.jobs.get(kvsname)
        if loc is not None:
            loc.job.elsewhere = nbytes

    def fail(self, kvsname: str, why: str) -> None:
        """The owner gave up on the world (another rank, another node): stop serving it."""
        loc = self.jobs.get(kvsname)
        if loc is not None:
            loc.reported = True
            loc.job.fail(why)

    def reaped(self, key: int, exited: bool = True) -> None:
        """A rank's process was reaped: its connection's state NOW decides -- a rank that never
        sent init fails its job ("noinit"), one that did but never finalized is lost -- even
        where another process (a child it left) still holds its descriptor; that connection
        is not served any more."""
        kvsname = self.by_key.pop(key, None)
        if kvsname is None:
            return
        loc = self.jobs.get(kvsname)
        if loc is None:
            return
        rank = loc.keys.get(key)
        if rank is not None:
            state = loc.job.rank_exited(rank)
            if exited and state is not None and not loc.reported:
                if state == "noinit":
                    self._lost(loc.job, rank)
                else:
                    self._report(
                        loc.job,
                        rank,
                        f"rank {rank} on {self.node} exited before MPI_Finalize",
                        "lost",
                    )
        loc.left.discard(key)
        if not loc.left:
            loc.job.close()  # (and MPICH's /dev/shm files of a killed run)
            del self.jobs[kvsname]

    def tick(self) -> None:
        """Ranks that have not reached PMI init by their job's deadline fail it."""
        now = self.mono()
        if now < self._next_deadline:
            return
        nxt = float("inf")
        for loc in list(self.jobs.values()):
            job = loc.job
            if job.failed is not None or job.closed:
                continue
            late = job.not_inited()
            if not late:
                continue
            if now >= loc.deadline:
                r = late[0]
                self._report(
                    job,
                    r,
                    f"rank {r} on {self.node} did not reach PMI init "
                    f"(MPI_Init) within {loc.timeout:g} s"
                    + (f" ({len(late)} ranks here did not)" if len(late) > 1 else ""),
                    "timeout",
                )
                job.fail("init timeout")
            else:
                nxt = min(nxt, loc.deadline)
        self._next_deadline = nxt

    def close(self) -> None:
        for loc in list(self.jobs.values()):
            loc.job.close()
        self.jobs.clear()
        self.server.close()

    # -- from the server ------------------------------------------------------------------------
    def _report(self, job: PmiJob, rank: int, why: str, kind: str) -> None:
        loc = self.jobs.get(job.kvsname)
        if loc is None or loc.reported:
            return
        loc.reported = True
        self._on_fail(job.kvsname, rank, why, kind)

    def _fence(self, job: PmiJob, epoch: int, new: dict) -> None:
        if not self.wire:
            self._on_fence(job.kvsname, epoch, new)
            return
        loc = self.jobs[job.kvsname]
        loc.out = list(split(new))
        loc.got = 0
        self._send_part(loc, epoch, 0)

    def _send_part(self, loc: _Local, epoch: int, i: int) -> None:
        """Part i of this node's contribution to fence `epoch` (each is sent once, then let
        go), or FenceError for a pull out of turn."""
        out = loc.out
        due = 0 <= i < len(out) and out[i] is not None and (i == 0 or out[i - 1] is None)
        if epoch != loc.job.epoch or not due:
            raise FenceError(f"the agent pulled part {i} of fence {epoch}, which is not due")
        keys = out[i]
        out[i] = None
        more = i < len(out) - 1
        if not more:
            loc.out = []
        self._on_fence(loc.job.kvsname, epoch, part(keys or {}, more))

    def _abort(self, job: PmiJob, rank: int, code: int, message: str) -> None:
        self._report(
            job,
            rank,
            f"rank {rank} on {self.node} called MPI_Abort (exit code "
            f"{code})" + (f": {message}" if message else ""),
            "abort",
        )

    def _error(self, job: PmiJob, rank: int | None, reason: str) -> None:
        who = f"rank {rank} on {self.node}" if rank is not None else f"on {self.node}"
        self._report(job, -1 if rank is None else rank, f"PMI error, {who}: {reason}", "error")

    def _lost(self, job: PmiJob, rank: int) -> None:
        c = job.conns.get(rank)
        if c is not None and not c.inited:
            self._report(
                job,
                rank,
                f"rank {rank} on {self.node} ended without speaking PMI: "
                "not a program of the MPICH ABI (Open MPI: launcher='prrte'; other "
                "programs: name their launcher)",
                "noinit",
            )
        else:
            self._report(
                job,
                rank,
                f"rank {rank} on {self.node} closed its PMI connection before MPI_Finalize",
                "lost",
            )
