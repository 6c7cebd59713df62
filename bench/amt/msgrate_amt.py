"""Message rate and handler overhead of pilotfish.amt (2 ranks). Prints one JSON line.

  remote   elements on rank 0 each send K small messages (an int) from inside a handler to a
           partner element on rank 1; timed from the start to the end of the epoch
  local    the same between elements on the same rank (no MPI): the cost of a send + dispatch
           + instrumented handler call
  relay    rank 0's elements each queue K local messages to themselves; each of those handlers
           sends one small message on to the partner on rank 1: many tiny handlers that each
           post one remote message, so the rate shows whether batches still gather the posts
           of many handlers (timed like remote)
  bulk     2 x 100 numpy arrays of 1 MiB from rank 0 to rank 1 (out-of-band buffers)
Each case runs `--reps` times; the best (least disturbed) repetition is reported.
"""

import argparse
import json
import time

import numpy as np

from _two_trees import rate_element
from pilotfish import amt


W = rate_element(amt)


def timed(fn, comm):
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    comm.Barrier()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=64)
    ap.add_argument("--k", type=int, default=2000, help="messages per sending element")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--idle", default="spin")
    ap.add_argument("--send-ahead", type=float, default=None,
                    help="amt.configure(send_ahead=) (0: send before every handler)")
    a = ap.parse_args()
    amt.configure(batch_max=a.batch, idle=a.idle)
    if a.send_ahead is not None:
        amt.configure(send_ahead=a.send_ahead)
    comm = amt.mpi().COMM_WORLD
    r, p = amt.rank(), amt.size()
    n = a.elements
    coll = amt.Collection(W, n)
    half = n // 2
    res = {"elements": n, "k": a.k, "batch_max": a.batch, "ranks": p,
           "send_ahead": a.send_ahead}

    def remote():
        with amt.epoch():
            if r == 0:
                for i in coll.local_indices():
                    coll[i].burst(i + half, a.k)

    def local():
        with amt.epoch():
            for i in coll.local_indices():
                partner = i + 1 if (i + 1) % half else i + 1 - half
                coll[i].burst(partner, a.k)

    def relay():
        with amt.epoch():
            if r == 0:
                for i in coll.local_indices():
                    coll[i].relay_burst(i + half, a.k)

    big = [np.ones(1 << 17) for _ in range(100)]          # 100 x 1 MiB

    def bulk():
        with amt.epoch():
            if r == 0:
                for j, arr in enumerate(big):
                    coll[half + j % half].take(arr)

    nmsg = half * a.k
    t = min(timed(remote, comm) for _ in range(a.reps))
    res["remote_msgs_per_s"] = nmsg / t
    t = min(timed(local, comm) for _ in range(a.reps))
    res["local_msgs_per_s"] = nmsg / t                       # per rank (both ranks busy)
    res["local_us_per_handler"] = t / nmsg * 1e6
    t = min(timed(relay, comm) for _ in range(a.reps))
    res["relay_msgs_per_s"] = nmsg / t
    t = min(timed(bulk, comm) for _ in range(a.reps))
    res["bulk_GiB_per_s"] = 100 / 1024 / t
    total = coll.reduce(lambda e: e.n, "sum")
    assert total == a.reps * nmsg * (2 + p), total
    if r == 0:
        print(json.dumps(res), flush=True)


amt.run(main)
