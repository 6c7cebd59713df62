"""A balanced phase against its ideal: how much of every phase the runtime itself loses.

    mpiexec -n 2 python bench/amt/bcast_lb.py [--phases 6] [--unit 0.0020625] [--measured]

2 ranks, 32 elements; elements 0-15 (rank 0's home half) weigh 4, elements 16-31 weigh 1, so
rank 0 starts with 64 of the 80 units. Each phase rank 0 calls `coll.broadcast("work")` in an
epoch and every element spins (wall clock) for weight x `--unit` seconds; the phase time is
barrier to barrier around the epoch. After `--phases` phases, `amt.rebalance("greedy")`, then
`--phases` more. The ideal balanced phase is half the work, 40 units (82.5 ms at the default
unit): what is left over after the rebalance is the runtime's own loss per phase -- the broadcast
and the forwarded messages reaching the other rank late, termination waves, polling.

Loads are the synthetic weights (`add_load`, `measure=False`) unless `--measured`, so greedy
always finds the same 40/40 placement and before/after runs of different code compare the same
work. The spin is wall-clock, so a rank descheduled mid-handler still ends it on time.

Prints one JSON line (rank 0): per-phase times, medians before and after, the ideal, the
ratio ideal/after, the imbalance greedy predicted, per rank when its first handler started and
its last one ended (medians after LB, ms after the barrier), and which pilotfish.amt was
imported (for interleaved before/after runs with PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from pilotfish import amt

N = 32
HEAVY = 4.0
TRACE = {"t0": 0.0, "first": None, "last": 0.0}   # this rank, this phase: handler start/end


class Spin(amt.Element):
    def __init__(self, unit, synthetic):
        self.w = HEAVY if self.index < N // 2 else 1.0
        self.unit = unit
        self.synthetic = synthetic

    def work(self):
        t_start = time.perf_counter()
        if TRACE["first"] is None:
            TRACE["first"] = t_start
        t_end = t_start + self.w * self.unit
        while time.perf_counter() < t_end:
            pass
        if self.synthetic:
            self.add_load(self.w)
        TRACE["last"] = time.perf_counter()


def phase(coll, comm, where: list) -> float:
    """One timed phase; appends this rank's (first handler start, last handler end) in ms
    after the barrier to `where`."""
    comm.Barrier()
    t0 = time.perf_counter()
    TRACE["first"] = None
    with amt.epoch():
        if amt.rank() == 0:
            coll.broadcast("work")
    comm.Barrier()
    dt = time.perf_counter() - t0
    where.append(((TRACE["first"] - t0) * 1e3, (TRACE["last"] - t0) * 1e3))
    amt.phase()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", type=int, default=6)
    ap.add_argument("--unit", type=float, default=0.0020625, help="seconds per weight unit")
    ap.add_argument("--measured", action="store_true",
                    help="balance the runtime's wall-clock handler times, not the weights")
    ap.add_argument("--idle", choices=("sleep", "spin"), default="sleep")
    a = ap.parse_args()
    if a.phases < 1 or a.unit <= 0:
        ap.error("--phases must be >= 1 and --unit > 0")
    amt.configure(measure=a.measured, idle=a.idle)
    comm = amt.mpi().COMM_WORLD
    if amt.size() != 2:
        raise SystemExit("bcast_lb.py runs on 2 ranks")
    coll = amt.Collection(Spin, N, args=(a.unit, not a.measured))
    trace_before, trace_after = [], []
    before = [phase(coll, comm, trace_before) for _ in range(a.phases)]
    st = amt.rebalance("greedy", collections=[coll])
    after = [phase(coll, comm, trace_after) for _ in range(a.phases)]
    ideal = (N // 2 * HEAVY + N // 2) / 2 * a.unit
    local = comm.gather(len(coll.local_indices()), root=0)
    spans = comm.gather([round(statistics.median(x[k] for x in trace_after), 2)
                         for k in (0, 1)], root=0)
    if amt.rank() == 0:
        med_after = statistics.median(after)
        print(json.dumps({
            "amt": amt.__file__, "unit_s": a.unit, "measured": a.measured,
            "phase_ms_before": [round(t * 1e3, 2) for t in before],
            "phase_ms_after": [round(t * 1e3, 2) for t in after],
            "median_ms_before": round(statistics.median(before) * 1e3, 2),
            "median_ms_after": round(med_after * 1e3, 2),
            "ideal_ms": round(ideal * 1e3, 2),
            "ideal_over_after": round(ideal / med_after, 4),
            "predicted_imbalance_after": round(st.imbalance_after, 4),
            "migrations": st.migrations, "elements_per_rank": local,
            # per rank, medians over the phases after LB: first handler's start and last
            # handler's end, ms after leaving the phase's opening barrier
            **{f"rank{r}_{what}_ms_after": span[k] for r, span in enumerate(spans)
               for k, what in enumerate(("first_start", "last_end"))}}), flush=True)


if __name__ == "__main__":
    main()
