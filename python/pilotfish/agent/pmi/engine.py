"""The PMI protocol engine, without I/O: bytes a rank sent go in (feed), its answers come out
(send: by default into the connection's outbuf, where a test takes them; the server,
server.py, writes them to the rank's socket instead), and what the owner must hear comes out
as callbacks: on_fence (job.py), on_abort, on_error, on_lost.

    eng = Engine(on_abort=..., on_error=..., on_lost=...)
    job = eng.add_job("pf.task.1", size=1, local_ranks=[0])
    c = job.conns[0]
    eng.feed(c, b"cmd=init pmi_version=1 pmi_subversion=1\\n")
    eng.take(c)          # b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\\n"
    eng.eof(c)           # the rank closed its connection

Each message (wire.py cuts a connection's input into PMI-1 lines and PMI-2 frames, parse.py
takes them apart) is answered through a command table, a dict name -> handler: PMI1 for lines
(init, get_maxes, get_appnum, get_my_kvsname, get_universe_size, put, get, barrier_in,
finalize, abort; publish/lookup answered "not supported", a spawn read whole and refused),
PMI2 for frames (fullinit, job-getid, kvs-put, kvs-fence, kvs-get, info-getjobattr,
info-putnodeattr, info-getnodeattr -- with wait=TRUE answered when a local rank puts the key
--, finalize, abort; name service, spawn and job-connect "not supported"). A command in
neither is answered "unknown command" and logged (bounded, escaped: its text is a line's).

Every input is bounded and checked: a message over max_line bytes, a malformed one, a key or
value over the advertised maxima, a space over max_kvs_bytes fails THAT job -- on_error(job,
rank, reason) once, its connections closed (fail) -- and never raises out of feed: the other
jobs go on. abort -> on_abort(job, rank, exitcode, message); a connection that ends before
finalize (eof) -> on_lost(job, rank).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from . import mpich
from .job import Conn, FenceFn, PmiJob, check_kvsname, job_settings
from .parse import PmiProtocolError, need, parse1, parse2, show
from .wire import (
    KEYLEN_MAX,
    KVSNAME_MAX,
    LINE,
    MAX_KVS_BYTES,
    MAX_LINE,
    MAX_OUT,
    VALLEN_MAX,
    next_message,
)

log = logging.getLogger("pilotfish.pmi")


class Engine:
    """The PMI jobs of one node and their connections' protocol, without I/O."""

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
        """A job with `size` ranks of which `local_ranks` live on this node; one connection
        per local rank (job.conns; the server gives each a socketpair: job.rank_fds, the ends
        to hand to the ranks).

        Its ranks are told job.name: kvsname, unless MPICH's shared memory of that name
        exists on this node or a live job has its world id -- then, and always with
        fresh_name, `<kvsname>.<128 random bits>`, drawn again while taken (mpich.py).

        node_of_rank: the node of every rank (any ids; needed when ranks live elsewhere, by
        default all on this node), for PMI_process_mapping. on_fence: this job's (else the
        server's); a job with ranks elsewhere needs one. attrs: more job attributes served to
        get / info-getjobattr (e.g. PMI_hwloc_xmlfile: a topology file made once per node
        saves each rank its discovery, ~4 ms of a 2-rank job's 77 ms here)."""
        check_kvsname(kvsname)
        if kvsname in self._jobs:
            raise ValueError(f"kvsname={kvsname!r}: a job of that name is already served")
        fence = on_fence or self.on_fence
        ranks, universe, job_attrs, node_id = job_settings(
            size, local_ranks, node_of_rank, appnum, universe_size, attrs, fence is not None
        )
        job = PmiJob(self, kvsname, size, ranks, appnum, universe, job_attrs, fence)
        job.node_id = node_id
        job.name = mpich.pick_name(
            kvsname, node_id, fresh_name, (other.name for other in self._jobs.values())
        )
        try:
            for r in ranks:
                job.conns[r] = self.open_conn(job, r)
        except BaseException:
            job.close()
            raise
        self._jobs[kvsname] = job
        return job

    def open_conn(self, job: PmiJob, rank: int) -> Conn:
        """A new connection of a local rank (the server's has a socketpair)."""
        return Conn(job, rank)

    def jobs(self) -> list[PmiJob]:
        return list(self._jobs.values())

    def drop_job(self, job: PmiJob) -> None:
        """Forget a job (job.close)."""
        self._jobs.pop(job.kvsname, None)

    # -- bytes in -----------------------------------------------------------------------------
    def feed(self, c: Conn, data: bytes) -> None:
        """Serve what rank c sent: every complete message in its input. A protocol error
        fails its job (on_error), never raises."""
        if c.closed:
            return
        c.inbuf += data
        try:
            self._drain(c)
        except PmiProtocolError as e:
            self.fail(c.job, c.rank, str(e))

    def eof(self, c: Conn) -> None:
        """Rank c closed its connection: on_lost unless it finalized or aborted (or its job
        failed)."""
        quiet = c.finalized or c.aborted or c.job.failed is not None
        self.close_conn(c)
        if not quiet:
            log.info("%s rank %d closed its PMI connection before finalize", c.job.kvsname, c.rank)
            if self.on_lost is not None:
                self.on_lost(c.job, c.rank)

    def settle(self, c: Conn) -> None:
        """Serve what rank c sent that is not read yet (nothing waits here: feed serves all)."""

    def forget(self, c: Conn) -> None:
        """Stop serving a rank's connection (its process ended)."""
        self.close_conn(c)

    # -- answers out --------------------------------------------------------------------------
    def send(self, c: Conn, data: bytes) -> None:
        """An answer to rank c: here, kept in c.outbuf (take); the server writes it."""
        if c.closed:
            return
        if self._trace:
            log.debug("%s rank %d <- %s", c.job.kvsname, c.rank, show(data))
        c.outbuf += data

    def take(self, c: Conn) -> bytes:
        """The answers to rank c not taken yet."""
        out = bytes(c.outbuf)
        c.outbuf.clear()
        return out

    # -- ends ---------------------------------------------------------------------------------
    def close_conn(self, c: Conn) -> None:
        if c.closed:
            return
        c.closed = True
        c.inbuf.clear()
        c.outbuf.clear()

    def fail(self, job: PmiJob, rank: int | None, reason: str, report: bool = True) -> None:
        """Stop serving `job` (once): close its connections -- its ranks read EOF -- and tell
        the owner (on_error, unless report=False: the owner's own word)."""
        if job.failed is not None or job.closed:
            return
        job.failed = reason
        for c in list(job.conns.values()):
            self.close_conn(c)
        if report:
            who = f"rank {rank}" if rank is not None else "the job"
            log.warning("%s: %s: %s", job.kvsname, who, reason)
            if self.on_error is not None:
                self.on_error(job, rank, reason)

    # -- dispatch -----------------------------------------------------------------------------
    def _drain(self, c: Conn) -> None:
        """Handle every complete message in c.inbuf."""
        buf = c.inbuf
        while buf and not c.closed:
            m = next_message(buf, self.max_line, c.mcmd is not None)
            if m is None:
                return
            kind, raw = m
            if kind == LINE:
                self._line1(c, raw)
            else:
                self._frame2(c, raw)

    def _ascii(self, c: Conn, raw: bytes, what: str) -> str:
        """A message's text (traced when asked); not ASCII: the job's protocol error."""
        if self._trace:
            log.debug("%s rank %d -> %s", c.job.kvsname, c.rank, show(raw))
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise PmiProtocolError(f"malformed: {what} that is not ASCII: {show(raw)}") from None

    def _line1(self, c: Conn, raw: bytes) -> None:
        line = self._ascii(c, raw, "a PMI-1 line")
        if c.mcmd is not None or line.startswith("mcmd="):
            self._spawn1(c, line)
            return
        kv = parse1(line)
        cmd = kv.pop("cmd")
        if not c.inited and cmd != "init":
            raise PmiProtocolError(f"cmd={cmd} before init")
        PMI1.get(cmd, _unknown1)(self, c, cmd, kv)

    def _spawn1(self, c: Conn, line: str) -> None:
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
            c.reply1("spawn_result", rc="-1", msg="spawn_not_supported")

    def _frame2(self, c: Conn, raw: bytes) -> None:
        body = self._ascii(c, raw, "a PMI-2 frame")
        kv = parse2(body)
        cmd = kv.pop("cmd")
        thrid = kv.get("thrid")
        if c.wire != 2:
            raise PmiProtocolError(f"a PMI-2 frame (cmd={cmd}) before init pmi_version=2")
        PMI2.get(cmd, _unknown2)(self, c, cmd, kv, thrid)

    def abort(self, c: Conn, code: str, message: str) -> None:
        """Rank c's PMI abort: on_abort with its exit code (1 if not a number) and message
        (backslashes dropped, at most VALLEN_MAX characters)."""
        c.aborted = True
        try:
            exitcode = int(code)
        except ValueError:
            exitcode = 1
        message = message.replace("\\", "")[:VALLEN_MAX]
        log.info("%s rank %d: PMI abort %d %s", c.job.kvsname, c.rank, exitcode, message)
        if self.on_abort is not None:
            self.on_abort(c.job, c.rank, exitcode, message)


# -- PMI-1: handler(engine, conn, cmd, kv) --------------------------------------------------


def _init1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    v = kv.get("pmi_version")
    if v == "2":  # a PMI-2 client starts with this PMI-1 line, then speaks frames
        c.wire, c.inited = 2, True
        c.reply1("response_to_init", rc="0", pmi_version="2", pmi_subversion="0")
    elif v == "1":
        c.inited = True
        c.reply1("response_to_init", rc="0", pmi_version="1", pmi_subversion="1")
    else:
        c.reply1(
            "response_to_init",
            rc="-1",
            pmi_version="1",
            pmi_subversion="1",
            msg="unsupported_pmi_version",
        )


def _maxes1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.reply1(
        "maxes",
        rc="0",
        kvsname_max=str(KVSNAME_MAX),
        keylen_max=str(KEYLEN_MAX),
        vallen_max=str(VALLEN_MAX),
    )


def _appnum1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.reply1("appnum", rc="0", appnum=str(c.job.appnum))


def _kvsname1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.reply1("my_kvsname", rc="0", kvsname=c.job.name)


def _universe1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.reply1("universe_size", rc="0", size=str(c.job.universe_size))


def _put1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    job = c.job
    if kv.get("kvsname", job.name) not in (job.name, job.kvsname):
        c.reply1("put_result", rc="-1", msg="unknown_kvsname")
        return
    job.put(need(kv, "key", cmd), need(kv, "value", cmd))
    c.reply1("put_result", rc="0")


def _get1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    job = c.job
    key = need(kv, "key", cmd)
    v = job.get(key) if kv.get("kvsname", job.name) in (job.name, job.kvsname) else None
    if v is None:
        c.reply1("get_result", rc="-1", msg="key_not_found")
    else:
        c.reply1("get_result", rc="0", value=v)


def _barrier1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    group = kv.get("group")
    if group is not None and not group.startswith("WORLD"):
        # barrier groups are PMI 1.2; we answer init with 1.1, so MPICH never asks
        c.reply1("barrier_out", rc="-1", msg="groups_not_supported")
        return
    c.job.arrive(c, None)


def _finalize1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.finalized = True
    c.reply1("finalize_ack", rc="0")


def _abort1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    eng.abort(
        c,
        kv.get("exitcode", kv.get("exit_code", "1")),
        kv.get("message", kv.get("error_msg", "")),
    )


def _unsupported1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    c.reply1(cmd.split("_")[0] + "_result", rc="-1", msg="not_supported")


def _unknown1(eng: Engine, c: Conn, cmd: str, kv: dict[str, str]) -> None:
    log.warning("%s rank %d: unknown PMI-1 command %r", c.job.kvsname, c.rank, cmd)
    c.reply1(cmd + "_result", rc="-1", msg="unknown_command")


Handler1 = Callable[[Engine, Conn, str, dict[str, str]], None]

PMI1: dict[str, Handler1] = {
    "init": _init1,
    "get_maxes": _maxes1,
    "get_appnum": _appnum1,
    "get_my_kvsname": _kvsname1,
    "get_universe_size": _universe1,
    "put": _put1,
    "get": _get1,
    "barrier_in": _barrier1,
    "finalize": _finalize1,
    "abort": _abort1,
    "publish_name": _unsupported1,
    "unpublish_name": _unsupported1,
    "lookup_name": _unsupported1,
}


# -- PMI-2: handler(engine, conn, cmd, kv, thrid) -------------------------------------------


def _fullinit2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    want = kv.get("pmirank", kv.get("pmiid", kv.get("srcid")))
    if want is not None and want != str(c.rank):
        raise PmiProtocolError(f"fullinit as rank {want!r} on rank {c.rank}'s connection")
    c.reply2(
        "fullinit-response",
        thrid,
        **{
            "pmi-version": "2",
            "pmi-subversion": "0",
            "rank": str(c.rank),
            "size": str(c.job.size),
            "appnum": str(c.job.appnum),
            "debugged": "FALSE",
            "pmiverbose": "FALSE",
        },
    )


def _getid2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.reply2("job-getid-response", thrid, jobid=c.job.name)


def _put2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.job.put(need(kv, "key", cmd), need(kv, "value", cmd))
    c.reply2("kvs-put-response", thrid)


def _fence2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.job.arrive(c, thrid)


def _get2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    job = c.job
    jid = kv.get("jobid")
    mine = jid in (None, "", job.name, job.kvsname)
    v = job.get(need(kv, "key", cmd)) if mine else None
    if v is None:
        c.reply2("kvs-get-response", thrid, found="FALSE")
    else:
        c.reply2("kvs-get-response", thrid, found="TRUE", value=v)


def _jobattr2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    v = c.job.attrs.get(need(kv, "key", cmd))
    if v is None:
        c.reply2("info-getjobattr-response", thrid, found="FALSE")
    else:
        c.reply2("info-getjobattr-response", thrid, found="TRUE", value=v)


def _putnode2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.job.put_node_attr(need(kv, "key", cmd), need(kv, "value", cmd))
    c.reply2("info-putnodeattr-response", thrid)


def _getnode2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    key = need(kv, "key", cmd)
    v = c.job.node_attrs.get(key)
    if v is not None:
        c.reply2("info-getnodeattr-response", thrid, found="TRUE", value=v)
    elif kv.get("wait", "FALSE").upper() == "TRUE":
        if len(c.waits) >= 64:
            raise PmiProtocolError("more than 64 info-getnodeattr waits at once")
        c.waits.append((key, thrid))  # answered by a local rank's putnodeattr
    else:
        c.reply2("info-getnodeattr-response", thrid, found="FALSE")


def _finalize2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.finalized = True
    c.reply2("finalize-response", thrid)


def _abort2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    eng.abort(c, kv.get("exitcode", "1"), kv.get("message", kv.get("msg", "")))


def _unsupported2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    c.reply2(cmd + "-response", thrid, rc="-1", errmsg="not supported")


def _unknown2(eng: Engine, c: Conn, cmd: str, kv: dict[str, str], thrid: str | None) -> None:
    log.warning("%s rank %d: unknown PMI-2 command %r", c.job.kvsname, c.rank, cmd)
    c.reply2(cmd + "-response", thrid, rc="-1", errmsg="unknown command")


Handler2 = Callable[[Engine, Conn, str, dict[str, str], str | None], None]

PMI2: dict[str, Handler2] = {
    "fullinit": _fullinit2,
    "job-getid": _getid2,
    "kvs-put": _put2,
    "kvs-fence": _fence2,
    "kvs-get": _get2,
    "info-getjobattr": _jobattr2,
    "info-putnodeattr": _putnode2,
    "info-getnodeattr": _getnode2,
    "finalize": _finalize2,
    "abort": _abort2,
    "name-publish": _unsupported2,
    "name-unpublish": _unsupported2,
    "name-lookup": _unsupported2,
    "spawn": _unsupported2,
    "job-connect": _unsupported2,
    "job-disconnect": _unsupported2,
}
