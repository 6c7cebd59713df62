"""One task's PMI job as one node sees it (PmiJob): its local ranks' connections (Conn: the
protocol state of one rank, no socket), the key-value space, the fences, the caps; and the
checks of what a job is made with (job_settings). No I/O but closing the ranks' ends it was
handed: answers, failures and closed connections go through its host (the engine,
engine.py; the server, server.py, is one).

The space's cap counts every key and value, all nodes' together, each key charged
ENTRY_COST more (empty-key floods): a put checked before it is kept (with what the owner
holds of this fence from other nodes: `elsewhere`), a fence's union checked part by part as
it comes (fence_part), before it is merged -- over the cap, the job fails naming it.

Fences: when every LOCAL rank of the job has entered one (barrier_in / kvs-fence: arrive),
the job calls its on_fence(job, epoch, new_keys) once with the keys this node's ranks put
since the last fence; the owner hands the union back -- whole (fence_done) or in parts
(fence_part) -- and every local rank in the fence is answered. Without on_fence (every rank
here) the job completes its fences itself.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from . import mpich
from .parse import PmiProtocolError
from .wire import ENTRY_COST, KEYLEN_MAX, KVSNAME_MAX, VALLEN_MAX, format1, format2

_KVSNAME_OK = re.compile(r"[A-Za-z0-9_.:+-]{1,%d}\Z" % (KVSNAME_MAX - 1))

FenceFn = Callable[["PmiJob", int, dict], None]


class Host(Protocol):
    """What a job needs of whoever serves it (engine.Engine)."""

    max_kvs_bytes: int

    def send(self, c: Conn, data: bytes) -> None: ...
    def fail(self, job: PmiJob, rank: int | None, reason: str, report: bool = True) -> None: ...
    def close_conn(self, c: Conn) -> None: ...
    def drop_job(self, job: PmiJob) -> None: ...
    def settle(self, c: Conn) -> None: ...
    def forget(self, c: Conn) -> None: ...


class Conn:
    """One rank's connection: its protocol state (the server adds its socket: sock, fd)."""

    __slots__ = (
        "sock",
        "fd",
        "job",
        "rank",
        "inbuf",
        "outbuf",
        "wire",
        "inited",
        "in_fence",
        "fence_thrid",
        "finalized",
        "aborted",
        "closed",
        "mcmd",
        "mcmd_bytes",
        "waits",
    )

    def __init__(self, job: PmiJob, rank: int):
        self.sock: Any = None  # the server end of its socketpair (server.py), if any
        self.fd = -1
        self.job = job
        self.rank = rank
        self.inbuf = bytearray()
        self.outbuf = bytearray()  # answers not yet taken (by the socket, or by a test)
        self.wire = 1  # 2 once the rank asked for PMI-2 in its init
        self.inited = False
        self.in_fence = False
        self.fence_thrid: str | None = None
        self.finalized = False
        self.aborted = False
        self.closed = False
        self.mcmd: list[int] | None = None  # [totspawns, spawnssofar] inside a PMI-1 spawn
        self.mcmd_bytes = 0
        self.waits: list[tuple[str, str | None]] = []  # info-getnodeattr wait=TRUE: key, thrid

    def reply1(self, cmd: str, **kv: str) -> None:
        self.job.server.send(self, format1(cmd, kv))

    def reply2(self, cmd: str, thrid: str | None, **kv: str) -> None:
        self.job.server.send(self, format2(cmd, thrid, kv))


def check_kvsname(kvsname: object) -> None:
    if not isinstance(kvsname, str) or not _KVSNAME_OK.match(kvsname):
        raise ValueError(
            f"kvsname={kvsname!r}: 1..{KVSNAME_MAX - 1} characters of "
            "[A-Za-z0-9_.:+-] (it travels in PMI lines)"
        )


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def job_settings(
    size: int,
    local_ranks: Iterable[int],
    node_of_rank: Sequence[int] | None,
    appnum: int,
    universe_size: int | None,
    attrs: Mapping[str, str] | None,
    fenced: bool,
) -> tuple[tuple[int, ...], int, dict[str, str], int]:
    """What a job is made with, checked (see engine.Engine.add_job): its local ranks, sorted;
    its universe size; its job attributes (PMI_process_mapping, universeSize, `attrs`); the
    node id of its local ranks in the mapping. ValueError naming the field, the value, why.
    `fenced`: the job has an on_fence (a job with ranks elsewhere needs one)."""
    if not _is_int(size) or size < 1:
        raise ValueError(f"size={size!r}: a positive int")
    ranks = tuple(sorted(local_ranks))
    if (
        not ranks
        or len(set(ranks)) != len(ranks)
        or any(not _is_int(r) or not 0 <= r < size for r in ranks)
    ):
        raise ValueError(
            f"local_ranks={list(ranks)!r}: distinct ints in 0..{size - 1}, at least one"
        )
    if not fenced and len(ranks) < size:
        raise ValueError(
            f"local_ranks={list(ranks)!r} of size={size}: ranks live on "
            "other nodes, so the job needs an on_fence that gathers them"
        )
    if not _is_int(appnum):
        raise ValueError(f"appnum={appnum!r}: an int")
    if universe_size is None:
        universe_size = size
    if not _is_int(universe_size) or universe_size < size:
        raise ValueError(f"universe_size={universe_size!r}: an int >= size ({size})")
    job_attrs: dict[str, str] = {}
    if node_of_rank is None:
        if len(ranks) < size:
            raise ValueError(
                f"node_of_rank=None for local_ranks={list(ranks)!r} of "
                f"size={size}: a job with ranks elsewhere needs every "
                "rank's node"
            )
        node_of_rank = [0] * size
    if len(node_of_rank) != size or any(not _is_int(n) or n < 0 for n in node_of_rank):
        raise ValueError(
            f"node_of_rank: {size} non-negative ints (one per rank), "
            f"got {list(node_of_rank)[:8]!r}" + ("..." if len(node_of_rank) > 8 else "")
        )
    mapping = mpich.process_mapping(node_of_rank)
    if len(mapping) <= VALLEN_MAX:  # else MPICH's allgather of host names does it
        job_attrs["PMI_process_mapping"] = mapping
    job_attrs["universeSize"] = str(universe_size)  # PMI-2's name for it
    for k, v in (attrs or {}).items():
        if (
            not isinstance(k, str)
            or not isinstance(v, str)
            or not k
            or len(k) > KEYLEN_MAX
            or len(v) > VALLEN_MAX
            or any(ch in k + v for ch in " ;\n=\\")
        ):
            raise ValueError(
                f"attrs[{k!r}]={v!r}: str key (1..{KEYLEN_MAX}) and value "
                f"(..{VALLEN_MAX}) without space, ';', '=', '\\\\' or newline"
            )
        job_attrs[k] = v
    ids: dict[int, int] = {}  # MPICH's node ids: as process_mapping numbers them (and
    for n in node_of_rank:  # as its allgather of host names would, without a mapping)
        ids.setdefault(n, len(ids))
    here = {node_of_rank[r] for r in ranks}
    if len(here) != 1:
        raise ValueError(
            f"node_of_rank: the local ranks {list(ranks)} are on nodes {sorted(here)}, not one node"
        )
    return ranks, universe_size, job_attrs, ids[here.pop()]


class PmiJob:
    """One task's PMI job as this node sees it: its local ranks and their connections, the
    key-value space, the fence state. Made by PmiServer.add_job (engine.Engine.add_job)."""

    def __init__(
        self,
        server: Host,
        kvsname: str,
        size: int,
        ranks: tuple[int, ...],
        appnum: int,
        universe_size: int,
        attrs: dict[str, str],
        on_fence: FenceFn | None,
    ):
        self.server = server
        self.kvsname = kvsname  # the owner's name of the job
        self.name = kvsname  # the name its ranks are told (add_job: fresh where taken)
        self.size = size
        self.ranks = ranks
        self.appnum = appnum
        self.universe_size = universe_size
        self.attrs = attrs  # job attributes: PMI_process_mapping...
        self.kvs: dict[str, str] = {}  # merged: what gets are served from
        self.new: dict[str, str] = {}  # this node's puts since the last fence
        self.node_attrs: dict[str, str] = {}  # PMI-2 info-putnodeattr (this node only)
        self.kvs_bytes = 0
        self.elsewhere = 0  # bytes of this fence the owner holds from other nodes (the cap's)
        self.epoch = 0
        self.arrived = 0
        self.fencing = False  # on_fence called, fence_done not yet
        self.failed: str | None = None
        self.closed = False
        self.conns: dict[int, Conn] = {}
        self.rank_fds: dict[int, int] = {}  # the ranks' ends, until close_rank_fds
        self._rank_socks: dict[int, socket.socket] = {}
        self._on_fence = on_fence
        self._new_bytes = 0
        self.node_id = 0  # this node's id in PMI_process_mapping

    def shm_paths(self) -> list[str]:
        """The shared-memory files MPICH makes for this job on this node (a run whose ranks
        were killed leaves them: 2 MiB each); close() removes them."""
        return mpich.shm_paths(self.name, self.node_id)

    # -- for the spawner ----------------------------------------------------------------------
    def env(self, rank: int, fd: int | None = None) -> dict[str, str]:
        """The PMI variables of one local rank (see env.rank_environment)."""
        if rank not in self.conns:
            raise ValueError(
                f"rank={rank!r}: not a local rank of {self.kvsname} (local: {list(self.ranks)})"
            )
        if fd is None:
            if rank not in self.rank_fds:
                raise ValueError(
                    f"rank={rank}: its descriptor was already released "
                    "(close_rank_fds); pass the number it holds as fd="
                )
            fd = self.rank_fds[rank]
        return {
            "PMI_FD": str(fd),
            "PMI_RANK": str(rank),
            "PMI_SIZE": str(self.size),
            "PMI_JOBID": self.name,
        }

    def hold_rank_end(self, rank: int, sock: socket.socket) -> None:
        """Keep rank `rank`'s end of its connection until it is spawned (rank_fds)."""
        self._rank_socks[rank] = sock
        self.rank_fds[rank] = sock.fileno()

    def close_rank_fds(self) -> None:
        """Close this process's copies of the ranks' ends, once they are spawned: a rank that
        dies must leave its connection with no other holder, so that its EOF reaches us."""
        for s in self._rank_socks.values():
            s.close()
        self._rank_socks.clear()
        self.rank_fds.clear()

    # -- state --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """Every local rank finalized and closed its connection (or the job failed/closed)."""
        return (
            self.closed
            or self.failed is not None
            or all(c.closed and c.finalized for c in self.conns.values())
        )

    def not_inited(self) -> list[int]:
        """Local ranks that have not sent their init yet (a launch timeout names them)."""
        return [r for r, c in self.conns.items() if not c.inited]

    @property
    def pending_bytes(self) -> int:
        """What this node's ranks put since the last fence, bytes (as the cap counts them)."""
        return self._new_bytes

    def rank_exited(self, rank: int) -> str | None:
        """Rank `rank`'s process ended: serve what it sent before, stop serving its connection
        (whoever else holds its descriptor), and say what its state was -- "noinit" (it never
        sent init), "lost" (it never finalized nor aborted), None (it did; or the job
        failed or closed)."""
        c = self.conns.get(rank)
        if c is None or self.closed or self.failed is not None:
            return None
        self.server.settle(c)
        state = None
        if self.failed is None and not c.finalized and not c.aborted:
            state = "lost" if c.inited else "noinit"
        self.server.forget(c)
        return state

    # -- for the owner ------------------------------------------------------------------------
    def fence_done(self, epoch: int, merged: Mapping[str, str]) -> None:
        """Complete fence `epoch` with `merged`: the union of every node's new keys of that
        epoch (a whole space is fine too). Answers every local rank in the fence."""
        self.fence_part(epoch, merged, False)

    def fence_part(self, epoch: int, keys: Mapping[str, str], more: bool) -> None:
        """A part of fence `epoch`'s union, checked against the cap and added to the space as
        it comes (over the cap: the job fails, naming it); the last one (more=False)
        completes the fence and answers every local rank in it."""
        if self.closed or self.failed is not None:
            return  # the job ended while the other nodes were still arriving
        if not self.fencing or epoch != self.epoch:
            raise ValueError(
                f"epoch={epoch!r}: job {self.kvsname} is "
                + (
                    f"in fence {self.epoch}"
                    if self.fencing
                    else f"not in a fence (next epoch {self.epoch})"
                )
            )
        add = 0
        for k, v in keys.items():
            old = self.kvs.get(k)
            add += len(v) - (len(old) if old is not None else -len(k) - ENTRY_COST)
        if self.kvs_bytes + add > self.server.max_kvs_bytes:
            self.server.fail(
                self,
                None,
                f"the key-value space would grow to "
                f"{self.kvs_bytes + add} bytes in fence {epoch}, over "
                f"max_kvs_bytes={self.server.max_kvs_bytes}",
            )
            return
        self.kvs.update(keys)
        self.kvs_bytes += add
        if more:
            return
        self.elsewhere = 0
        self.epoch += 1
        self.fencing = False
        self.arrived = 0
        for c in self.conns.values():
            if c.in_fence:
                c.in_fence = False
                if c.closed:
                    continue
                if c.wire == 2:
                    c.reply2("kvs-fence-response", c.fence_thrid)
                else:
                    c.reply1("barrier_out", rc="0")

    def fail(self, reason: str) -> None:
        """The owner fails the job (a rank died, a node was lost): stop serving it."""
        self.server.fail(self, None, reason, report=False)

    def close(self, remove_shm: bool = True) -> None:
        """Forget the job: close every connection and descriptor and (once its local ranks
        are reaped: the caller's word) remove what MPICH left in /dev/shm. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.close_rank_fds()
        for c in list(self.conns.values()):
            self.server.close_conn(c)
        self.server.drop_job(self)
        # its space goes now, not when the garbage collector finds the job <-> connection
        # cycle (a world near the cap held ~30 MB until a full collection, while the next grew)
        self.conns.clear()
        self.kvs, self.new, self.node_attrs = {}, {}, {}
        if remove_shm:
            mpich.remove_shm(self.shm_paths())

    # -- for the engine: what its ranks' commands do ------------------------------------------
    def arrive(self, c: Conn, thrid: str | None) -> None:
        """Rank c enters the next fence (thrid: its PMI-2 request's, answered with it)."""
        if c.in_fence:
            raise PmiProtocolError("entered a fence again before the last one completed")
        c.in_fence = True
        c.fence_thrid = thrid
        self.arrived += 1
        if self.arrived < len(self.ranks):
            return
        self.fencing = True
        new, self.new = self.new, {}
        self.kvs_bytes -= self._new_bytes  # they come back through fence_done's merged dict
        self._new_bytes = 0
        if self._on_fence is None:
            self.fence_done(self.epoch, new)
        else:
            self._on_fence(self, self.epoch, new)

    def put(self, key: str, value: str) -> None:
        """A rank's put: checked against the maxima and the cap, kept for the next fence."""
        if not key or len(key) > KEYLEN_MAX:
            raise PmiProtocolError(f"put key of {len(key)} characters (1..{KEYLEN_MAX})")
        if len(value) > VALLEN_MAX:
            raise PmiProtocolError(
                f"put value of {len(value)} characters for key {key!r} (at most {VALLEN_MAX})"
            )
        old = self.new.get(key)
        add = len(value) - (len(old) if old is not None else -len(key) - ENTRY_COST)
        self._room(add)
        self.new[key] = value
        self.kvs_bytes += add
        self._new_bytes += add

    def _room(self, add: int) -> None:
        """PmiProtocolError unless `add` more bytes fit the cap (with what the owner holds of
        this fence from other nodes: the world's space is one)."""
        if self.kvs_bytes + self.elsewhere + add > self.server.max_kvs_bytes:
            there = f", {self.elsewhere} of them other nodes'" if self.elsewhere else ""
            raise PmiProtocolError(
                f"the key-value space is full ({self.kvs_bytes + self.elsewhere} "
                f"bytes{there}, max_kvs_bytes={self.server.max_kvs_bytes})"
            )

    def get(self, key: str) -> str | None:
        """A key's value: a job attribute, the merged space, or this node's not fenced yet
        (hydra serves those too); None if none has it."""
        v = self.attrs.get(key)
        if v is None:
            v = self.kvs.get(key)
        if v is None:
            v = self.new.get(key)
        return v

    def put_node_attr(self, key: str, value: str) -> None:
        """PMI-2 info-putnodeattr: kept (the cap counts it) and answered to the local ranks
        waiting for it."""
        if not key or len(key) > KEYLEN_MAX or len(value) > VALLEN_MAX:
            raise PmiProtocolError(
                f"info-putnodeattr key of {len(key)} / value of "
                f"{len(value)} characters (1..{KEYLEN_MAX} / {VALLEN_MAX})"
            )
        old = self.node_attrs.get(key)
        add = len(value) - (len(old) if old is not None else -len(key) - ENTRY_COST)
        self._room(add)
        self.node_attrs[key] = value
        self.kvs_bytes += add
        for c in self.conns.values():  # wake the ranks waiting for it
            if c.waits and not c.closed:
                keep = []
                for k, thrid in c.waits:
                    if k == key:
                        c.reply2("info-getnodeattr-response", thrid, found="TRUE", value=value)
                    else:
                        keep.append((k, thrid))
                c.waits = keep
