"""Function tasks: calls queued per shape, run in batches on persistent workers.

A function task (TaskDescription(function=...)) is never placed or spawned by itself. Its
call waits in the queue of its shape (ranks, cores, GPUs, memory per rank); the pool starts
workers of that shape as ordinary agent tasks -- placed, launched and supervised like any
task, so they hold their cores and show up in the accounting -- and feeds each ready worker
batches sized to about BATCH_S of work (two in flight, so a worker never waits for the next).
Results come back through each worker's shared-memory result log (worker.py); the socket
only carries "written up to here".

Failure isolation: a worker that dies fails the one call it was running (the first of its
calls without a result) with the signal or exit code, and its other calls go back to the
front of the queue; a replacement starts. A shape whose workers keep dying before finishing
anything (MAX_STARTS_WITHOUT_PROGRESS) fails its waiting calls with the last worker's reason
instead of restarting forever. Calls of a shape start in submit order (priority does not
reorder calls).

Idle workers (nothing in flight, nothing queued for their shape) keep their cores while
nothing else waits -- the next calls find them warm -- and stop after IDLE_S. When other work
waits in their partition's queue (an executable task, or a worker of another shape that has
calls to run), they give their cores back at once (_give_way): the longest idle first, as
many as cover the cores and GPUs that what waits asks for beyond the free ones (the queue's
exact counts, through ports.Host.waiting_for). Work that still does not fit although that
much is free in all -- it needs more on one node than is free there, or memory the workers
hold (the counts say nothing of nodes or memory) -- has, once its scheduling round is over
and nothing changed since (the queue is settled), the idle workers of one node stop: the
node where they hold the most cores; again at the next settled round while it still waits.
The table tells the pool when a round leaves work waiting (give_way, ports.CallPool), so this
happens right after the round, not at the loop's next turn (up to a second later).
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import os
import sys

import msgspec
import zmq

from .. import _wire
from .. import states as S
from .._door import Door
from .._sockets import bind_tcp, curve_router
from .._util import hostname
from .._shapes import rank_capacity
from .inbox import router_messages
from .ports import Host
from .tasks import RUNNING, WAITING
from .worker import CANCELED, ERROR, RETURNED, ResultLog

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

_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode


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


class FunctionPool:
    def __init__(self, agent: Host):
        self.agent = agent
        self.clock = agent.clock
        self.dir = os.path.join(agent.sandbox, "functions")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        # only our workers may connect (CURVE; the key file's path goes to them)
        self.key_file = os.path.join(self.dir, "server.key")
        self.sock, self.address = curve_router(agent.ctx, self.key_file, "functions")
        self.door = Door(self.sock, "function pool")  # before login: bounded (_door.py)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a gone worker raises
        from ..launch import may_span_hosts, remote_nodes

        # A worker on this host connects over ipc; one on another host -- now, or on nodes
        # the pilot grows onto later -- over TCP on this host's name (it picks, see worker.py).
        self.remote_address = ""
        if may_span_hosts(agent.desc["resource"], agent.resources):
            try:
                self.remote_address = bind_tcp(self.sock)
            except (OSError, zmq.ZMQError) as e:
                if remote_nodes(agent.resources):
                    raise  # workers on the other hosts could never connect: say so now
                log.warning("function pool: no TCP endpoint (%s): this host only", e)
        self.queues: dict[tuple, collections.deque[Call]] = {}
        self.calls: dict[str, Call] = {}  # live: queued or in flight
        self.workers: dict[str, Worker] = {}
        self.by_ident: dict[bytes, Worker] = {}
        self.fn_ids: dict[bytes, int] = {}  # a callable's digest (fn_ref) -> its index
        self.fn_bytes: list[bytes] = []  # the pickled callables, by index
        # calls whose callable has not arrived yet: their digest -> (mono time the first was
        # parked, [(shape, call)]) -- a frame that names a callable may overtake the one that
        # carries it
        self.parked: dict[bytes, tuple[float, list[tuple[tuple, Call]]]] = {}
        self.park_s = float(os.environ.get("PILOTFISH_FN_PARK_S", PARK_S))
        self.n_started = 0
        self.call_s: float | None = None  # moving mean of a call's run time (once measured)
        self.caps: dict[tuple, int] = {}
        self.failed_starts: dict[tuple, int] = collections.defaultdict(int)
        self.stopping: tuple[str, str] | None = None  # (state for what is left, reason)
        opts = agent.desc.get("workers") or {}
        self.max_calls = int(opts.get("max_calls", MAX_CALLS))
        self.max_mem = float(opts.get("max_mem_mib", MAX_RSS_MIB))
        self.idle_s = float(opts.get("idle_s", IDLE_S))

    # -- calls in -----------------------------------------------------------------------
    def accept(self, specs: list[_wire.TaskSpec], now: float) -> None:
        agent = self.agent
        profile = agent.events.enabled
        events = []
        touched: set = set()
        for spec in specs:
            ref = spec.fn_ref if spec.fn_ref is not None else spec.function
            if spec.function is not None and ref not in self.fn_ids:
                # learnt even if this call fails below: its siblings may only name it
                self._define(ref, spec.function, touched)  # type: ignore[arg-type]  # ref: set with the function
            shape = (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)
            problem = self._misfit(shape)
            if problem is None and (
                spec.call is None or not spec.uid or (spec.function is None and spec.fn_ref is None)
            ):
                problem = "a function task needs its callable (or its fn_ref), call and uid"
            if problem is not None:
                agent.call_final(spec.uid, S.FAILED, now, now, None, problem)
                continue
            # the client sends a callable once: the first of its tasks carries it, the others
            # name it by digest (fn_ref)
            fn_id = self.fn_ids.get(ref)  # type: ignore[arg-type]  # ref: set for every call
            call = Call(
                spec.uid,
                -1 if fn_id is None else fn_id,
                spec.call,  # type: ignore[arg-type]  # call: set for every call
                spec.timeout,
            )
            self.calls[spec.uid] = call
            if profile:
                events.append((now, spec.uid, S.AGENT_SCHEDULING, None))
            if fn_id is None:  # the frame carrying it comes later: wait for it
                _, waiting = self.parked.setdefault(ref, (self.clock.mono(), []))  # type: ignore[arg-type]  # ref: set for every call
                waiting.append((shape, call))
                continue
            self._queue(shape).append(call)
            touched.add(shape)
        agent.events.record_many(events)
        self._wake(touched)

    def define(self, ref: bytes, fn: bytes) -> None:
        """A callable arrived with a call that is not run (a duplicate uid): calls that
        name it may still be waiting for it."""
        if ref not in self.fn_ids:
            touched: set = set()
            self._define(ref, fn, touched)
            self._wake(touched)

    def _wake(self, touched: set) -> None:
        """Workers for the shapes that got calls, and calls to idle workers."""
        for shape in touched:
            self._ensure_workers(shape)
        self.dispatch()

    def _define(self, ref: bytes, fn: bytes, touched: set) -> None:
        """Learn a callable; the calls parked for it join their queues (their shapes are
        added to `touched`)."""
        fn_id = self.fn_ids[ref] = len(self.fn_bytes)
        self.fn_bytes.append(fn)
        for shape, parked in self.parked.pop(ref, (0.0, ()))[1]:
            parked.fn_id = fn_id
            if parked.canceled is None:
                self._queue(shape).append(parked)
                touched.add(shape)

    def expire_parked(self) -> None:
        """Calls whose callable did not come within park_s fail, with why (a client that
        lost the frame carrying it; never a wait without end)."""
        now = self.clock.mono()
        for ref, (since, calls) in list(self.parked.items()):
            if now - since < self.park_s:
                continue
            del self.parked[ref]
            t = self.clock.now()
            for _, c in calls:
                if self.calls.pop(c.uid, None) is not None and c.canceled is None:
                    self.agent.call_final(
                        c.uid,
                        S.FAILED,
                        None,
                        t,
                        None,
                        f"its callable (digest {ref.hex()[:12]}) did not "
                        f"reach the agent within {self.park_s:g}s",
                    )

    def _queue(self, shape: tuple) -> collections.deque:
        q = self.queues.get(shape)
        if q is None:
            q = self.queues[shape] = collections.deque()
        return q

    def _misfit(self, shape: tuple) -> str | None:
        return self.agent.misfit(shape)

    def _cap(self, shape: tuple) -> int:
        """How many workers of this shape the pilot holds at once."""
        cap = self.caps.get(shape)
        if cap is None:
            ranks, cores, gpus, mem = shape
            fit = sum(rank_capacity(part, cores, gpus, mem) for part in self.agent.shapes)
            cap = self.caps[shape] = max(1, fit // ranks)
        return cap

    def _ensure_workers(self, shape: tuple) -> None:
        if self.stopping is not None:
            return
        q = self.queues.get(shape)
        pending = len(q) if q else 0
        if not pending:
            return
        live = [w for w in self.workers.values() if w.shape == shape and not w.leaving]
        total = pending + sum(len(w.inflight) for w in live)
        # As many workers as the pilot holds for long calls, few for a burst of short ones
        # (an emulated 256-core pilot on a laptop would otherwise start 256 workers for
        # calls one worker runs in milliseconds): sized by the measured call time; a worker
        # stuck in a call raises the estimate (dispatch), so long calls ramp up fast.
        if self.call_s is None:
            want = min(self._cap(shape), total, max(len(live), INITIAL_WORKERS))
        else:
            want = min(self._cap(shape), total, max(1, math.ceil(total * self.call_s / DRAIN_S)))
        for _ in range(want - len(live)):
            self._start_worker(shape)

    def _start_worker(self, shape: tuple) -> None:
        uid = f"worker.{self.n_started:04d}"
        self.n_started += 1
        log_path = os.path.join(self.dir, uid + ".log")
        ranks, cores, gpus, mem = shape
        spec = _wire.TaskSpec(
            uid=uid,
            executable=sys.executable,
            arguments=(
                "-m",
                "pilotfish.agent.worker",
                self.address,
                uid,
                log_path,
                str(self.max_calls),
                str(self.max_mem),
                hostname(),
                self.remote_address,
            ),
            ranks=ranks,
            cores_per_rank=cores,
            gpus_per_rank=gpus,
            mem_per_rank=mem,
            environment={"PILOTFISH_FN_KEYFILE": self.key_file},
            stdout=False,
            stderr=True,
        )
        self.workers[uid] = Worker(uid, shape, log_path, self.clock.mono())
        self.agent.accept([spec])

    # -- messages from workers ------------------------------------------------------------
    def on_readable(self) -> None:
        sock = self.sock
        for ident, payload in router_messages(sock):
            try:
                msg = _decode(payload)
                kind = msg[0]
                if kind == "ready":
                    w = self.workers.get(msg[1])
                    if w is None:  # a worker we gave up on: tell it to go
                        sock.send_multipart([ident, _encode(["stop"])])
                        continue
                    w.ident = ident
                    w.state = READY
                    w.inline = bool(len(msg) > 3 and msg[3])
                    log.info(
                        "function worker %s ready (pid %s, via %s, results %s)",
                        w.uid,
                        msg[2],
                        msg[4] if len(msg) > 4 else "?",
                        "with its messages" if w.inline else "in its log",
                    )
                    if not w.inline:
                        w.log = ResultLog(w.log_path, create=False)
                    self.by_ident[ident] = w
                    self.failed_starts[w.shape] = 0
                elif kind == "done":
                    w = self.by_ident.get(ident)
                    if w is not None:
                        self._collect(w, msg[1], msg[2] if len(msg) > 2 else None)
                elif kind == "bye":
                    w = self.by_ident.get(ident)
                    if w is not None:
                        self._collect(w, msg[2])
                        w.leaving = True
                        self._give_back(w.shape, w.inflight)  # what it will not run, now
                        w.inflight.clear()
                        self._ensure_workers(w.shape)
            except Exception:  # a worker's garbage must not stop the agent
                log.exception("bad message from a function worker")
        self.dispatch()

    def _collect(self, w: Worker, stop: int | None, records: list | None = None) -> None:
        """Results from the worker's log up to `stop` (None: all it holds), or the records
        a worker on another node sent."""
        if records is None:
            if w.log is None:
                return
            w.read_off, records = w.log.read(w.read_off, stop)
        if not records:
            return
        agent = self.agent
        n = 0
        spent = 0.0
        returned: list[Call] = []
        w.progress_at = self.clock.mono()
        w.reclaiming = False
        for rec in records:
            uid, started, ended, payload, out, err = _decode(rec)
            call = w.inflight.popleft() if w.inflight else None
            if call is None or call.uid != uid:  # out of order: find it, keep the other
                if call is not None:
                    w.inflight.appendleft(call)
                call = self.calls.get(uid)
                if call is None or call not in w.inflight:
                    continue
                w.inflight.remove(call)
            if payload[:1] == RETURNED:  # taken back unstarted: to the front of the queue
                returned.append(call)
                continue
            self.calls.pop(uid, None)
            spent += ended - started
            n += 1
            if call.canceled is None and payload[:1] == CANCELED:
                call.canceled = (S.CANCELED, "canceled")
            if payload[:1] == ERROR:
                state = S.FAILED
                try:
                    name, message = _decode(payload[1:])[:2]
                    reason = f"raised {name}: {message}"[:1000]
                except Exception:  # noqa: BLE001 -- any bad payload: the call fails as unreadable
                    reason = "raised an exception (unreadable)"
            else:
                state, reason = S.DONE, None
            if call.canceled is not None:  # canceled after it was sent: its result is dropped
                agent.call_final(uid, call.canceled[0], started, ended, None, call.canceled[1])
                continue
            agent.call_final(uid, state, started, ended, payload, reason, out, err)
        self._give_back(w.shape, returned)
        if n:
            mean = spent / n
            self.call_s = mean if self.call_s is None else 0.8 * self.call_s + 0.2 * mean
            if not w.inflight:
                w.idle_since = self.clock.mono()

    def _give_back(self, shape: tuple, calls) -> None:
        """Calls a worker holds but will not run: to the front of their queue, in order; the
        canceled ones end instead."""
        if not calls:
            return
        now = self.clock.now()
        keep = []
        for c in calls:
            c.worker = None
            if c.canceled is None:
                keep.append(c)
            else:
                self.calls.pop(c.uid, None)
                self.agent.call_final(c.uid, c.canceled[0], None, now, None, c.canceled[1])
        if keep:
            self._queue(shape).extendleft(reversed(keep))

    # -- calls out ---------------------------------------------------------------------
    def dispatch(self) -> None:
        # Until a call time is measured, one call per worker (the calls may be long: a batch
        # would hold them behind each other while other workers idle); then batches of about
        # BATCH_S of work, two in flight while calls are short (the worker never waits; a
        # worker stuck in a long call gives back what it holds, STUCK_S).
        if self.call_s is None:
            per_batch, depth = 1, 1
        else:
            per_batch = max(1, min(MAX_BATCH, int(BATCH_S / max(self.call_s, 1e-7))))
            depth = 2 if self.call_s < STUCK_S else 1  # (longer: a worker may get stuck)
        sock = self.sock
        now = self.clock.mono()
        share: dict[tuple, int] = collections.Counter(
            w.shape for w in self.workers.values() if not w.leaving
        )  # workers per shape
        for w in list(self.workers.values()):  # (a stuck worker may start others)
            if w.state is not READY or w.leaving:
                continue
            if w.inflight and now - w.progress_at > STUCK_S:  # in a long call
                stuck = now - w.progress_at
                c = w.inflight[0]
                if c.timeout and stuck > c.timeout + TIMEOUT_GRACE_S and c.canceled is None:
                    # past its timeout and the SIGALRM inside did not end it (C code, or a
                    # handler that swallowed the TimeoutError): its worker is stopped
                    c.canceled = (
                        S.FAILED,
                        f"timed out after {c.timeout:g}s (its worker was stopped)",
                    )
                    w.leaving = w.killed_for_cancel = True
                    self.agent.cancel([w.uid], f"stopped: call {c.uid} ran past its timeout")
                    continue
                if self.call_s is None or stuck > self.call_s:
                    self.call_s = stuck  # calls take at least this long: more workers
                    self._ensure_workers(w.shape)
                if len(w.inflight) > 1 and not w.reclaiming:
                    w.reclaiming = True
                    try:
                        sock.send_multipart(
                            [w.ident, _encode(["reclaim", [c.uid for c in list(w.inflight)[1:]]])]
                        )
                    except zmq.ZMQError:
                        pass
                continue
            q = self.queues.get(w.shape)
            if not q:
                continue
            if not w.inflight:
                w.progress_at = now
            room = depth * per_batch - len(w.inflight)
            if room <= 0 or (room < per_batch and w.inflight):
                continue
            n = min(room, max(1, math.ceil(len(q) / max(1, share[w.shape]))))
            batch: list = []
            fns = w.fns
            fn_bytes = self.fn_bytes
            w.batches += 1
            while q and len(batch) < n:
                c = q.popleft()
                if c.canceled is not None:
                    continue
                if c.suspect and batch:  # a suspect runs in a batch of its own
                    q.appendleft(c)
                    break
                c.batch = w.batches
                fid = c.fn_id
                if fid in fns:
                    batch.append([c.uid, fid, None, c.call, c.timeout])
                else:
                    fns.add(fid)
                    batch.append([c.uid, fid, fn_bytes[fid], c.call, c.timeout])
                c.worker = w
                w.inflight.append(c)
                if c.suspect:
                    break
            if batch:
                try:
                    sock.send_multipart([w.ident, _encode(["calls", batch])])
                except zmq.ZMQError:  # it is gone: its exit puts the calls back
                    w.leaving = True
        if self.stopping is None:
            late = []
            for w in self.workers.values():
                if w.state is STARTING and not w.leaving:  # connected yet?
                    t = self.agent.tasks.get(w.uid)
                    if t is not None and t.state is RUNNING:
                        if w.running_since is None:
                            w.running_since = now
                        elif now - w.running_since > READY_TIMEOUT_S:
                            w.leaving = True
                            late.append(w.uid)
            if late:
                self.agent.cancel(
                    late, f"never connected to the agent within {READY_TIMEOUT_S:.0f} s of starting"
                )
            self._stop_idle(now)

    def give_way(self) -> None:
        """A scheduling round left work waiting (ports.CallPool; the table calls it then):
        the idle workers whose cores it needs stop now, not at the loop's next turn -- the
        queue is settled only after a round (see _give_way)."""
        if self.stopping is None and self.workers:
            self._stop_idle(self.clock.mono())

    def _stop_idle(self, now: float) -> None:
        """Stop the idle workers (nothing in flight, nothing queued for their shape) idle
        past idle_s, and those whose cores other work waits for (_give_way)."""
        queues = self.queues
        idle = [
            w
            for w in self.workers.values()
            if w.state is READY and not w.leaving and not w.inflight and not queues.get(w.shape)
        ]
        if not idle:
            return
        stop = [w for w in idle if now - w.idle_since > self.idle_s]
        for w in self._give_way(idle):
            if now - w.idle_since <= self.idle_s:
                w.gave_way = True
                stop.append(w)
        for w in stop:
            w.leaving = True
            try:
                self.sock.send_multipart([w.ident, _encode(["stop"])])
            except zmq.ZMQError:
                pass

    def _give_way(self, idle: list[Worker]) -> list[Worker]:
        """The idle workers (of `idle`) whose cores other work waits for, per partition, by
        what its queue holds (Host.waiting_for: exact counts): the cores and GPUs the waiting
        tasks ask for, less those of this pool's spare workers (waiting, their shape has no
        calls queued), beyond the free ones and those of workers already stopped for it --
        the longest idle first, as many as cover that. Where the counts are covered but the
        queue is settled with work still waiting (it needs more on one node, or memory), the
        idle workers of one node: the node where they hold the most. See the module's
        docstring."""
        host = self.agent
        tasks = host.tasks
        queues = self.queues
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
        for w in self.workers.values():
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

    def explain(self, uid: str) -> dict | None:
        """What the pool knows of a live call (read only; agent/explain.py words it), or None:
        worker (uid and state) once sent to one; else shape, ahead (calls before it in its
        shape's queue), ready and starting workers of that shape, cap (workers of that shape
        at once) and misfit (why none can start); parked: its callable has not come yet."""
        call = self.calls.get(uid)
        if call is None:
            return None
        w = call.worker
        if w is not None:
            return {"worker": w.uid, "worker_state": w.state.value}
        for shape, q in self.queues.items():
            if call in q:
                ahead = q.index(call)  # (Calls compare by identity)
                live = [w for w in self.workers.values() if w.shape == shape and not w.leaving]
                ready = sum(1 for w in live if w.state is READY)
                return {
                    "shape": list(shape),
                    "ahead": ahead,
                    "ready": ready,
                    "starting": len(live) - ready,
                    "cap": self._cap(shape),
                    "misfit": self._misfit(shape),
                }
        return {"parked": True}

    def retire(self, uids: set[str]) -> None:
        """These workers' nodes leave the pilot (a drain): they get no more calls, finish
        what they hold and stop; a worker still starting is stopped now. Replacements start
        elsewhere as the queues need them."""
        unstarted = []
        for uid in uids:
            w = self.workers.get(uid)
            if w is None or w.leaving:
                continue
            w.leaving = True
            if w.ident is None:
                unstarted.append(uid)
                continue
            try:
                self.sock.send_multipart([w.ident, _encode(["stop"])])
            except zmq.ZMQError:
                pass
        if unstarted:
            self.agent.cancel(unstarted, "its node leaves the pilot")
        for shape in {w.shape for w in self.workers.values()}:
            self._ensure_workers(shape)

    # -- workers that end -------------------------------------------------------------
    def task_ended(self, t, state: str, stderr: str | None) -> None:
        """A task of the pilot ended (ports.TaskEnded): a worker's end is ours."""
        if t.spec.uid in self.workers:
            self.worker_exited(t)

    def owns(self, uid: str) -> bool:  # ports.NodeLeaving
        return uid in self.workers

    def leave(self, uids: set[str], why: str) -> None:
        self.retire(uids)

    def worker_exited(self, t) -> None:
        """A worker task reached its final state: take what its log holds, fail the call it
        was running if it died, put its other calls back, start another if work waits."""
        w = self.workers.get(t.spec.uid)
        if w is None:
            return
        if t.exit_code == 0 and not w.leaving and w.inflight and w.ident is not None:
            # A recycled worker says bye and then exits: its exit can be reaped before its
            # bye is read (the message may still be in ZeroMQ's hands). Read what it sent
            # before judging it -- else the first call it handed back unrun fails, "died".
            deadline = self.clock.real_mono() + BYE_WAIT_S
            while not w.leaving:
                left = deadline - self.clock.real_mono()
                if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                    break
                self.on_readable()
        self.workers.pop(t.spec.uid, None)
        if w.ident is not None:
            self.by_ident.pop(w.ident, None)
        try:
            self._collect(w, None)  # (a worker that never got ready has no log and no calls)
        except Exception:  # a torn log must not cost the agent
            log.exception("reading the result log of %s", w.uid)
        finally:
            if w.log is not None:
                w.log.close()
            try:
                os.unlink(w.log_path)
            except OSError:
                pass
        agent = self.agent
        # dead unless it left as asked or announced (a call's os._exit(0) is a death too)
        died = not (w.leaving and t.exit_code == 0)
        why = t.reason or (
            f"exit code {t.exit_code}" if t.exit_code is not None else "it never started"
        )
        if w.state is not READY and not w.inflight:  # never came up
            self.failed_starts[w.shape] += 1
        back = []
        now = self.clock.now()
        first = True
        if died and w.inline and w.inflight:
            # A worker on another node sends its results at the end of each batch (and every
            # few ms): the first call without a result is not necessarily the one that killed
            # it, only its batch is known. A batch of one names the culprit; a larger one is
            # run again, each of its calls alone.
            lead = w.inflight[0]
            same = [c for c in w.inflight if c.batch == lead.batch]
            if len(same) > 1:
                for c in same:
                    c.suspect = True
                first = False  # nobody is failed this time
        for c in w.inflight:
            if c.canceled is not None:
                back.append(c)  # (ends, canceled, in _give_back)
            elif self.stopping is not None:
                c.worker = None
                self.calls.pop(c.uid, None)
                agent.call_final(c.uid, self.stopping[0], None, now, None, self.stopping[1])
            elif died and first and not w.killed_for_cancel:  # the call it died in
                c.worker = None
                self.calls.pop(c.uid, None)
                agent.call_final(
                    c.uid, S.FAILED, None, now, None, f"its worker {w.uid} died: {why}"[:1000]
                )
            else:
                back.append(c)
            first = False
        w.inflight.clear()
        self._give_back(w.shape, back)
        q = self.queues.get(w.shape)
        if q and self.failed_starts[w.shape] >= MAX_STARTS_WITHOUT_PROGRESS:
            reason = f"no worker of this shape could start ({w.uid}: {why})"[:1000]
            while q:
                c = q.popleft()
                self.calls.pop(c.uid, None)
                if c.canceled is None:
                    agent.call_final(c.uid, S.FAILED, None, now, None, reason)
            return
        live = sum(1 for x in self.workers.values() if x.shape == w.shape and not x.leaving)
        if died and w.state is READY and self.stopping is None and live < self._cap(w.shape):
            self._start_worker(w.shape)  # replaced (it stops again if it finds nothing to do)
        self._ensure_workers(w.shape)
        self.dispatch()

    # -- cancel, drain --------------------------------------------------------------------
    def cancel(self, uids: list[str], state: str, reason: str) -> list[str]:
        """Cancel the calls among uids; returns the uids that are not calls. A queued call
        ends at once; a running one ends with its worker, which is stopped (its other calls
        go back to the queue)."""
        rest: list = []
        kill: dict = {}
        skip: dict = {}
        now = self.clock.now()
        for uid in uids:
            c = self.calls.get(uid)
            if c is None:
                rest.append(uid)
                continue
            if c.canceled is not None:
                continue
            c.canceled = (state, reason)
            if c.worker is not None and c.worker.log is not None:
                try:  # what it finished meanwhile: so the first call left is the running one
                    self._collect(c.worker, None)
                except Exception:
                    log.exception("reading the result log of %s", c.worker.uid)
                if uid not in self.calls:  # it had ended (its end is reported)
                    continue
            if c.worker is None:
                self.calls.pop(uid, None)
                self.agent.call_final(uid, state, None, now, None, reason)
            elif c.worker.inflight and c.worker.inflight[0] is c:  # running: stop its worker
                kill[c.worker.uid] = c.worker
                c.worker.leaving = True  # (nothing more is sent to it)
                c.worker.killed_for_cancel = True
            else:  # sent, not started: the worker skips it (if it starts first after all,
                # it is stopped with the worker, or its result is dropped)
                skip.setdefault(c.worker, []).append(uid)
        for w, skipped in skip.items():
            if w.uid not in kill and w.ident is not None:
                try:
                    self.sock.send_multipart([w.ident, _encode(["cancel", skipped])])
                except zmq.ZMQError:
                    pass
        if kill:
            self.agent.cancel(list(kill), "stopped to cancel the call it was running")
        return rest

    def drain(self, state: str, reason: str) -> None:
        """The pilot stops: queued calls end now; running ones when their workers do."""
        self.stopping = (state, reason)
        now = self.clock.now()
        waiting = [c for _, calls in self.parked.values() for _, c in calls]
        self.parked.clear()
        for q in self.queues.values():
            waiting.extend(q)
            q.clear()
        for c in waiting:
            self.calls.pop(c.uid, None)
            if c.canceled is None:
                self.agent.call_final(
                    c.uid,
                    S.CANCELED,
                    None,
                    now,
                    None,
                    f"pilot stopped before the call started: {reason}",
                )

    def close(self) -> None:
        self.door.close()
        self.sock.close()
        try:
            os.unlink(self.key_file)
        except OSError:
            pass

    def drop_results(self) -> None:
        """Large results (worker.py: above BIG_RESULT, a file each here, which the client reads
        when a task's result is first asked for) go with the pilot: one nobody read stayed
        for good (2 GB of them). The agent drops them as it stops, before its bye: a closed
        session holds none. PILOTFISH_KEEP_RESULTS=1 in the agent's environment (the
        client's, which a pilot inherits) keeps them. (unlink: never through a link.)"""
        if os.environ.get("PILOTFISH_KEEP_RESULTS") == "1":
            return
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            if name.endswith(".result"):
                try:
                    os.unlink(os.path.join(self.dir, name))
                except OSError:
                    pass
