"""pf.Executor: concurrent.futures over a pilot's function workers.

    with pf.Executor() as ex:                      # its own local pilot, this machine's cores
        futures = [ex.submit(f, x) for x in xs]
        results = list(ex.map(g, xs))

    ex = pf.Executor(tmgr)                          # or over an existing TaskManager

Each submit becomes a function task. Submits are gathered and sent in batches by one thread
(a submit costs microseconds, not a round trip); a future resolves when its task's final
state arrives. cancel() on a future whose call has not ended cancels the task (a running
call is stopped with its worker, which is replaced).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import threading
from typing import Any, Callable

from .. import states as S
from .._errors import DescriptionError, PilotfishError
from ..descriptions import PilotDescription, TaskDescription
from .pilot import PilotManager
from .session import Session
from .task import TaskManager


class _TaskFuture(cf.Future):
    __slots__ = ("_executor", "uid", "finish")

    def __init__(self, executor: "Executor"):
        super().__init__()
        self._executor = executor
        self.uid: str | None = None  # its task's, once sent
        self.finish: Callable | None = None

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._executor._cancel(self)
        return True


class Executor(cf.Executor):
    """A concurrent.futures.Executor whose calls run as function tasks of a pilot.

    tmgr      run on this TaskManager's pilots (default: start a session and a local pilot
              of `pilot` -- default one node of this machine's cores -- and stop them at
              shutdown)
    autoalloc without tmgr: instead of one pilot, pilots of `pilot` requested as the calls
              need them (PilotManager.autoalloc's settings: max_pilots, idle_timeout, ...)
    ranks, cores_per_rank, gpus_per_rank, mem_per_rank
              the shape of each call's worker (default: one core)
    """

    def __init__(
        self,
        tmgr=None,
        *,
        pilot: PilotDescription | dict | None = None,
        session_path: str | None = None,
        ranks: int = 1,
        cores_per_rank: int = 1,
        gpus_per_rank: int = 0,
        mem_per_rank: int = 0,
        autoalloc: dict | None = None,
    ):
        self._shape = {
            k: v
            for k, v, default in (
                ("ranks", ranks, 1),
                ("cores_per_rank", cores_per_rank, 1),
                ("gpus_per_rank", gpus_per_rank, 0),
                ("mem_per_rank", mem_per_rank, 0),
            )
            if v != default
        }
        TaskDescription(function=print, **self._shape)  # type: ignore[arg-type]  # ints; bad shapes fail here, naming the field
        self._own = None
        if tmgr is None:
            session = Session(path=session_path)
            try:
                pd = (
                    pilot if pilot is not None else PilotDescription(nodes=1, runtime="24h")
                )  # (a local pilot: this machine's shape)
                pmgr = PilotManager(session)
                tmgr = TaskManager(session)
                if autoalloc is not None:
                    tmgr.add_pilots(pmgr.autoalloc(pd, **autoalloc))
                else:
                    tmgr.add_pilots(pmgr.submit_pilots(pd))
            except BaseException:
                session.close()
                raise
            self._own = session
        self.tmgr = tmgr
        self._lock = threading.Condition()
        self._queue: collections.deque = collections.deque()  # (description, future) to send
        self._by_desc: dict[int, _TaskFuture] = {}  # id(description) -> future, while sending
        self._futures: dict[str, _TaskFuture] = {}  # task uid -> future, until it resolves
        self._shutdown = False
        tmgr.register_callback(self._on_state)
        self._sender = threading.Thread(
            target=self._send_loop, name="pilotfish-executor", daemon=True
        )
        self._sender.start()

    # -- concurrent.futures API -------------------------------------------------------------
    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        """Run fn(*args, **kwargs) as a function task on the pilots; returns a
        concurrent.futures.Future of its result (as concurrent.futures.Executor.submit)."""
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        # (not re-checked field by field: args is a tuple and kwargs a dict of str keys by
        # construction, the shape was checked once in __init__; a few microseconds per call
        # at tens of thousands of calls a second)
        values = dict(self._shape, function=fn)
        if args:
            values["args"] = args
        if kwargs:
            values["kwargs"] = kwargs
        return self.submit_description(TaskDescription.from_checked(values))

    def submit_description(self, d: TaskDescription, finish: Callable | None = None) -> cf.Future:
        """A future for any task description (adapters: pilotfish.parsl). finish(task) -> (value,
        exception) decides the outcome of a task that ended DONE or FAILED (default: the
        function's result or exception)."""
        f = _TaskFuture(self)
        f.finish = finish
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append((d, f))
            if len(self._queue) == 1:
                self._lock.notify()
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more calls; wait: block until the submitted calls ended; cancel_futures:
        cancel the calls not sent yet (as concurrent.futures.Executor.shutdown)."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                for _, f in self._queue:
                    cf.Future.cancel(f)
                self._queue.clear()
            self._lock.notify()
        if cancel_futures:
            for f in list(self._futures.values()):
                f.cancel()
        if wait:
            self._sender.join()
            cf.wait(list(self._futures.values()))
        if self._own is not None:
            own, self._own = self._own, None
            if wait:
                own.close()
            else:  # its pilot ends when what was sent has ended, without blocking here

                def close() -> None:
                    self._sender.join()
                    cf.wait(list(self._futures.values()))
                    own.close()

                threading.Thread(target=close, name="pilotfish-executor-close", daemon=True).start()

    # -- internals ------------------------------------------------------------------------
    def _send_loop(self) -> None:
        """Send what was submitted meanwhile, in one batch (submits gather while a batch is
        being sent: no timer, no per-call round trip)."""
        while True:
            with self._lock:
                while not self._queue and not self._shutdown:
                    self._lock.wait()
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
            live = [(d, f) for d, f in batch if not f.cancelled()]
            while live:
                for d, f in live:
                    self._by_desc[id(d)] = f
                try:
                    self.tmgr.submit_tasks([d for d, _ in live])
                except DescriptionError as e:  # (all or nothing) that call alone fails
                    for d, _ in live:
                        self._by_desc.pop(id(d), None)
                    if e.index is None:
                        self._fail(live, e)
                        break
                    self._fail([live.pop(e.index)], e)
                    continue
                except BaseException as e:  # noqa: BLE001 -- each future learns why
                    for d, _ in live:
                        self._by_desc.pop(id(d), None)
                    self._fail(live, e)
                    break
                # canceled while being sent: their tasks exist now, cancel those
                late = [f.uid for _, f in live if f.cancelled() and f.uid is not None]
                if late:
                    try:
                        self.tmgr.cancel_tasks(late)
                    except PilotfishError:
                        pass
                break

    @staticmethod
    def _fail(items, e: BaseException) -> None:
        for _, f in items:
            if not f.done():
                try:
                    f.set_exception(e)
                except cf.InvalidStateError:
                    pass

    def _on_state(self, task, state: str) -> None:  # submitting thread (NEW) or IO thread
        if state == S.NEW:
            f = self._by_desc.pop(id(task.description), None)
            if f is not None:
                f.uid = task.uid
                self._futures[task.uid] = f
            return
        if state not in S.FINAL:
            return
        f = self._futures.pop(task.uid, None)
        if f is None or f.done():
            return
        try:
            if f.finish is not None and state != S.CANCELED:
                try:
                    value, exc = f.finish(task)
                except BaseException as e:  # noqa: BLE001 -- the future carries it to the caller
                    value, exc = None, e
                if exc is None:
                    f.set_result(value)
                else:
                    f.set_exception(exc)
            elif state == S.DONE:
                try:
                    value = task.result
                except BaseException as e:  # noqa: BLE001 -- a result that does not unpickle
                    f.set_exception(e)
                else:
                    f.set_result(value)
            elif state == S.CANCELED:
                cf.Future.cancel(f)
            else:
                f.set_exception(task.exception or PilotfishError(task.reason or state))
        except cf.InvalidStateError:  # canceled by the user meanwhile
            pass

    def _cancel(self, f: _TaskFuture) -> None:
        if f.uid is not None:
            self._futures.pop(f.uid, None)
            try:
                self.tmgr.cancel_tasks([f.uid])
            except PilotfishError:
                pass
