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

Idle workers keep their cores while nothing else waits and stop after IDLE_S; when other
work waits for their cores they give way at once (function_workers.py says which). The table
tells the pool when a round leaves work waiting (give_way, ports.CallPool).
"""

from __future__ import annotations

import collections
import logging
import math
import os
from collections.abc import Collection
from typing import Any

import msgspec
import zmq

from .. import _wire
from .. import states as S
from .._door import PER_PEER, TOTAL, Door
from .._sockets import bind_tcp, curve_router
from .._shapes import rank_capacity
from .inbox import router_messages
from .loop import Pollable
from .ports import Host
from .tasks import RUNNING
from .function_workers import (
    BATCH_S,
    BYE_WAIT_S,
    DRAIN_S,
    IDLE_S,
    INITIAL_WORKERS,
    MAX_BATCH,
    MAX_CALLS,
    MAX_RSS_MIB,
    MAX_STARTS_WITHOUT_PROGRESS,
    PARK_S,
    READY,
    READY_TIMEOUT_S,
    STARTING,
    STUCK_S,
    TIMEOUT_GRACE_S,
    Call,
    Worker,
    drop_results,
    explain_call,
    idle_to_stop,
    worker_spec,
)
from .worker import CANCELED, ERROR, RETURNED, ResultLog

log = logging.getLogger("pilotfish.agent")


_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode


class FunctionPool(Pollable):
    def __init__(self, agent: Host, park_s: float = PARK_S, keep_results: bool = False):
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
        self.park_s = park_s  # (PILOTFISH_FN_PARK_S: knobs.py)
        self.keep_results = keep_results  # (PILOTFISH_KEEP_RESULTS: knobs.py)
        self.n_started = 0
        self.call_s: float | None = None  # moving mean of a call's run time (once measured)
        self.caps: dict[tuple, int] = {}
        self.failed_starts: dict[tuple, int] = collections.defaultdict(int)
        self.stopping: tuple[str, str] | None = None  # (state for what is left, reason)
        opts = agent.desc.get("workers") or {}
        self.max_calls = int(opts.get("max_calls", MAX_CALLS))
        self.max_mem = float(opts.get("max_mem_mib", MAX_RSS_MIB))
        self.idle_s = float(opts.get("idle_s", IDLE_S))
        self.fds = (self.sock,)

    def on_ready(self, ready: Collection[Any]) -> None:
        """The loop (loop.Pollable): workers' messages; else calls out (idle workers stop)."""
        if self.sock in ready:
            self.on_readable()
        elif self.workers:
            self.dispatch()
        if self.parked:
            self.expire_parked()

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
        spec = worker_spec(
            uid,
            shape,
            log_path,
            self.address,
            self.remote_address,
            self.key_file,
            self.max_calls,
            self.max_mem,
        )
        self.workers[uid] = Worker(uid, shape, log_path, self.clock.mono())
        # the door's caps follow the pool's live workers (~90 connecting at once over 32 per
        # peer / 64 in all were shut and reconnected without end); recycled ones do not count
        self.door.scale(PER_PEER + len(self.workers), TOTAL + len(self.workers))
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
        """Stop the idle workers past idle_s, and those whose cores other work waits for
        (function_workers.idle_to_stop)."""
        for w in idle_to_stop(self.agent, self.workers, self.queues, now, self.idle_s):
            w.leaving = True
            try:
                self.sock.send_multipart([w.ident, _encode(["stop"])])
            except zmq.ZMQError:
                pass

    def explain(self, uid: str) -> dict | None:
        """What the pool knows of a live call (read only; function_workers.explain_call)."""
        call = self.calls.get(uid)
        if call is None:
            return None
        return explain_call(call, self.queues, self.workers, self._cap, self._misfit)

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
            w.close_log()
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
        """Large results go with the pilot (function_workers.drop_results)."""
        drop_results(self.dir, self.keep_results)
