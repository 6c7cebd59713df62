"""The per-process runtime: scheduler loop, message processing, epochs.

One Runtime per MPI process (`get()`), created on first use. It owns four duplicates of the
world communicator, so that no kind of traffic can match another's:
  comm_msg  active messages (messenger)
  comm_td   termination waves (Iallreduce) and handler-error exchange
  comm_ctl  bounded-time collective checks (Iallgather) and phase/reduce results
  comm_lb   load-balancing strategies' own collectives

The messages it sends and runs (INVOKE, BCAST, ELEMENT, LOC, MIGRATE) and how an element's
state is pickled: _messages.py. Its collectives (sync_check, phase, reduce, rebalance,
finalize...): _collectives.py, a base of Runtime.
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
import time
import traceback
from collections import deque

from . import _collectives
from ._instrument import LBStats, PhaseStats
from ._errors import AmtError, CollectiveMismatchError, HandlerError
from ._messages import BCAST, ELEMENT, INVOKE, LOC, MAX_HOPS, MIGRATE, deserialise, serialise
from ._messenger import Messenger
from ._mpi import check_world, mpi
from ._termination import TerminationDetector

STEP_SECONDS = 0.001  # a scheduler step sends its batches after at most ~this long
SEND_AHEAD = 50e-6  # a handler expected to run longer than this sends what is pending
# for other ranks before it starts (~ a few times a batch's own cost)


_RUNTIME: Runtime | None = None


def get() -> Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = Runtime()
    return _RUNTIME


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return default


class Runtime:
    def __init__(self, comm=None):
        MPI = mpi()
        check_world(MPI)
        import numpy as np

        self.np = np
        self.MPI = MPI
        base = comm if comm is not None else MPI.COMM_WORLD
        self.comm_msg = base.Dup()
        self.comm_td = base.Dup()
        self.comm_ctl = base.Dup()
        self.comm_lb = base.Dup()
        self.rank = base.Get_rank()
        self.size = base.Get_size()
        self.messenger = Messenger(MPI, self.comm_msg)
        self.messenger.on_unpicklable = self._unpicklable
        self.td = TerminationDetector(MPI, self.comm_td)
        self.queue: deque = deque()
        self.colls: dict = {}
        self.next_cid = 0
        # messages for a collection another rank created first (ids follow creation order,
        # the same on every rank): kept until this rank creates it too
        self.early: dict[int, list] = {}
        self.epoch_counter = 0
        self.epoch_stack: list[int] = [0]
        self.ctx_epoch: int | None = None  # epoch of the handler running now
        self.ctx_elem = None  # (collection, flat) of the handler running now
        self.phase_id = 0
        self.op_seq = 0
        self.broken: str | None = None
        self.finalized = False
        self.failed = False
        self.measure = True
        self.clock = time.perf_counter  # handler timing: wall clock by default
        self._wall = time.perf_counter  # handler spans, for _send_ahead
        self._cpu = None  # self.clock when it is not the wall clock
        self.idle_sleep = True  # back off with short sleeps when idle
        self.send_ahead = SEND_AHEAD
        self.sync_timeout = _env_float("PILOTFISH_AMT_SYNC_TIMEOUT", 120.0)
        self.stats = {
            "handlers": 0,
            "local_messages": 0,
            "forwarded": 0,
            "parked": 0,
            "migrations_in": 0,
            "migrations_out": 0,
            "hints": 0,
        }
        self._install_hooks()

    # -- configuration / hooks -----------------------------------------------------------------
    def configure(
        self,
        measure=None,
        sync_timeout=None,
        batch_max=None,
        inband_max=None,
        clock=None,
        idle=None,
        send_ahead=None,
    ):
        if measure is not None:
            self.measure = bool(measure)
        if clock is not None:
            clocks = {"wall": time.perf_counter, "cpu": time.thread_time}
            if clock not in clocks:
                raise ValueError(f"amt.configure(clock={clock!r}): use 'wall' or 'cpu'")
            self.clock = clocks[clock]
            self._cpu = None if self.clock is self._wall else self.clock
        if idle is not None:
            if idle not in ("sleep", "spin"):
                raise ValueError(f"amt.configure(idle={idle!r}): use 'sleep' or 'spin'")
            self.idle_sleep = idle == "sleep"
        if sync_timeout is not None:
            self.sync_timeout = float(sync_timeout)
        if batch_max is not None:
            self.messenger.batch_max = max(1, int(batch_max))
        if inband_max is not None:
            self.messenger.inband_max = int(inband_max)
        if send_ahead is not None:
            send_ahead = float(send_ahead)
            if not send_ahead >= 0:  # also rejects nan
                raise ValueError(f"amt.configure(send_ahead={send_ahead!r}): seconds >= 0")
            self.send_ahead = send_ahead

    def _install_hooks(self):
        previous = sys.excepthook

        def hook(et, ev, tb):
            self.failed = True
            try:
                sys.stderr.write(
                    f"[pilotfish.amt rank {self.rank}/{self.size}] uncaught "
                    "exception; aborting all ranks\n"
                )
                previous(et, ev, tb)
                sys.stderr.flush()
            finally:
                if self.size > 1:
                    self.abort(1)

        sys.excepthook = hook
        atexit.register(self._atexit)

    def _atexit(self):
        if self.failed or self.finalized or self.broken:
            return
        try:
            self.finalize()
        except BaseException:  # noqa: BLE001 -- a rank never dies silently: its traceback first
            traceback.print_exc()
            sys.stderr.flush()
            if self.size > 1:
                self.abort(1)

    def abort(self, code: int = 1):
        """MPI_Abort the whole job (some MPI_Abort implementations return: then exit)."""
        self.failed = True
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            self.MPI.COMM_WORLD.Abort(code)
        finally:
            os._exit(code)

    # -- collections ---------------------------------------------------------------------------
    def register(self, coll) -> int:
        cid = self.next_cid
        self.next_cid += 1
        self.colls[cid] = coll
        early = self.early.pop(cid, None)
        if early:
            self.queue.extend(early)
        return cid

    # -- sending -------------------------------------------------------------------------------
    def current_epoch(self) -> int:
        return self.ctx_epoch if self.ctx_epoch is not None else self.epoch_stack[-1]

    def send_invoke(self, coll, flat, method, args, kwargs):
        ep = self.ctx_epoch if self.ctx_epoch is not None else self.epoch_stack[-1]
        self.td.produced[ep] += 1
        msg = (INVOKE, ep, coll.cid, flat, method, args, kwargs, self.rank, 0)
        if flat in coll.ledger.local:
            self.queue.append(msg)
            self.stats["local_messages"] += 1
            return
        nbytes = 0
        for a in args:
            nbytes += getattr(a, "nbytes", 0)
        self._route(coll, flat, msg, nbytes)

    def send_broadcast(self, coll, method, args, kwargs):
        ep = self.current_epoch()
        msg = (BCAST, ep, coll.cid, method, args, kwargs)
        self.td.produced[ep] += self.size
        for r in range(self.size):
            if r == self.rank:
                self.queue.append(msg)
            else:
                self.messenger.post(r, msg)

    def send_migrate(self, coll, flat, dest):
        ep = self.current_epoch()
        self.td.produced[ep] += 1
        self._route(coll, flat, (MIGRATE, ep, coll.cid, flat, dest, self.rank, 0))

    def _route(self, coll, flat, msg, nbytes=0):
        if flat in coll.ledger.local:
            self.queue.append(msg)
            self.stats["local_messages"] += 1
            return
        dest = coll.loc.lookup(flat)
        if dest == self.rank:
            coll.loc.parked.setdefault(flat, []).append(msg)
            self.stats["parked"] += 1
        else:
            self.messenger.post(dest, msg, nbytes)

    def _forward(self, coll, flat, msg):
        hops = msg[-1] + 1
        if hops > MAX_HOPS:
            self._drop(
                msg[1],
                f"message for {coll.describe(flat)} routed {hops} times (location manager loop)",
            )
            return
        self.stats["forwarded"] += 1
        coll.loc.forwarded += 1
        self._route(coll, flat, msg[:-1] + (hops,))

    def _drop(self, ep, why):
        """A message that will never run: its failure is reported at its epoch's end, and it
        counts as consumed (so the epoch still ends)."""
        self.td.errors[ep].append(f"rank {self.rank}: {why}")
        self.td.consumed[ep] += 1

    def _describe(self, msg) -> str:
        """What a message is, for an error: element and handler where it has them."""
        kind, cid = msg[0], msg[2]
        coll = self.colls.get(cid)
        name = coll.name if coll is not None else f"#{cid}"
        if kind == INVOKE:
            who = (
                coll.describe(msg[3])
                if coll is not None
                else f"element {msg[3]} of collection {name}"
            )
            return f"{who}.{msg[4]}()"
        if kind == BCAST:
            return f"broadcast .{msg[3]}() to collection {name!r}"
        return f"a runtime message (kind {kind}) for collection {name!r}"

    def _unpicklable(self, msg, exc):
        """A message to another rank that cannot be pickled (the messenger left it out)."""
        self._drop(
            msg[1],
            f"cannot send {self._describe(msg)} to another rank: its arguments "
            f"cannot be pickled: {type(exc).__name__}: {exc}",
        )

    def _post_loc(self, ep, coll, flat, to_rank, version):
        self.td.produced[ep] += 1
        self.messenger.post(to_rank, (LOC, ep, coll.cid, flat, self.rank, version))

    # -- processing ----------------------------------------------------------------------------
    def _process(self, msg):
        kind = msg[0]
        ep = msg[1]
        coll = self.colls.get(msg[2])
        if coll is None:
            if msg[2] < self.next_cid:  # sent before the sender knew: reported, counted
                self._drop(ep, f"{self._describe(msg)} arrived after its collection was destroyed")
                return
            self.early.setdefault(msg[2], []).append(msg)  # not created here yet
            return
        if kind == INVOKE:
            flat = msg[3]
            el = coll.ledger.local.get(flat)
            if el is None:
                if flat in coll.ledger.lost:
                    self._lost_message(coll, flat, f".{msg[4]}()", ep)
                else:
                    self._forward(coll, flat, msg)
                return
            if msg[8] and msg[7] != self.rank:  # it was forwarded: tell the sender, before
                self.stats["hints"] += 1  # the handler runs (the hint leaves with
                self._post_loc(ep, coll, flat, msg[7], coll.loc.version(flat))  # its sends)
            # the handler, inline (the hot path of every message): timed as the element's
            # load (self.clock) and, on the wall clock, as its span (see _send_ahead)
            method = msg[4]
            fn = getattr(el, method, None)
            if fn is None or not callable(fn):
                self.td.errors[ep].append(
                    f"rank {self.rank}: {coll.describe(flat)} has no handler {method!r}"
                )
            else:
                spans = coll.ledger.span
                key = (flat, method)
                if self.messenger.dirty:
                    self._send_ahead(spans, key)
                prev_ep, prev_el = self.ctx_epoch, self.ctx_elem
                self.ctx_epoch = ep
                self.ctx_elem = (coll, flat)
                wall = self._wall
                cpu = self._cpu
                t0 = wall()
                if cpu is not None:
                    c0 = cpu()
                try:
                    fn(*msg[5], **msg[6])
                except Exception as exc:  # noqa: BLE001 - reported on every rank at epoch end
                    self.td.errors[ep].append(
                        f"rank {self.rank}: {coll.describe(flat)}.{method}() raised "
                        f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()
                    )
                finally:
                    dt = wall() - t0
                    spans[key] = dt
                    if self.measure:
                        if cpu is not None:
                            dt = cpu() - c0
                        load = coll.ledger.load
                        load[flat] = load.get(flat, 0.0) + dt
                    self.ctx_epoch, self.ctx_elem = prev_ep, prev_el
                    self.stats["handlers"] += 1
            self.td.consumed[ep] += 1
        elif kind == BCAST:
            # its expansion routes a message per home element: what is pending leaves first
            self.messenger.flush()
            _, ep, cid, method, args, kwargs = msg
            for flat in coll.loc.home_range(self.rank):
                self.td.produced[ep] += 1
                self._route(coll, flat, (INVOKE, ep, cid, flat, method, args, kwargs, self.rank, 0))
            self.td.consumed[ep] += 1
        elif kind == ELEMENT:
            self._arrive(coll, msg)
            self.td.consumed[ep] += 1
        elif kind == LOC:
            flat = msg[3]
            if flat not in coll.ledger.local:
                coll.loc.learn(flat, msg[4], msg[5])
            self.td.consumed[ep] += 1
        elif kind == MIGRATE:
            flat = msg[3]
            if flat not in coll.ledger.local:
                if flat in coll.ledger.lost:
                    self._lost_message(coll, flat, " (migrate)", ep)
                else:
                    self._forward(coll, flat, msg)
                return
            dest = msg[4]
            if dest != self.rank:
                try:
                    data, bufs, _ = serialise(coll.ledger.local[flat])
                except Exception as exc:  # noqa: BLE001 - reported at epoch end
                    self.td.errors[ep].append(
                        f"rank {self.rank}: cannot migrate {coll.describe(flat)}: state not "
                        f"serialisable: {type(exc).__name__}: {exc}"
                    )
                else:
                    self.depart(coll, flat, dest, ep, data, bufs)
            self.td.consumed[ep] += 1
        else:  # pragma: no cover
            raise AmtError(f"unknown message kind {kind}")

    def _send_ahead(self, spans, key):
        """Before a handler runs: send the batches pending for other ranks unless the handler
        is known to be short (its last run on this rank took <= send_ahead seconds), so that
        other ranks get them while it computes; short handlers in a row still share batches."""
        last = spans.get(key)
        if last is None or last > self.send_ahead:
            self.messenger.flush()

    def _lost_message(self, coll, flat, what, ep):
        why = coll.ledger.lost[flat]
        self._drop(ep, f"{coll.describe(flat)}{what}: the element was lost in migration ({why})")

    def _hook(self, coll, flat, el, name, ep):
        """Run on_migrated_in/out as a handler of epoch ep: what it sends belongs to that epoch
        (the migration's), so the epoch's end waits for it."""
        spans = coll.ledger.span
        key = (-1, name)  # per collection: the element may be new here
        if self.messenger.dirty:
            self._send_ahead(spans, key)  # e.g. the departing element's own state
        prev_ep, prev_el = self.ctx_epoch, self.ctx_elem
        self.ctx_epoch, self.ctx_elem = ep, (coll, flat)
        t0 = time.perf_counter()
        try:
            getattr(el, name)()
        except Exception:  # noqa: BLE001 - reported at epoch end
            self.td.errors[ep].append(
                f"rank {self.rank}: {coll.describe(flat)}.{name}() "
                "raised:\n" + traceback.format_exc()
            )
        finally:
            spans[key] = time.perf_counter() - t0
            self.ctx_epoch, self.ctx_elem = prev_ep, prev_el

    def depart(self, coll, flat, dest, ep, data, bufs):
        """Send a local element (already serialised) to `dest` in epoch `ep`."""
        meta = coll.ledger.meta.pop(flat)
        version = meta[0] + 1
        cur = coll.ledger.load.pop(flat, 0.0)
        syn = coll.ledger.synth.pop(flat, 0.0)
        el = coll.ledger.local.pop(flat)
        coll.loc.learn(flat, dest, version)  # forwarding pointer
        self.td.produced[ep] += 1
        self.messenger.post(
            dest,
            (
                ELEMENT,
                ep,
                coll.cid,
                flat,
                data,
                [pickle.PickleBuffer(b) for b in bufs],
                (version, meta[1], cur, syn),
            ),
        )
        self.stats["migrations_out"] += 1
        self._hook(coll, flat, el, "on_migrated_out", ep)

    def _arrive(self, coll, msg):
        _, ep, cid, flat, data, bufs, meta = msg
        version, hist, cur, syn = meta
        try:
            el = deserialise(data, bufs)
        except Exception as exc:  # noqa: BLE001 -- a message that cannot be rebuilt: a tombstone
            # the sender no longer has it: keep a tombstone here (and tell its home), so that
            # every later message to it fails at once, naming it, instead of circling
            self.td.errors[ep].append(
                f"rank {self.rank}: cannot unpickle migrated "
                f"{coll.describe(flat)}:\n" + traceback.format_exc()
            )
            coll.ledger.lost[flat] = (
                f"its state could not be unpickled on rank {self.rank}: {type(exc).__name__}: {exc}"
            )
            self._settled_here(coll, flat, version, ep)
            return
        coll.adopt(flat, el, version, hist, cur, syn)
        self.stats["migrations_in"] += 1
        self._settled_here(coll, flat, version, ep)
        self._hook(coll, flat, el, "on_migrated_in", ep)

    def _settled_here(self, coll, flat, version, ep):
        """An element (or its tombstone) is on this rank now: tell its home, and run the
        messages parked for it."""
        coll.loc.learn(flat, self.rank, version)
        home = coll.loc.home(flat)
        if home != self.rank:
            self._post_loc(ep, coll, flat, home, version)
        parked = coll.loc.parked.pop(flat, None)
        if parked:
            self.queue.extend(parked)

    # -- the scheduler loop --------------------------------------------------------------------
    def progress(self) -> bool:
        """One scheduler step: send what was posted before it (the main program's messages)
        before any local work; receive; run queued handlers (up to 256, or until 1 ms has
        passed), each one not known to be short (see `_send_ahead`) sending what the ones
        before it posted before it starts; send the rest. True if it did anything."""
        did = False
        m = self.messenger
        m.flush()
        for _src, batch in m.poll():
            self.queue.extend(batch)
            did = True
        q = self.queue
        n = 0
        if q:
            clock = time.perf_counter
            t_end = clock() + STEP_SECONDS
            while q and n < 256:
                self._process(q.popleft())
                n += 1
                if clock() > t_end:
                    break
        self.messenger.flush()
        self.messenger.test_sends()
        return did or n > 0

    def wait_until(self, pred, deadline: float | None = None) -> bool:
        idle = 0
        while not pred():
            if self.progress():
                idle = 0
            else:
                idle += 1
                if idle > 64 and self.idle_sleep:
                    time.sleep(min(1e-3, 2e-6 * (idle - 64)))
            if deadline is not None and time.monotonic() > deadline:
                return pred()
        return True

    def drain(self):
        """Run until this rank's queue is empty and its batches are sent (not a global
        condition: messages may still be in flight towards it)."""
        self.progress()
        while self.queue or self.messenger.dirty:
            self.progress()

    # -- epochs --------------------------------------------------------------------------------
    def new_epoch(self) -> int:
        self.epoch_counter += 1
        return self.epoch_counter

    def open_epoch(self) -> int:
        if self.ctx_epoch is not None:
            raise AmtError(
                "amt.epoch() is collective: open it in the main program on every "
                "rank, not inside a handler"
            )
        ep = self.new_epoch()
        self.epoch_stack.append(ep)
        return ep

    def close_epoch(self, ep: int, wait: bool = True):
        if self.epoch_stack[-1] != ep:
            raise AmtError(f"epoch {ep} closed out of order (open: {self.epoch_stack[1:]})")
        self.epoch_stack.pop()
        if wait:
            self.wait_epoch(ep)

    def wait_epoch(self, ep: int):
        """Four-counter termination detection for epoch `ep` (collective; see _termination)."""
        prev = None
        td = self.td
        while True:
            self.drain()
            req, result, _ = td.wave(ep)
            self.wait_until(req.Test)
            p, c, e, s1, s2 = (int(x) for x in result)
            if s1 * s1 != s2 * self.size:  # sum(ep)^2 == n * sum(ep^2) iff all ranks' ep agree
                self.broken = (
                    f"rank {self.rank} waited for epoch {ep} while another rank "
                    "waited for a different epoch"
                )
                raise CollectiveMismatchError(
                    f"amt.epoch(): ranks closed different epochs (rank {self.rank}: epoch {ep}); "
                    "every rank must open and close the same epochs in the same order"
                )
            # handler errors are raised once the epoch has ended, not at the first wave that
            # sees one: what the failing handlers' siblings sent still runs within the epoch
            if p == c and prev == (p, c):
                break
            prev = (p, c)
        try:
            if e:
                self._raise_handler_errors(ep)
        finally:
            td.forget(ep)

    def _raise_handler_errors(self, ep):
        mine = list(self.td.errors[ep])
        self.td.errors[ep].clear()
        everyone = self.comm_td.allgather(mine)
        failures = [(r, text) for r, texts in enumerate(everyone) for text in texts]
        first = failures[0][1] if failures else "?"
        raise HandlerError(
            f"{len(failures)} handler failure(s) in epoch {ep}; first: {first}", failures
        )

    def require_top_level(self, what: str):
        if self.ctx_epoch is not None:
            raise AmtError(
                f"amt.{what}() is collective: call it from the main program on "
                "every rank, not inside a handler"
            )
        if len(self.epoch_stack) > 1:
            raise AmtError(f"amt.{what}() must be called outside `with amt.epoch():` blocks")

    # -- collectives (_collectives.py) ----------------------------------------------------------
    def sync_check(self, what: str, timeout: float | None = None) -> None:
        _collectives.sync_check(self, what, timeout)

    def quiesce(self) -> None:
        _collectives.quiesce(self)

    def phase(self) -> PhaseStats:
        return _collectives.phase(self)

    def reduce(self, coll, value, op):
        return _collectives.reduce(self, coll, value, op)

    def destroy(self, coll) -> None:
        _collectives.destroy(self, coll)

    def finalize(self) -> None:
        _collectives.finalize(self)

    def rebalance(self, strategy="greedy", model="last", collections=None, **options) -> LBStats:
        return _collectives.rebalance(self, strategy, model, collections, **options)
