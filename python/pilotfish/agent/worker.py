"""A persistent function worker: runs batches of Python calls for the agent's FunctionPool.

    python -m pilotfish.agent.worker ADDRESS UID LOG MAX_CALLS MAX_RSS_MIB AGENT_HOST TCP_ADDRESS

The agent places and launches a worker like any task (its cores, GPUs, ranks), then feeds it
batches of calls over ZeroMQ. Results do not travel back on the socket: each is appended to
the worker's result log, a file mapped shared (`ResultLog`), and the socket only says how far
the log is written. A result in the log survives the worker dying right after (the pages are
the kernel's), so a crash costs the call that crashed -- the first one without a result --
and nothing that finished before it.

Recycling: after MAX_CALLS calls, or when its resident memory passes MAX_RSS_MIB, a worker
finishes its batch, says bye and exits; the agent starts another if work is waiting.

With several ranks (an MPI worker), rank 0 talks to the agent and broadcasts each batch;
every rank runs each call as fn(*args, comm=<the ranks' communicator>, **kwargs), and the
result is the list of the ranks' return values (rank order).
"""

from __future__ import annotations

import collections
import io
import mmap
import os
import pickle
import signal
import socket
import sys
import time
import traceback

import cloudpickle
import msgspec

from .. import _frames, _running
from .._wire import RESULT_CANCELED, RESULT_ERROR, RESULT_IN_FILE, RESULT_OK, RESULT_RETURNED

LOG_BYTES = 1 << 30  # the result log's size (sparse: only what is written costs)
BIG_RESULT = 64 << 10  # larger results go to a file of their own, named in the log
MAX_OUTPUT = 1 << 20  # a call's captured stdout/stderr, as a task's (1 MiB each)
MAX_RECORD = BIG_RESULT + 2 * 4 * MAX_OUTPUT + 4096  # the most one result record can take
FLUSH_S = 0.002  # tell the agent how far the log is at least this often
_LEN = _frames.LEN  # (the framing: _frames.py; 0 ends the log)

CHECK_S = 0.001  # look for cancels and new batches between calls this often

# the first byte of a result payload (_wire says what follows each)
OK, ERROR, IN_FILE, CANCELED, RETURNED = (
    RESULT_OK,
    RESULT_ERROR,
    RESULT_IN_FILE,
    RESULT_CANCELED,
    RESULT_RETURNED,
)


class ResultLog:
    """Append-only records [u32 length][msgpack (uid, started, ended, payload)], committed by
    writing the length last: a reader stops at the first zero length."""

    def __init__(self, path: str, create: bool):
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, LOG_BYTES)
            self.map = mmap.mmap(
                fd, LOG_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | (mmap.PROT_WRITE if create else 0)
            )
        finally:
            os.close(fd)
        self.offset = 0

    def room(self, n: int) -> bool:
        return self.offset + _LEN.size + n + _LEN.size <= LOG_BYTES

    def append(self, record: bytes) -> None:
        off = self.offset
        end = off + _LEN.size + len(record)
        self.map[off + _LEN.size : end] = record
        _LEN.pack_into(self.map, off, len(record))  # the commit
        self.offset = end

    def read(self, start: int, stop: int | None = None):
        """(offset after, [records]) from `start` up to `stop` (None: every committed one)."""
        m, off, out = self.map, start, []
        limit = LOG_BYTES - _LEN.size if stop is None else stop
        while off < limit:
            n = _LEN.unpack_from(m, off)[0]
            if n == 0:
                break
            out.append(m[off + _LEN.size : off + _LEN.size + n])
            off += _LEN.size + n
        return off, out

    def close(self) -> None:
        self.map.close()


def error_payload(e: BaseException) -> bytes:
    """The exception itself where it pickles, with its traceback text; else its type and
    message (the client raises a RemoteError then)."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        exc = cloudpickle.dumps(e)
        pickle.loads(exc)  # (one that pickles but cannot be rebuilt is no use either)
    except Exception:  # noqa: BLE001 -- an exception that cannot travel: its name and message do
        exc = None
    # msgpack, not pickle: the agent reads the name and message without unpickling anything
    return ERROR + msgspec.msgpack.encode([type(e).__qualname__, str(e), tb, exc])


def _taken(buf) -> str | None:
    """What a call printed (capped like a task's output: MAX_OUTPUT), and the buffer empty."""
    if not buf.tell():
        return None
    text = buf.getvalue()
    buf.seek(0)
    buf.truncate()
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT]


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def _comm():
    """The ranks' communicator, or None for a single-rank worker (mpi4py only when needed)."""
    ranks = int(os.environ.get("PILOTFISH_RANKS", "1"))
    if ranks <= 1:
        return None
    from .._mpi import check_world, mpi

    MPI = mpi()  # the launcher's libmpi (both MPICH and Open MPI may be installed)
    check_world(MPI)
    return MPI.COMM_WORLD


def run_call(fn, call: bytes, comm, result_dir: str, uid: str) -> bytes:
    """One call: its payload (OK + pickled value, IN_FILE + path, or ERROR + info). With
    ranks, every rank runs it and rank 0 gathers (an exception on one rank does not skip the
    gather, so the others are not left waiting); only rank 0's payload counts."""
    _running.uid = uid
    try:
        args, kwargs = pickle.loads(call)
        if comm is not None:
            kwargs = dict(kwargs, comm=comm)
        part = (True, fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 -- SystemExit from a call fails that call only
        part = (False, error_payload(e))
    finally:
        _running.uid = None
    if comm is not None:
        parts = comm.gather(part, root=0)
        if comm.rank != 0:
            return b""
        failed = [(r, p[1]) for r, p in enumerate(parts) if not p[0]]
        if failed:
            return failed[0][1]
        part = (True, [p[1] for p in parts])
    if not part[0]:
        return part[1]
    try:
        data = cloudpickle.dumps(part[1], protocol=5)
    except Exception as e:  # noqa: BLE001 -- the result cannot travel: say so
        return error_payload(
            TypeError(f"the result ({type(part[1]).__qualname__}) cannot be pickled: {e}")
        )
    if len(data) > BIG_RESULT:
        path = os.path.join(result_dir, uid + ".result")
        with open(path, "wb") as f:
            f.write(data)
        return IN_FILE + path.encode()
    return OK + data


class _Unloadable:
    """A function that did not unpickle here: each of its calls fails with that error."""

    def __init__(self, e: BaseException):
        self.e = e

    def __call__(self, *args, **kwargs):
        raise self.e


class CallTimeout(TimeoutError):
    """A function task ran past its timeout (raised inside it, by SIGALRM)."""


def _timed_out(signum, frame):
    raise CallTimeout("the call ran past its timeout")


def main(argv: list[str]) -> int:
    address, uid, log_path, max_calls, max_rss, agent_host, remote_address = argv  # TCP: or ""
    # On another host than the agent (PILOTFISH_FN_INLINE=1: as if, for tests) the agent's
    # ipc socket is out of reach: TCP, where the agent has it; and results travel inline.
    inline = socket.gethostname() != agent_host or os.environ.get("PILOTFISH_FN_INLINE") == "1"
    if inline and remote_address:
        address = remote_address
    calls_cap, rss_cap = int(max_calls), float(max_rss)
    comm = _comm()
    rank = 0 if comm is None else comm.rank
    signal.signal(signal.SIGALRM, _timed_out)
    encode, decode = msgspec.msgpack.encode, msgspec.msgpack.decode
    result_dir = os.path.dirname(log_path)
    fns: dict[int, object] = {}
    if rank != 0:  # followers: run what rank 0 broadcasts until it says stop
        while True:
            batch = comm.bcast(None, root=0)
            if batch is None:
                return 0
            for call_uid, fn_id, fn_bytes, call, _ in batch:
                if fn_bytes is not None:
                    fns[fn_id] = cloudpickle.loads(fn_bytes)
                run_call(fns[fn_id], call, comm, result_dir, call_uid)

    import zmq

    from .._sockets import curve_dealer

    ctx = zmq.Context(1)
    # (the same identity after a reconnect)
    sock = curve_dealer(
        ctx, os.environ.pop("PILOTFISH_FN_KEYFILE"), address, identity=uid.encode(), linger=2000
    )
    # On the agent's host the results go through the shared result log (a crash loses
    # nothing written). On another node the agent cannot map our pages: the records travel
    # with the "done" messages instead, and a crash loses the results of the last few ms,
    # whose calls the agent then runs again.
    log = None if inline else ResultLog(log_path, create=True)
    offset = (lambda: 0) if log is None else (lambda: log.offset)  # inline: no log
    unsent: list[bytes] = []
    keep = unsent.append if inline else log.append  # type: ignore[union-attr]  # inline or a log
    parent = os.getppid()
    sock.send(encode(["ready", uid, os.getpid(), inline, address]))

    def flush():
        if inline:
            sock.send(encode(["done", 0, unsent]))
            unsent.clear()
        else:
            sock.send(encode(["done", offset()]))

    real_out, real_err = sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    done = 0
    bye = None
    pending: collections.deque = collections.deque()  # batches received, not run yet
    skip: set[str] = set()  # calls canceled before they started
    back: set[str] = set()  # calls the agent takes back (this worker is busy with a long one)

    def take(msg) -> str | None:  # one message from the agent; a reason to leave, or None
        if msg[0] == "calls":
            pending.append(msg[1])
        elif msg[0] == "cancel":
            skip.update(msg[1])
        elif msg[0] == "reclaim":
            back.update(msg[1])
        elif msg[0] == "stop":
            return "asked to stop"
        return None

    try:
        while bye is None:
            if not pending:
                if not sock.poll(1000):
                    if os.getppid() != parent:  # whoever started us is gone: so is the agent
                        return 0
                    continue
                bye = take(decode(sock.recv()))
                continue
            batch = pending.popleft()
            if comm is not None:  # (all ranks run the same calls: skip before the broadcast)
                kept = []
                for item in batch:
                    tag = CANCELED if item[0] in skip else RETURNED if item[0] in back else None
                    if tag is None:
                        kept.append(item)
                        continue
                    skip.discard(item[0])
                    back.discard(item[0])
                    keep(encode([item[0], time.time(), time.time(), tag, None, None]))
                batch = kept
                comm.bcast(batch, root=0)
            last_flush = last_check = time.monotonic()
            for call_uid, fn_id, fn_bytes, call, timeout in batch:
                if log is not None and not log.room(MAX_RECORD):  # recycle before a result
                    bye = "result log full"  # could not be kept
                    break
                now = time.monotonic()
                if comm is None and now - last_check >= CHECK_S:  # cancels, more batches
                    last_check = now
                    while sock.poll(0):
                        bye = take(decode(sock.recv())) or bye
                started = time.time()
                try:
                    if fn_bytes is not None:
                        try:
                            fns[fn_id] = cloudpickle.loads(fn_bytes)
                        except BaseException as e:  # noqa: BLE001 -- its later calls too
                            fns[fn_id] = _Unloadable(e)
                    if call_uid in skip:
                        skip.discard(call_uid)
                        payload = CANCELED
                    elif call_uid in back:
                        back.discard(call_uid)
                        payload = RETURNED
                    else:
                        if timeout and comm is None:  # (Python code only: C code runs on)
                            signal.setitimer(signal.ITIMER_REAL, timeout)
                        sys.stdout, sys.stderr = out, err  # what the call prints is its own
                        try:
                            payload = run_call(fns[fn_id], call, comm, result_dir, call_uid)
                        finally:
                            sys.stdout, sys.stderr = real_out, real_err
                            if timeout and comm is None:
                                signal.setitimer(signal.ITIMER_REAL, 0)
                except BaseException as e:  # noqa: BLE001 -- a function that cannot load
                    payload = error_payload(e)
                printed = _taken(out), _taken(err)
                keep(encode([call_uid, started, time.time(), payload, *printed]))
                done += 1
                if done >= calls_cap:  # the rest of the batch goes back to the agent's queue
                    bye = f"recycled after {done} calls"
                    break
                now = time.monotonic()
                if now - last_flush >= FLUSH_S:
                    flush()
                    last_flush = now
            flush()
            if bye is None and rss_cap and _rss_mib() > rss_cap:
                bye = f"recycled at {_rss_mib():.0f} MiB resident"
        sock.send(encode(["bye", bye, offset()]))
    finally:
        if comm is not None:
            comm.bcast(None, root=0)
        if log is not None:
            log.close()
        sock.close()
        ctx.term()
    if comm is not None:
        return 0  # (MPI ranks finalize on a normal exit)
    sys.stdout.flush()
    os._exit(0)  # (a thread a call left behind must not keep the worker, and its cores)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
