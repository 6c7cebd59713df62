"""pilotfish.amt's balancers on the synthetic imbalance of bench/amt/charm_lb.py (same weights:
64 elements, lognormal, x4 on rank 0's half). Prints one JSON line.

  synthetic  loads injected with add_load (amt.configure(measure=False)): exact, deterministic
  measured   each element spins weight x UNIT seconds per iteration and the runtime's own
             wall-clock instrumentation decides, as Charm++ does

Both report the imbalance of the synthetic weights under the placement chosen (the number
charm_lb.py reports for GreedyLB), the migrations and the measured iteration times.

    mpiexec -n 2 python bench/amt/lb_quality.py
"""

import json
import sys
import time

import numpy as np

from pilotfish import amt


def arg(name, default, cast=int):
    return cast(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


N = arg("--elements", 64)
UNIT = arg("--unit", 0.0005, float)
SEED = arg("--seed", 7)
STRATEGIES = (sys.argv[sys.argv.index("--strategies") + 1].split(",")
              if "--strategies" in sys.argv else ["greedy", "greedy_refine", "tempered"])


def weights():
    rng = np.random.default_rng(SEED)
    w = rng.lognormal(0.0, 0.5, N)
    w[: N // 2] *= 4.0
    return w


class W(amt.Element):
    def __init__(self, w):
        self.w = float(w[self.index])

    def work(self, spin):
        if spin:
            t_end = time.perf_counter() + self.w * UNIT
            while time.perf_counter() < t_end:
                pass
        else:
            self.add_load(self.w)


def synthetic_imbalance(coll):
    loads = amt.mpi().COMM_WORLD.allgather(sum(e.w for e in coll.local_elements()))
    return amt.imbalance(loads)


def iteration(coll, spin):
    comm = amt.mpi().COMM_WORLD
    comm.Barrier()
    t0 = time.perf_counter()
    with amt.epoch():
        for i in coll.local_indices():
            coll[i].work(spin)
    comm.Barrier()
    dt = time.perf_counter() - t0
    amt.phase()
    return dt


def main():
    amt.configure(idle="spin")
    r = amt.rank()
    res = {"elements": N, "ranks": amt.size()}
    for mode in ("synthetic", "measured"):
        amt.configure(measure=mode == "measured")
        spin = mode == "measured"
        for name in STRATEGIES:
            coll = amt.Collection(W, N, args=(weights(),), name=f"{mode}-{name}")
            before = synthetic_imbalance(coll)
            t = [iteration(coll, spin), iteration(coll, spin)]
            st = amt.rebalance(name, collections=[coll])
            t += [iteration(coll, spin), iteration(coll, spin)]
            res[f"{mode}/{name}"] = {
                "imbalance_before": before, "imbalance_after": synthetic_imbalance(coll),
                "predicted_after": st.imbalance_after, "migrations": st.migrations,
                "strategy_s": st.strategy_seconds, "iter_s": t}
            coll.destroy()
    if r == 0:
        print(json.dumps(res), flush=True)


amt.run(main)
