"""Messages for other ranks leave before local work runs, on 2 ranks (counts, no timing):
  main      what the main program posted (a broadcast) has been sent when the first queued
            local handler runs
  handler   what a handler posted for the other rank has been sent when the next handler
            starts, if that one is known to be long (its last run spun 2 ms) or has never run
  hook      a departing element's state has been sent when its on_migrated_out() runs (the
            hook's first run here)
  batching  short handlers in a row still share batches: 10 handlers that each post one
            message for rank 1 make one batch (send_ahead=1 s: all of them count as short;
            the step's time bound raised so that only the policy decides); with send_ahead=0
            the same 10 make 10 batches
  config    send_ahead must be a number of seconds >= 0
Each check looks at the messenger's pending batches (rt.messenger.out) from inside a handler.
"""

import sys
import time

from pilotfish import amt
from pilotfish.amt import _runtime

COMM = amt.mpi().COMM_WORLD
HOOK_SEEN = []     # on_migrated_out runs after the state was packed: recorded here, not in it


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def pending_for_other_rank() -> int:
    rt = _runtime.get()
    return len(rt.messenger.out[1 - rt.rank])


class Probe(amt.Element):
    def __init__(self):
        self.seen = []
        self.ticks = 0

    def tick(self):
        self.ticks += 1

    def look(self):
        self.seen.append(pending_for_other_rank())

    def slow_look(self):
        self.seen.append(pending_for_other_rank())
        t_end = time.perf_counter() + 0.002
        while time.perf_counter() < t_end:
            pass

    def post(self, then):
        # element 2 lives on rank 1 (4 elements, 2 per rank)
        self.collection.send(2, "tick")
        self.collection.send(self.index + 1, then)

    def relay(self):
        self.collection.send(2, "tick")

    def on_migrated_out(self):
        HOOK_SEEN.append(pending_for_other_rank())


def check(name, ok, detail):
    total = COMM.allreduce(int(bool(ok)))
    if total != COMM.Get_size():
        raise SystemExit(f"FAIL {name} rank {amt.rank()}: {detail}")
    say(f"OK {name} rank {amt.rank()}")


def main():
    r = amt.rank()
    assert amt.size() == 2, "run on 2 ranks"
    rt = _runtime.get()
    coll = amt.Collection(Probe, 4)

    # main: the broadcast to rank 1 is posted before the local look; it is sent first
    with amt.epoch():
        if r == 0:
            coll.broadcast("tick")
            coll[0].look()
    seen = coll.local(0).seen if r == 0 else [0]
    check("main", seen == [0], f"look saw {seen} message(s) pending for rank 1")

    # handler: a long (known) or new handler starts only after its predecessor's remote post
    with amt.epoch():
        if r == 0:
            coll[1].slow_look()            # its first run: 2 ms, so known long from now on
    coll.local(1).seen.clear() if r == 0 else None
    with amt.epoch():
        if r == 0:
            coll[0].post("slow_look")      # remote tick, then element 1's slow_look
    seen = coll.local(1).seen if r == 0 else [0]
    check("handler", seen == [0], f"slow_look saw {seen} pending")
    with amt.epoch():
        if r == 0:
            coll[0].post("look")           # remote tick, then element 1's look: never run
    seen = coll.local(1).seen if r == 0 else [0, 0]
    ticks = COMM.allreduce(sum(e.ticks for e in coll.local_elements()))
    check("handler-new", seen == [0, 0] and ticks == 4 + 2,
          f"slow_look, then a first-run look saw {seen} pending; ticks {ticks}")

    # hook: the departing element's state has left when on_migrated_out runs
    hooked = amt.Collection(Probe, 4, name="hooked")
    with amt.epoch():
        if r == 0:
            hooked.migrate(0, 1)
    seen = HOOK_SEEN if r == 0 else [0]
    check("hook", seen == [0], f"on_migrated_out saw {seen} pending")

    # batching: short handlers share a batch; send_ahead=0 sends before every handler
    saved = _runtime.STEP_SECONDS
    _runtime.STEP_SECONDS = 60.0
    try:
        got = {}
        for ahead in (1.0, 0.0):
            amt.configure(send_ahead=ahead)
            with amt.epoch():
                if r == 0:
                    coll[0].relay()            # warm-up: relay's span is known from now on
            st = rt.messenger.stats
            b0, m0 = st["batches_sent"], st["messages_sent"]
            with amt.epoch():
                if r == 0:
                    for _ in range(10):
                        coll[0].relay()
            got[ahead] = (st["batches_sent"] - b0, st["messages_sent"] - m0)
    finally:
        _runtime.STEP_SECONDS = saved
        amt.configure(send_ahead=_runtime.SEND_AHEAD)
    want = {1.0: (1, 10), 0.0: (10, 10)} if r == 0 else {1.0: (0, 0), 0.0: (0, 0)}
    check("batching", got == want, f"(batches, messages) sent by send_ahead: {got}")

    bad = []
    for value in (-1.0, float("nan")):
        try:
            amt.configure(send_ahead=value)
        except ValueError:
            continue
        bad.append(value)
    check("config", not bad, f"send_ahead={bad} accepted")


amt.run(main)
