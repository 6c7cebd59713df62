"""A PMI server: the process manager's side of the simple PMI wire protocol, for MPI tasks whose
ranks pilotfish starts itself (no `mpiexec`, `srun` or `prterun` per task).

An MPICH-family library (the `mpich` wheel, Debian's MPICH, Intel MPI, MVAPICH...) started
with `PMI_FD`, `PMI_RANK` and `PMI_SIZE` in its environment asks its process manager, over that
inherited descriptor, who it is (rank, size, the job's KVS name) and exchanges its address
("business card") with the other ranks through a key-value space (put; fence; get). This room
is that process manager for one node: it owns the server ends of one socketpair per local rank
(nothing listens on a port, so nothing but the rank can speak to it) and serves

- the PMI-1 wire protocol: `cmd=init pmi_version=1 pmi_subversion=1`, `get_maxes`,
  `get_appnum`, `get_my_kvsname`, `get_universe_size`, `put`, `get`, `barrier_in` ->
  `barrier_out`, `finalize`, `abort` (publish/lookup/spawn are answered "not supported");
- the PMI-2 wire protocol where the library asks for it (`cmd=init pmi_version=2` first, then
  length-prefixed frames `    42cmd=fullinit;pmirank=0;`): `fullinit`, `job-getid`,
  `kvs-put`, `kvs-fence`, `kvs-get`, `info-getjobattr`, `info-putnodeattr`,
  `info-getnodeattr` (also `wait=TRUE`, answered when a local rank puts the key), `finalize`,
  `abort`. (The `mpich` wheel's libmpi is built with PMI-1 only: MPIR_CVAR_PMI_VERSION=2 fails
  in MPI_Init. PMI-2 is what Slurm's libpmi2 and MPICHs built `--with-pmi=pmi2` speak.)

Fences cost one message per node, not per rank: when every LOCAL rank of a job has entered a
fence (barrier_in / kvs-fence) the server calls `on_fence(job, epoch, new_keys)` once, with the
keys this node's ranks put since the last fence. The owner gathers every node's dict (the agent,
over its node link, in bounded parts: pmi_fence.py) and hands the union back -- whole,
`job.fence_done(epoch, merged)`, or part by part, `job.fence_part(epoch, keys, more)`, each
checked against the cap as it comes; the server then answers every local rank and serves gets
from the merged space. A job whose ranks all live here needs no owner for that: without
`on_fence` the server completes the fence itself.

The name a job's ranks are told (`job.name`: get_my_kvsname, job-getid, PMI_JOBID) is its KVS
name, of which MPICH names its shared memory on the node (mpich_world_id): a name whose files
exist already -- planted by another user, or left by a killed run -- is never served (MPICH
would open such a file rather than create its own); the job gets a fresh name instead, 128
random bits, and so does every job added with fresh_name=True (the node executors' and the
agent's: another user can predict none). The owner knows the job by its kvsname either way.

Every input from a rank is bounded and checked: a PMI-1 line or PMI-2 frame over `max_line`
bytes, a malformed one, a key or value over the advertised maxima, a KVS over `max_kvs_bytes`
(the job's keys and values, all nodes' together) or a rank that does not read its answers
fails THAT job -- `on_error(job, rank, reason)` once, its connections closed -- and never raises
out of the server: the other jobs on the same loop go on. `abort` -> `on_abort(job, rank,
exitcode, message)`; a rank that closes its descriptor before `finalize` (it died, or exec'd
something that closed it) -> `on_lost(job, rank)`; the owner decides (usually: wait for its
exit status, kill the others, fail the task naming the rank).

Event-loop friendly, no thread: the server is one epoll descriptor (`fileno()`) that becomes
readable when any rank's connection needs attention; register it once in the owner's poller
(the node executor's zmq.Poller, agent/node.py) and call `poll()` when it is readable. (Per
descriptor, `fds()` / `on_readable(fd)` / `on_writable(fd)` do the same work.)

    server = PmiServer(on_fence=..., on_abort=..., on_error=..., on_lost=...)
    job = server.add_job("pf.task.000001", size=4, local_ranks=[0, 1],
                         node_of_rank=[0, 0, 1, 1])
    # spawn rank r with job.rank_fds[r] inherited and rank_environment(os.environ, job, r);
    # through the Rust core: core_rank(job, r) -> (pass_fd, PMI variables), see there
    job.close_rank_fds()             # the parent's copies: EOF must reach us when a rank dies
    ... poll server.fileno() ...; server.poll()
    job.close()                      # once its ranks are reaped

`spawn_local` / `wait_local` below do exactly that with subprocess, for tests and benches.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import select
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .pmi_parse import PmiProtocolError, need, parse1, parse2, show

log = logging.getLogger("pilotfish.pmi")

# what get_maxes advertises: the numbers MPICH's own hydra gives (the mpich wheel's libmpi is
# proven against them; MPICH splits a longer business card into segments of vallen_max)
KVSNAME_MAX = 256
KEYLEN_MAX = 64
VALLEN_MAX = 1024
MAX_LINE = 64 * 1024  # one PMI-1 line or PMI-2 frame, bytes
MAX_KVS_BYTES = 32 * 1024 * 1024  # one job's key-value space (all nodes' keys), bytes
MAX_OUT = 1024 * 1024  # answers a rank has not read yet, bytes
ENTRY_COST = 32  # bytes charged per key on top of its text (empty-key floods)
_READ = 65536
_READS_PER_WAKE = 8  # one connection cannot starve the others

# environment a rank must not inherit from whoever started the node executor: another
# process manager's connection or identity (an outer srun --mpi=pmi2, mpiexec, PRRTE) would be
# read instead of ours, or make MPICH's auto-detection refuse ("both PMI_SIZE and
# PMIX_NAMESPACE"); PMI_HOSTNAME steers MPICH's choice of network interface (the owner sets it)
STALE_ENV = (
    "PMI_PORT",
    "PMI_ID",
    "PMI_SPAWNED",
    "PMI_TOTALVIEW",
    "PMI_HOSTNAME",
    "PMI2_CONNECT_TO_SERVER",
    "PRTE_LAUNCHED",
)
STALE_PREFIXES = ("PMIX_",)

SHM_DIR = "/dev/shm"
NAME_TRIES = 16  # fresh names tried for a job whose name's shared memory exists

# the descriptor a rank holds its connection as when the Rust core spawns it: the core's
# pass_fd (`_core.Executor.spawn_batch`, a spec's 8th field) puts it there by default
RANK_FD = 3

_KVSNAME_OK = re.compile(r"[A-Za-z0-9_.:+-]{1,%d}\Z" % (KVSNAME_MAX - 1))

FenceFn = Callable[["PmiJob", int, dict], None]


def process_mapping(node_of_rank: Sequence[int]) -> str:
    """MPICH's PMI_process_mapping for a rank -> node list: `(vector,(node,nodes,ranks),...)`,
    each block `ranks` consecutive ranks on each of `nodes` consecutive node ids from `node`.
    MPICH builds its node map (who shares memory with whom) from it; without it, it allgathers
    host names over PMI (one fence more). Node ids are renumbered by first appearance."""
    ids: dict[int, int] = {}
    norm = [ids.setdefault(n, len(ids)) for n in node_of_rank]
    runs: list[list[int]] = []  # [node, count] of consecutive ranks on one node
    for n in norm:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    blocks: list[list[int]] = []  # [first node, nodes, ranks per node]
    for n, c in runs:
        b = blocks[-1] if blocks else None
        if b is not None and b[2] == c and b[0] + b[1] == n:
            b[1] += 1
        else:
            blocks.append([n, 1, c])
    return "(vector," + ",".join(f"({a},{b},{c})" for a, b, c in blocks) + ")"


def mpich_world_id(kvsname: str) -> int:
    """MPICH's world id of a job: FNV-1a of its KVS name (MPICH 4.x/5.0; MPICH's main branch
    hashes `<kvsname>-<init count>`). It names the job's shared-memory segments on a node,
    /dev/shm/mpich_shm_<id:x>_<node id>: two live jobs of one id on a node would share one,
    and a segment left by a killed run is opened again by the next job of that name."""
    h = 2166136261
    for b in kvsname.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def clean_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` without another process manager's variables (STALE_ENV, STALE_PREFIXES)."""
    return {
        k: v for k, v in base.items() if k not in STALE_ENV and not k.startswith(STALE_PREFIXES)
    }


def rank_environment(
    base: Mapping[str, str], job: PmiJob, rank: int, fd: int | None = None
) -> dict[str, str]:
    """`base` without another process manager's variables, plus what rank `rank` of `job`
    needs: PMI_FD (the descriptor number the rank will hold: by default the number of
    job.rank_fds[rank], which subprocess's pass_fds keeps; RANK_FD for the Rust core),
    PMI_RANK, PMI_SIZE and PMI_JOBID (the KVS name: Slurm's libpmi2 sends it in fullinit)."""
    env = clean_environment(base)
    env.update(job.env(rank, fd))
    return env


def core_rank(job: PmiJob, rank: int) -> tuple[int, dict[str, str]]:
    """What a spawn of local rank `rank` through the Rust core takes: its pass_fd (the rank's
    end, which the child holds as RANK_FD) and its PMI variables, naming RANK_FD. The
    variables are an overlay: the executor's base environment must be clean already
    (clean_environment), since an overlay cannot remove another manager's variables."""
    if rank not in job.rank_fds:
        job.env(rank)  # (raises, naming why: not a local rank, or already released)
    return job.rank_fds[rank], job.env(rank, RANK_FD)


class _Conn:
    """One rank's connection: the server end of its socketpair."""

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

    def __init__(self, sock: socket.socket, job: PmiJob, rank: int):
        self.sock = sock
        self.fd = sock.fileno()
        self.job = job
        self.rank = rank
        self.inbuf = bytearray()
        self.outbuf = bytearray()
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


class PmiJob:
    """One task's PMI job as this node sees it: its local ranks and their connections, the
    key-value space, the fence state. Made by PmiServer.add_job."""

    def __init__(
        self,
        server: PmiServer,
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
        self.conns: dict[int, _Conn] = {}
        self.rank_fds: dict[int, int] = {}  # the ranks' ends, until close_rank_fds
        self._rank_socks: dict[int, socket.socket] = {}
        self._on_fence = on_fence
        self._new_bytes = 0
        self.node_id = 0  # this node's id in PMI_process_mapping

    def shm_paths(self) -> list[str]:
        """The shared-memory files MPICH makes for this job on this node (a run whose ranks
        were killed leaves them: 2 MiB each); close() removes them."""
        out = []
        for wid in {mpich_world_id(self.name), mpich_world_id(f"{self.name}-1")}:
            for kind in ("shm", "vci"):
                out.append(f"{SHM_DIR}/mpich_{kind}_{wid:x}_{self.node_id}")
        return out

    # -- for the spawner ----------------------------------------------------------------------
    def env(self, rank: int, fd: int | None = None) -> dict[str, str]:
        """The PMI variables of one local rank (see rank_environment)."""
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
            self.server._fail(
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
                    self.server._reply2(c, "kvs-fence-response", c.fence_thrid)
                else:
                    self.server._reply1(c, "barrier_out", rc="0")

    def fail(self, reason: str) -> None:
        """The owner fails the job (a rank died, a node was lost): stop serving it."""
        self.server._fail(self, None, reason, report=False)

    def close(self, remove_shm: bool = True) -> None:
        """Forget the job: close every connection and descriptor and (once its local ranks
        are reaped: the caller's word) remove what MPICH left in /dev/shm. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.close_rank_fds()
        for c in list(self.conns.values()):
            self.server._close(c)
        self.server._jobs.pop(self.kvsname, None)
        # its space goes now, not when the garbage collector finds the job <-> connection
        # cycle (a world near the cap held ~30 MB until a full collection, while the next grew)
        self.conns.clear()
        self.kvs, self.new, self.node_attrs = {}, {}, {}
        if remove_shm:
            uid = os.getuid()
            for p in self.shm_paths():
                try:  # only our own regular files (unlink never follows a link)
                    st = os.lstat(p)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
                        os.unlink(p)
                except OSError:
                    pass

    # -- internal -----------------------------------------------------------------------------
    def _arrive(self, c: _Conn, thrid: str | None) -> None:
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

    def _put(self, key: str, value: str) -> None:
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

    def _get(self, key: str) -> str | None:
        v = self.attrs.get(key)
        if v is None:
            v = self.kvs.get(key)
        if v is None:  # a key of this node not fenced yet (hydra serves those too)
            v = self.new.get(key)
        return v

    def _put_node_attr(self, key: str, value: str) -> None:
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
                        self.server._reply2(
                            c, "info-getnodeattr-response", thrid, found="TRUE", value=value
                        )
                    else:
                        keep.append((k, thrid))
                c.waits = keep


class PmiServer:
    """The PMI server of one node: any number of jobs, one epoll descriptor."""

    def __init__(
        self,
        *,
        on_fence: FenceFn | None = None,
        on_abort: Callable[[PmiJob, int, int, str], None] | None = None,
        on_error: Callable[[PmiJob, int | None, str], None] | None = None,
        on_lost: Callable[[PmiJob, int], None] | None = None,
        max_line: int = MAX_LINE,
        max_kvs_bytes: int = MAX_KVS_BYTES,
        max_out: int = MAX_OUT,
    ):
        for name, v in (
            ("max_line", max_line),
            ("max_kvs_bytes", max_kvs_bytes),
            ("max_out", max_out),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1024:
                raise ValueError(f"{name}={v!r}: an int of at least 1024 bytes")
        self.on_fence = on_fence
        self.on_abort = on_abort
        self.on_error = on_error
        self.on_lost = on_lost
        self.max_line = max_line
        self.max_kvs_bytes = max_kvs_bytes
        self.max_out = max_out
        self._ep = select.epoll()
        self._conns: dict[int, _Conn] = {}
        self._jobs: dict[str, PmiJob] = {}
        self._trace = log.isEnabledFor(logging.DEBUG)

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self,
        kvsname: str,
        size: int,
        local_ranks: Iterable[int],
        *,
        node_of_rank: Sequence[int] | None = None,
        appnum: int = 0,
        universe_size: int | None = None,
        attrs: Mapping[str, str] | None = None,
        on_fence: FenceFn | None = None,
        fresh_name: bool = False,
    ) -> PmiJob:
        """A job with `size` ranks of which `local_ranks` live on this node; one socketpair
        per local rank (job.rank_fds: the ends to hand to the ranks).

        Its ranks are told job.name: kvsname, unless MPICH's shared memory of that name
        exists on this node or a live job has its world id -- then, and always with
        fresh_name, `<kvsname>.<128 random bits>`, drawn again while taken.

        node_of_rank: the node of every rank (any ids; needed when ranks live elsewhere, by
        default all on this node), for PMI_process_mapping. on_fence: this job's (else the
        server's); a job with ranks elsewhere needs one. attrs: more job attributes served to
        get / info-getjobattr (e.g. PMI_hwloc_xmlfile: a topology file made once per node
        saves each rank its discovery, ~4 ms of a 2-rank job's 77 ms here)."""
        if not isinstance(kvsname, str) or not _KVSNAME_OK.match(kvsname):
            raise ValueError(
                f"kvsname={kvsname!r}: 1..{KVSNAME_MAX - 1} characters of "
                "[A-Za-z0-9_.:+-] (it travels in PMI lines)"
            )
        if kvsname in self._jobs:
            raise ValueError(f"kvsname={kvsname!r}: a job of that name is already served")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size={size!r}: a positive int")
        ranks = tuple(sorted(local_ranks))
        if (
            not ranks
            or len(set(ranks)) != len(ranks)
            or any(
                not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < size for r in ranks
            )
        ):
            raise ValueError(
                f"local_ranks={list(ranks)!r}: distinct ints in 0..{size - 1}, at least one"
            )
        fence = on_fence or self.on_fence
        if fence is None and len(ranks) < size:
            raise ValueError(
                f"local_ranks={list(ranks)!r} of size={size}: ranks live on "
                "other nodes, so the job needs an on_fence that gathers them"
            )
        if not isinstance(appnum, int) or isinstance(appnum, bool):
            raise ValueError(f"appnum={appnum!r}: an int")
        if universe_size is None:
            universe_size = size
        if (
            not isinstance(universe_size, int)
            or isinstance(universe_size, bool)
            or universe_size < size
        ):
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
        if len(node_of_rank) != size or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in node_of_rank
        ):
            raise ValueError(
                f"node_of_rank: {size} non-negative ints (one per rank), "
                f"got {list(node_of_rank)[:8]!r}" + ("..." if len(node_of_rank) > 8 else "")
            )
        mapping = process_mapping(node_of_rank)
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
        job = PmiJob(self, kvsname, size, ranks, appnum, universe_size, job_attrs, fence)
        ids: dict[int, int] = {}  # MPICH's node ids: as process_mapping numbers them (and
        for n in node_of_rank:  # as its allgather of host names would, without a mapping)
            ids.setdefault(n, len(ids))
        here = {node_of_rank[r] for r in ranks}
        if len(here) != 1:
            raise ValueError(
                f"node_of_rank: the local ranks {list(ranks)} are on nodes "
                f"{sorted(here)}, not one node"
            )
        job.node_id = ids[here.pop()]
        self._name(job, fresh_name)
        try:
            for r in ranks:
                mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                mine.setblocking(False)
                c = _Conn(mine, job, r)
                job.conns[r] = c
                job._rank_socks[r] = theirs
                job.rank_fds[r] = theirs.fileno()
                self._conns[c.fd] = c
                self._ep.register(c.fd, select.EPOLLIN)
        except BaseException:
            job.close()
            raise
        self._jobs[kvsname] = job
        return job

    def _name(self, job: PmiJob, fresh: bool) -> None:
        """job.name: its kvsname, or a fresh one (see add_job) -- never a name whose shared
        memory exists here (MPICH would open another's file instead of creating its own) or
        that shares a live job's world id."""
        live = set()
        for other in self._jobs.values():
            live.update({mpich_world_id(other.name), mpich_world_id(f"{other.name}-1")})
        for i in range(NAME_TRIES):
            if i or fresh:
                job.name = f"{job.kvsname[: KVSNAME_MAX - 34]}.{secrets.token_hex(16)}"
            ids = {mpich_world_id(job.name), mpich_world_id(f"{job.name}-1")}
            taken = [p for p in job.shm_paths() if os.path.lexists(p)]
            if not taken and not ids & live:
                return
            log.warning(
                "%s: %s (a killed run's, another job's or user's): serving it under a new name",
                job.name,
                taken[0] if taken else "its MPICH world id is a live job's",
            )
        raise ValueError(
            f"kvsname={job.kvsname!r}: {NAME_TRIES} fresh names taken in a row "
            f"({SHM_DIR} is flooded with MPICH's names)"
        )

    def jobs(self) -> list[PmiJob]:
        return list(self._jobs.values())

    def settle(self, c: _Conn) -> None:
        """Serve what a rank sent that is not read yet (its process ended: what it said
        before decides), at most 32 reads' worth."""
        ready = select.poll()
        ready.register(c.fd, select.POLLIN)
        for _ in range(32):
            if c.closed or not ready.poll(0):
                return
            self.on_readable(c.fd)

    def forget(self, c: _Conn) -> None:
        """Stop serving a rank's connection (its process ended)."""
        self._close(c)

    # -- the loop -----------------------------------------------------------------------------
    def fileno(self) -> int:
        """Readable when some connection needs attention: then call poll()."""
        return self._ep.fileno()

    def poll(self, timeout: float = 0) -> int:
        """Serve what is ready (waiting up to `timeout` seconds; -1 = until something is).
        Returns the number of events handled."""
        try:
            events = self._ep.poll(timeout)
        except InterruptedError:
            return 0
        for fd, ev in events:
            if ev & select.EPOLLOUT:
                self.on_writable(fd)
            if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                self.on_readable(fd)
        return len(events)

    def fds(self) -> list[int]:
        """Every open connection (for an owner that polls them one by one)."""
        return list(self._conns)

    def want_write(self) -> list[int]:
        """Connections with answers the rank has not taken yet (poll them for writing)."""
        return [fd for fd, c in self._conns.items() if c.outbuf]

    def on_readable(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is None:
            return
        for _ in range(_READS_PER_WAKE):
            try:
                data = c.sock.recv(_READ)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self._eof(c)
                return
            c.inbuf += data
            try:
                self._drain(c)
            except PmiProtocolError as e:
                self._fail(c.job, c.rank, str(e))
                return
            if c.closed:
                return
            if len(data) < _READ:
                return

    def on_writable(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is not None and c.outbuf:
            self._flush(c)

    def close(self) -> None:
        for job in list(self._jobs.values()):
            job.close()
        self._ep.close()

    # -- reading ------------------------------------------------------------------------------
    def _drain(self, c: _Conn) -> None:
        """Handle every complete message in c.inbuf."""
        buf = c.inbuf
        while buf and not c.closed:
            if c.mcmd is not None or buf.startswith(b"cmd=") or buf.startswith(b"mcmd="):
                nl = buf.find(b"\n", 0, self.max_line + 1)
                if nl < 0:
                    if len(buf) > self.max_line:
                        raise PmiProtocolError(f"a PMI-1 line longer than {self.max_line} bytes")
                    return
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                self._line1(c, line)
                continue
            if len(buf) < 6:
                if b"\n" in buf:
                    raise PmiProtocolError(
                        f"malformed: {show(bytes(buf))} is neither a "
                        "PMI-1 line (cmd=...) nor a PMI-2 frame"
                    )
                return
            head = bytes(buf[:6])
            if not head.strip().isdigit():
                raise PmiProtocolError(
                    f"malformed: {show(bytes(buf[:40]))} is neither a "
                    "PMI-1 line (cmd=...) nor a PMI-2 frame (6-digit "
                    "length)"
                )
            n = int(head)
            if n > self.max_line:
                raise PmiProtocolError(f"a PMI-2 frame of {n} bytes, over {self.max_line}")
            if len(buf) < 6 + n:
                return
            body = bytes(buf[6 : 6 + n])
            del buf[: 6 + n]
            self._frame2(c, body)

    def _line1(self, c: _Conn, raw: bytes) -> None:
        if self._trace:
            log.debug("%s rank %d -> %s", c.job.kvsname, c.rank, show(raw))
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            raise PmiProtocolError(
                f"malformed: a PMI-1 line that is not ASCII: {show(raw)}"
            ) from None
        if c.mcmd is not None or line.startswith("mcmd="):
            self._spawn1(c, line)
            return
        kv = parse1(line)
        cmd = kv.pop("cmd")
        job = c.job
        if not c.inited and cmd != "init":
            raise PmiProtocolError(f"cmd={cmd} before init")
        if cmd == "init":
            v = kv.get("pmi_version")
            if v == "2":  # a PMI-2 client starts with this PMI-1 line, then speaks frames
                c.wire, c.inited = 2, True
                self._reply1(c, "response_to_init", rc="0", pmi_version="2", pmi_subversion="0")
            elif v == "1":
                c.inited = True
                self._reply1(c, "response_to_init", rc="0", pmi_version="1", pmi_subversion="1")
            else:
                self._reply1(
                    c,
                    "response_to_init",
                    rc="-1",
                    pmi_version="1",
                    pmi_subversion="1",
                    msg="unsupported_pmi_version",
                )
        elif cmd == "get_maxes":
            self._reply1(
                c,
                "maxes",
                rc="0",
                kvsname_max=str(KVSNAME_MAX),
                keylen_max=str(KEYLEN_MAX),
                vallen_max=str(VALLEN_MAX),
            )
        elif cmd == "get_appnum":
            self._reply1(c, "appnum", rc="0", appnum=str(job.appnum))
        elif cmd == "get_my_kvsname":
            self._reply1(c, "my_kvsname", rc="0", kvsname=job.name)
        elif cmd == "get_universe_size":
            self._reply1(c, "universe_size", rc="0", size=str(job.universe_size))
        elif cmd == "put":
            if kv.get("kvsname", job.name) not in (job.name, job.kvsname):
                self._reply1(c, "put_result", rc="-1", msg="unknown_kvsname")
                return
            job._put(need(kv, "key", cmd), need(kv, "value", cmd))
            self._reply1(c, "put_result", rc="0")
        elif cmd == "get":
            key = need(kv, "key", cmd)
            v = job._get(key) if kv.get("kvsname", job.name) in (job.name, job.kvsname) else None
            if v is None:
                self._reply1(c, "get_result", rc="-1", msg="key_not_found")
            else:
                self._reply1(c, "get_result", rc="0", value=v)
        elif cmd == "barrier_in":
            group = kv.get("group")
            if group is not None and not group.startswith("WORLD"):
                # barrier groups are PMI 1.2; we answer init with 1.1, so MPICH never asks
                self._reply1(c, "barrier_out", rc="-1", msg="groups_not_supported")
                return
            job._arrive(c, None)
        elif cmd == "finalize":
            c.finalized = True
            self._reply1(c, "finalize_ack", rc="0")
        elif cmd == "abort":
            self._abort(
                c,
                kv.get("exitcode", kv.get("exit_code", "1")),
                kv.get("message", kv.get("error_msg", "")),
            )
        elif cmd in ("publish_name", "unpublish_name", "lookup_name"):
            self._reply1(c, cmd.split("_")[0] + "_result", rc="-1", msg="not_supported")
        else:
            log.warning("%s rank %d: unknown PMI-1 command %r", job.kvsname, c.rank, cmd)
            self._reply1(c, cmd + "_result", rc="-1", msg="unknown_command")

    def _spawn1(self, c: _Conn, line: str) -> None:
        """PMI-1's multi-line spawn (`mcmd=spawn` ... `endcmd`): read it whole, refuse it."""
        if c.mcmd is None:
            c.mcmd, c.mcmd_bytes = [1, -1], 0  # spawnssofar -1: not sent (then one endcmd ends)
        c.mcmd_bytes += len(line) + 1
        if c.mcmd_bytes > self.max_line:
            raise PmiProtocolError(f"a PMI-1 spawn command longer than {self.max_line} bytes")
        k, _, v = line.partition("=")
        if k in ("totspawns", "spawnssofar"):
            if not v.isdigit():
                raise PmiProtocolError(f"malformed: {k}={v!r} in a PMI-1 spawn")
            c.mcmd[0 if k == "totspawns" else 1] = int(v)
        elif line == "endcmd" and (c.mcmd[1] < 0 or c.mcmd[1] >= c.mcmd[0]):
            c.mcmd = None
            self._reply1(c, "spawn_result", rc="-1", msg="spawn_not_supported")

    def _frame2(self, c: _Conn, raw: bytes) -> None:
        if self._trace:
            log.debug("%s rank %d -> %s", c.job.kvsname, c.rank, show(raw))
        try:
            body = raw.decode("ascii")
        except UnicodeDecodeError:
            raise PmiProtocolError(
                f"malformed: a PMI-2 frame that is not ASCII: {show(raw)}"
            ) from None
        kv = parse2(body)
        cmd = kv.pop("cmd")
        thrid = kv.get("thrid")
        job = c.job
        if c.wire != 2:
            raise PmiProtocolError(f"a PMI-2 frame (cmd={cmd}) before init pmi_version=2")
        if cmd == "fullinit":
            want = kv.get("pmirank", kv.get("pmiid", kv.get("srcid")))
            if want is not None and want != str(c.rank):
                raise PmiProtocolError(f"fullinit as rank {want!r} on rank {c.rank}'s connection")
            self._reply2(
                c,
                "fullinit-response",
                thrid,
                **{
                    "pmi-version": "2",
                    "pmi-subversion": "0",
                    "rank": str(c.rank),
                    "size": str(job.size),
                    "appnum": str(job.appnum),
                    "debugged": "FALSE",
                    "pmiverbose": "FALSE",
                },
            )
        elif cmd == "job-getid":
            self._reply2(c, "job-getid-response", thrid, jobid=job.name)
        elif cmd == "kvs-put":
            job._put(need(kv, "key", cmd), need(kv, "value", cmd))
            self._reply2(c, "kvs-put-response", thrid)
        elif cmd == "kvs-fence":
            job._arrive(c, thrid)
        elif cmd == "kvs-get":
            jid = kv.get("jobid")
            mine = jid in (None, "", job.name, job.kvsname)
            v = job._get(need(kv, "key", cmd)) if mine else None
            if v is None:
                self._reply2(c, "kvs-get-response", thrid, found="FALSE")
            else:
                self._reply2(c, "kvs-get-response", thrid, found="TRUE", value=v)
        elif cmd == "info-getjobattr":
            v = job.attrs.get(need(kv, "key", cmd))
            if v is None:
                self._reply2(c, "info-getjobattr-response", thrid, found="FALSE")
            else:
                self._reply2(c, "info-getjobattr-response", thrid, found="TRUE", value=v)
        elif cmd == "info-putnodeattr":
            job._put_node_attr(need(kv, "key", cmd), need(kv, "value", cmd))
            self._reply2(c, "info-putnodeattr-response", thrid)
        elif cmd == "info-getnodeattr":
            key = need(kv, "key", cmd)
            v = job.node_attrs.get(key)
            if v is not None:
                self._reply2(c, "info-getnodeattr-response", thrid, found="TRUE", value=v)
            elif kv.get("wait", "FALSE").upper() == "TRUE":
                if len(c.waits) >= 64:
                    raise PmiProtocolError("more than 64 info-getnodeattr waits at once")
                c.waits.append((key, thrid))  # answered by a local rank's putnodeattr
            else:
                self._reply2(c, "info-getnodeattr-response", thrid, found="FALSE")
        elif cmd == "finalize":
            c.finalized = True
            self._reply2(c, "finalize-response", thrid)
        elif cmd == "abort":
            self._abort(c, kv.get("exitcode", "1"), kv.get("message", kv.get("msg", "")))
        elif cmd in (
            "name-publish",
            "name-unpublish",
            "name-lookup",
            "spawn",
            "job-connect",
            "job-disconnect",
        ):
            self._reply2(c, cmd + "-response", thrid, rc="-1", errmsg="not supported")
        else:
            log.warning("%s rank %d: unknown PMI-2 command %r", job.kvsname, c.rank, cmd)
            self._reply2(c, cmd + "-response", thrid, rc="-1", errmsg="unknown command")

    def _abort(self, c: _Conn, code: str, message: str) -> None:
        c.aborted = True
        try:
            exitcode = int(code)
        except ValueError:
            exitcode = 1
        message = message.replace("\\", "")[:VALLEN_MAX]
        log.info("%s rank %d: PMI abort %d %s", c.job.kvsname, c.rank, exitcode, message)
        if self.on_abort is not None:
            self.on_abort(c.job, c.rank, exitcode, message)

    # -- writing ------------------------------------------------------------------------------
    def _reply1(self, c: _Conn, cmd: str, **kv: str) -> None:
        self._send(c, ("cmd=" + cmd + "".join(f" {k}={v}" for k, v in kv.items()) + "\n").encode())

    def _reply2(self, c: _Conn, cmd: str, thrid: str | None, **kv: str) -> None:
        kv.setdefault("rc", "0")  # Slurm's libpmi2 requires it in every answer
        if thrid is not None:
            kv["thrid"] = thrid
        body = "cmd=" + cmd + ";" + "".join(f"{k}={v.replace(';', ';;')};" for k, v in kv.items())
        self._send(c, (f"{len(body):6d}" + body).encode())

    def _send(self, c: _Conn, data: bytes) -> None:
        if c.closed:
            return
        if self._trace:
            log.debug("%s rank %d <- %s", c.job.kvsname, c.rank, show(data))
        if c.outbuf:
            c.outbuf += data
        else:
            try:
                n = c.sock.send(data, socket.MSG_NOSIGNAL)
            except BlockingIOError:
                n = 0
            except OSError:
                return  # the rank is gone: its EOF comes through on_readable
            if n == len(data):
                return
            c.outbuf += data[n:]
            self._ep.modify(c.fd, select.EPOLLIN | select.EPOLLOUT)
        if len(c.outbuf) > self.max_out:
            self._fail(
                c.job,
                c.rank,
                f"does not read its PMI answers ({len(c.outbuf)} "
                f"bytes waiting, max_out={self.max_out})",
            )

    def _flush(self, c: _Conn) -> None:
        try:
            n = c.sock.send(c.outbuf, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return
        except OSError:
            c.outbuf.clear()
        else:
            del c.outbuf[:n]
        if not c.outbuf and not c.closed:
            self._ep.modify(c.fd, select.EPOLLIN)

    # -- ends ---------------------------------------------------------------------------------
    def _eof(self, c: _Conn) -> None:
        quiet = c.finalized or c.aborted or c.job.failed is not None
        self._close(c)
        if not quiet:
            log.info("%s rank %d closed its PMI connection before finalize", c.job.kvsname, c.rank)
            if self.on_lost is not None:
                self.on_lost(c.job, c.rank)

    def _close(self, c: _Conn) -> None:
        if c.closed:
            return
        c.closed = True
        self._conns.pop(c.fd, None)
        try:
            self._ep.unregister(c.fd)
        except (OSError, ValueError):
            pass
        c.sock.close()
        c.inbuf.clear()
        c.outbuf.clear()

    def _fail(self, job: PmiJob, rank: int | None, reason: str, report: bool = True) -> None:
        """Stop serving `job` (once): close its connections -- its ranks read EOF -- and tell
        the owner."""
        if job.failed is not None or job.closed:
            return
        job.failed = reason
        for c in list(job.conns.values()):
            self._close(c)
        if report:
            who = f"rank {rank}" if rank is not None else "the job"
            log.warning("%s: %s: %s", job.kvsname, who, reason)
            if self.on_error is not None:
                self.on_error(job, rank, reason)


# -- a local spawner: what a node executor does, with subprocess (tests, benches) -------------


def spawn_local(
    job: PmiJob, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any
) -> dict[int, subprocess.Popen]:
    """Start every local rank of `job` as `argv`, each holding its PMI descriptor, and close
    this process's copies. Popen keywords (cwd, stdout, stderr...) pass through; a callable
    keyword value is called with the rank (e.g. stdout=lambda r: files[r])."""
    base = os.environ if env is None else env
    procs: dict[int, subprocess.Popen] = {}
    try:
        for r in job.ranks:
            kw = {k: (v(r) if callable(v) else v) for k, v in popen.items()}
            procs[r] = subprocess.Popen(
                list(argv), env=rank_environment(base, job, r), pass_fds=(job.rank_fds[r],), **kw
            )
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        raise
    finally:
        job.close_rank_fds()
    return procs


def wait_local(
    servers: Sequence[PmiServer],
    procs: Iterable[subprocess.Popen],
    timeout: float,
    on_exit: Callable[[subprocess.Popen], None] | None = None,
) -> bool:
    """Serve `servers` until every process in `procs` has exited (True) or `timeout` seconds
    passed (False: what still runs is killed and reaped). on_exit(proc) as each is reaped."""
    waiting: dict[int, subprocess.Popen] = {}
    sel = select.epoll()
    try:
        for s in servers:
            sel.register(s.fileno(), select.EPOLLIN)
        for p in procs:
            pfd = os.pidfd_open(p.pid)
            waiting[pfd] = p
            sel.register(pfd, select.EPOLLIN)
        end = time.monotonic() + timeout
        by_server: dict[int, PmiServer] = {s.fileno(): s for s in servers}
        while waiting:
            left = end - time.monotonic()
            if left <= 0:
                for p in waiting.values():
                    _kill(p)
                return False
            for fd, _ in sel.poll(min(left, 1.0)):
                srv = by_server.get(fd)
                if srv is not None:
                    srv.poll(0)
                    continue
                if fd not in waiting:
                    continue
                p = waiting.pop(fd)
                sel.unregister(fd)
                os.close(fd)
                p.wait()
                if on_exit is not None:
                    on_exit(p)
            for s in servers:  # answers that were queued while a process exited
                s.poll(0)
        return True
    finally:
        for fd in waiting:
            os.close(fd)
        sel.close()


def _kill(p: subprocess.Popen) -> None:
    try:
        p.send_signal(signal.SIGKILL)
    except OSError as e:  # already reaped
        if e.errno != errno.ESRCH:
            raise
    p.wait()
