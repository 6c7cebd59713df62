"""Function workers as the pool (functions.py) keeps them: a call, a worker, the worker's
task, what the pool says of a call, the idle workers that give way to waiting work, and the
large results left at the end.

Idle workers (nothing in flight, nothing queued for their shape) keep their cores while nothing
else waits -- the next calls find them warm -- and stop after IDLE_S. When other work waits in
their partition's queue (an executable task, or a worker of another shape that has calls to
run), they give their cores back at once (give_way, idle_to_stop): the longest idle first, as
many as cover the cores and GPUs that what waits asks for beyond the free ones (the queue's
exact counts, through ports.Host.waiting_for). Work that still does not fit although that much
is free in all -- it needs more on one node than is free there, or memory the workers hold (the
counts say nothing of nodes or memory) -- has, once its scheduling round is over and nothing
changed since (the queue is settled), the idle workers of one node stop: the node where they
hold the most cores; again at the next settled round while it still waits. The table tells the
pool when a round leaves work waiting (give_way, ports.CallPool), so this happens right after
the round, not at the loop's next turn (up to a second later).
"""

from __future__ import annotations

import collections
import enum
import logging
import os
import sys
from collections.abc import Callable

from .. import _wire
from .._util import hostname
from .ports import Host
from .tasks import WAITING
from .worker import ResultLog

log = logging.getLogger("pilotfish.agent")


class WorkerState(enum.Enum):
    """A function worker's state: started, not connected yet; connected (said ready). A
    worker that leaves is dropped from the pool: no state of its own."""

    STARTING = "starting"
    READY = "ready"


STARTING, READY = WorkerState.STARTING, WorkerState.READY

BATCH_S = 0.005  # about this much work per batch (from the measured call time)
MAX_BATCH = 1024  # calls per batch at most
IDLE_S = 5.0  # a worker with nothing to do this long stops (while nothing else waits)
STUCK_S = 0.05  # a worker without a result for this long is in a long call: no
# more calls for it, and the ones it holds but has not started are
# taken back for the other workers
MAX_CALLS = 100_000  # a worker is recycled after this many calls
MAX_RSS_MIB = 4096.0  # ... or above this resident memory
MAX_STARTS_WITHOUT_PROGRESS = 3
READY_TIMEOUT_S = 60.0  # a worker running this long without connecting is stopped
TIMEOUT_GRACE_S = 1.0  # a call past its timeout by this much has its worker stopped
BYE_WAIT_S = 0.5  # a worker that exited 0 without a bye seen: its bye may be this late
INITIAL_WORKERS = 8  # per shape, before any call time is known
PARK_S = 300.0  # a call that names a callable the agent never got fails after this
DRAIN_S = 0.2  # then: enough workers to run what waits in about this long


class Call:
    __slots__ = ("uid", "fn_id", "call", "canceled", "worker", "timeout", "batch", "suspect")

    def __init__(self, uid: str, fn_id: int, call: bytes, timeout: float | None):
        self.uid = uid
        self.timeout = timeout
        self.fn_id = fn_id
        self.call = call
        self.canceled: tuple[str, str] | None = None  # (state, reason) once canceled
        self.worker: Worker | None = None
        self.batch = 0  # which of its worker's batches it went in
        self.suspect = False  # in a batch whose worker died: runs alone (see worker_exited)


class Worker:
    __slots__ = (
        "uid",
        "shape",
        "ident",
        "state",
        "inflight",
        "fns",
        "log",
        "log_path",
        "read_off",
        "idle_since",
        "leaving",
        "progress_at",
        "reclaiming",
        "inline",
        "batches",
        "killed_for_cancel",
        "running_since",
        "gave_way",
    )

    def __init__(self, uid: str, shape: tuple, log_path: str, now: float):
        self.uid = uid
        self.shape = shape
        self.ident: bytes | None = None
        self.state: WorkerState = STARTING  # -> READY -> (gone)
        self.inflight: collections.deque[Call] = collections.deque()  # in the order sent
        self.fns: set[int] = set()  # functions it has been sent
        self.log: ResultLog | None = None
        self.log_path = log_path
        self.read_off = 0
        self.idle_since = now
        self.leaving = False  # said bye, or asked to stop: nothing more is sent to it
        self.progress_at = now  # when it last returned a result (or got work while idle)
        self.reclaiming = False  # its unstarted calls were asked back
        self.inline = False  # on another node: results come with its messages, not a log
        self.batches = 0  # batches sent to it
        self.killed_for_cancel = False
        self.running_since: float | None = None  # when the agent first saw it running
        self.gave_way = False  # stopped, idle, for work that waits for its cores

    def close_log(self) -> None:
        """Its result log is read to the end: closed, and its file removed."""
        if self.log is not None:
            self.log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def explain_call(
    call: Call,
    queues: dict[tuple, collections.deque[Call]],
    workers: dict[str, Worker],
    cap: Callable[[tuple], int],
    misfit: Callable[[tuple], str | None],
) -> dict:
    """What the pool knows of a live call (agent/explain.py words it): worker (uid and
    state) once sent to one; else shape, ahead (calls before it in its shape's queue), ready
    and starting workers of that shape, cap (workers of that shape at once) and misfit (why
    none can start); parked: its callable has not come yet."""
    w = call.worker
    if w is not None:
        return {"worker": w.uid, "worker_state": w.state.value}
    for shape, q in queues.items():
        if call in q:
            ahead = q.index(call)  # (Calls compare by identity)
            live = [w for w in workers.values() if w.shape == shape and not w.leaving]
            ready = sum(1 for w in live if w.state is READY)
            return {
                "shape": list(shape),
                "ahead": ahead,
                "ready": ready,
                "starting": len(live) - ready,
                "cap": cap(shape),
                "misfit": misfit(shape),
            }
    return {"parked": True}


def worker_spec(
    uid: str,
    shape: tuple,
    log_path: str,
    address: str,
    remote_address: str,
    key_file: str,
    max_calls: int,
    max_mem: float,
) -> _wire.TaskSpec:
    """A worker's task: the agent places, launches and supervises it like any task."""
    ranks, cores, gpus, mem = shape
    return _wire.TaskSpec(
        uid=uid,
        executable=sys.executable,
        arguments=(
            "-m",
            "pilotfish.agent.worker",
            address,
            uid,
            log_path,
            str(max_calls),
            str(max_mem),
            hostname(),
            remote_address,
        ),
        ranks=ranks,
        cores_per_rank=cores,
        gpus_per_rank=gpus,
        mem_per_rank=mem,
        environment={"PILOTFISH_FN_KEYFILE": key_file},
        stdout=False,
        stderr=True,
    )


def idle_to_stop(
    host: Host, workers: dict[str, Worker], queues: dict, now: float, idle_s: float
) -> list[Worker]:
    """The idle workers (nothing in flight, nothing queued for their shape) to stop: those
    idle past idle_s, and those whose cores other work waits for (give_way; marked so)."""
    idle = [
        w
        for w in workers.values()
        if w.state is READY and not w.leaving and not w.inflight and not queues.get(w.shape)
    ]
    if not idle:
        return []
    stop = [w for w in idle if now - w.idle_since > idle_s]
    for w in give_way(host, workers, queues, idle):
        if now - w.idle_since <= idle_s:
            w.gave_way = True
            stop.append(w)
    return stop


def give_way(
    host: Host, workers: dict[str, Worker], queues: dict, idle: list[Worker]
) -> list[Worker]:
    """The idle workers (of `idle`) whose cores other work waits for, per partition, by
    what its queue holds (Host.waiting_for: exact counts): the cores and GPUs the waiting
    tasks ask for, less those of this pool's spare workers (waiting, their shape has no
    calls queued), beyond the free ones and those of workers already stopped for it --
    the longest idle first, as many as cover that. Where the counts are covered but the
    queue is settled with work still waiting (it needs more on one node, or memory), the
    idle workers of one node: the node where they hold the most. See the module's
    docstring."""
    tasks = host.tasks
    mine: dict = {}  # partition -> its idle workers
    for w in idle:
        t = tasks.get(w.uid)
        if t is not None and t.partition is not None:
            mine.setdefault(t.partition, []).append(w)
    queued = {p: host.waiting_for(p) for p in mine}
    if not any(q.tasks for q in queued.values()):
        return []
    spare: collections.Counter = collections.Counter()  # waiting workers not needed
    spare_c: collections.Counter = collections.Counter()  # ... their cores
    spare_g: collections.Counter = collections.Counter()  # ... their GPUs
    back_c: collections.Counter = collections.Counter()  # cores of workers that gave way
    back_g: collections.Counter = collections.Counter()  # ... GPUs
    for w in workers.values():
        if w.state is READY and not w.leaving:
            continue
        t = tasks.get(w.uid)
        if t is None or t.partition not in mine:
            continue
        p = t.partition
        ranks, cores, gpus, _ = w.shape
        if t.state is WAITING:
            if w.leaving or not queues.get(w.shape):
                spare[p] += 1
                spare_c[p] += ranks * cores
                spare_g[p] += ranks * gpus
        elif w.gave_way:
            back_c[p] += ranks * cores
            back_g[p] += ranks * gpus
    out: list[Worker] = []
    for p, ws in mine.items():
        q = queued[p]
        if q.tasks - spare[p] <= 0:
            continue  # nothing but spare workers waits
        need_c = q.cores - spare_c[p] - q.free_cores - back_c[p]
        need_g = q.gpus - spare_g[p] - q.free_gpus - back_g[p]
        ws.sort(key=lambda w: w.idle_since)
        if need_c > 0 or need_g > 0:
            for w in ws:
                if need_c <= 0 and need_g <= 0:
                    break
                ranks, cores, gpus, _ = w.shape
                if (need_c > 0 and cores) or (need_g > 0 and gpus):
                    out.append(w)
                    need_c -= ranks * cores
                    need_g -= ranks * gpus
        elif q.settled and not back_c[p] and not back_g[p]:
            # enough is free in all, yet it does not fit: free one node's worth
            held: collections.Counter = collections.Counter()
            by_node: dict = {}
            for w in ws:
                t = tasks[w.uid]
                node = t.slots[0].node_index if t.slots else -1
                held[node] += w.shape[0] * w.shape[1]
                by_node.setdefault(node, []).append(w)
            node = max(held, key=lambda n: (held[n], -by_node[n][0].idle_since))
            out.extend(by_node[node])
            log.info(
                "%d waiting task(s) of partition %s do not fit though enough is free in "
                "all: the idle function workers of node %s give way",
                q.tasks - spare[p],
                p.index,
                node,
            )
    return out


def drop_results(directory: str, keep: bool) -> None:
    """Large results (worker.py: above BIG_RESULT, a file each here, which the client reads
    when a task's result is first asked for) go with the pilot: one nobody read stayed
    for good (2 GB of them). The agent drops them as it stops, before its bye: a closed
    session holds none. PILOTFISH_KEEP_RESULTS=1 in the agent's environment (the
    client's, which a pilot inherits) keeps them. (unlink: never through a link.)"""
    if keep:
        return
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.endswith(".result"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
