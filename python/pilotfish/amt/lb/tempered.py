"""TemperedLB, after DARMA/vt (itself built on Menon & Kalé's GrapevineLB): fully distributed,
no rank ever sees more than its own objects and a partial view of other ranks' loads.

One *iteration*:
1. inform: every underloaded rank (load < threshold x mean) knows itself; in each of `rounds`
   gossip rounds every rank that knows something sends all it knows to `fanout` random peers
   (an epidemic: after ~log_f(P) rounds most ranks know most underloaded ranks). The rounds are
   MPI alltoalls of (mostly empty) lists.
2. transfer: an overloaded rank walks its objects (`order`), draws a recipient from the known
   underloaded ranks with probability given by a cumulative mass function (`cmf`), and moves the
   object if the acceptance `criterion` holds, updating its own view of the recipient's load;
   it stops when it is no longer above the mean.
      criterion "modified" (vt):  l_dst + l_obj < l_src   (the pair's maximum goes down)
      criterion "grapevine":      l_dst + l_obj < mean
      cmf "original":   p_j ~ 1 - l_j / mean          (GrapevineLB)
      cmf "normbymax":  p_j ~ 1 - l_j / max(mean, max known l)   (vt default)
      cmf "normbyself": p_j ~ 1 - l_j / l_src
3. the moved objects are sent (virtually: only ids and loads) to their recipients, which own
   them in the next iteration.

`iterations` iterations form a *trial*; `trials` trials restart from the real placement with
other random draws. The imbalance (max/mean) after every iteration is computed with one
allgather, and the placement of the best iteration of all trials is kept (rollback: a later,
worse iteration never wins). Only then do objects migrate, each once, from where it is to
where the best iteration put it. Deterministic for a given `seed`.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections import defaultdict

import numpy as np

from .base import Strategy

ORDERS = ("load_desc", "fewest_migrations", "small_objects")


class TemperedStrategy(Strategy):
    name = "tempered"
    options = {
        "trials": 2,
        "iterations": 8,
        "fanout": 2,
        "rounds": None,
        "criterion": "modified",
        "cmf": "normbymax",
        "order": "fewest_migrations",
        "threshold": 1.0,
        "seed": 0,
    }

    def __init__(self, **options):
        super().__init__(**options)
        if self.opts["criterion"] not in ("modified", "grapevine"):
            raise ValueError(
                f"tempered: criterion must be 'modified' or 'grapevine', not "
                f"{self.opts['criterion']!r}"
            )
        if self.opts["cmf"] not in ("original", "normbymax", "normbyself"):
            raise ValueError(
                f"tempered: cmf must be 'original', 'normbymax' or 'normbyself', "
                f"not {self.opts['cmf']!r}"
            )
        if self.opts["order"] not in ORDERS:
            raise ValueError(f"tempered: order must be one of {ORDERS}, not {self.opts['order']!r}")

    # -- pieces ----------------------------------------------------------------------------
    def _order(self, hold: dict, my: float, mean: float) -> list:
        items = sorted(hold.items(), key=lambda kv: (-kv[1][0], kv[0]))
        how = self.opts["order"]
        if how == "small_objects":
            items.reverse()
        elif how == "fewest_migrations":
            # first the single object that best covers the excess (largest <= excess), then
            # the rest heaviest first: few, large moves
            excess = my - mean
            first = next((i for i, kv in enumerate(items) if kv[1][0] <= excess), None)
            if first is not None:
                items.insert(0, items.pop(first))
        return [gid for gid, _ in items]

    def _weights(self, cand: dict, my: float, mean: float) -> tuple[list, list]:
        ranks = sorted(cand)
        lv = [cand[r] for r in ranks]
        cmf = self.opts["cmf"]
        if cmf == "original":
            norm = mean
        elif cmf == "normbymax":
            norm = max(mean, max(lv))
        else:
            norm = my
        w = [max(0.0, 1.0 - x / norm) for x in lv] if norm > 0 else [1.0] * len(lv)
        total = sum(w)
        if total <= 0:
            w, total = [1.0] * len(lv), float(len(lv))
        acc, cum = 0.0, []
        for x in w:
            acc += x / total
            cum.append(acc)
        return ranks, cum

    def _accept(self, my: float, l_dst: float, l_obj: float, mean: float) -> bool:
        if self.opts["criterion"] == "modified":
            return l_dst + l_obj < my
        return l_dst + l_obj < mean

    # -- the algorithm ---------------------------------------------------------------------
    def run(self, comm, ids, loads, homes):
        rank, size = comm.Get_rank(), comm.Get_size()
        n = len(ids)
        if size < 2:
            return np.full(n, rank, dtype=np.int64)
        fanout = max(1, min(int(self.opts["fanout"]), size - 1))
        rounds = self.opts["rounds"]
        if rounds is None:
            rounds = max(2, math.ceil(math.log(size) / math.log(max(fanout, 2))) + 1)
        thr = float(self.opts["threshold"])
        seed = int(self.opts["seed"])
        others = [r for r in range(size) if r != rank]
        initial = {int(g): (float(x), rank) for g, x in zip(ids.tolist(), loads.tolist())}
        rl0 = comm.allgather(float(loads.sum()))
        mean = sum(rl0) / size
        best_imb = max(rl0) / mean if mean > 0 else 1.0
        best_hold, best_at = initial, (-1, -1)
        history = []
        for trial in range(int(self.opts["trials"])):
            hold = dict(initial)
            for it in range(int(self.opts["iterations"])):
                prng = random.Random(f"{seed}-{trial}-{it}-{rank}")
                my = sum(v[0] for v in hold.values())
                # 1. inform
                known = {rank: my} if my < thr * mean else {}
                for _ in range(int(rounds)):
                    msgs = [None] * size
                    if known:
                        for peer in prng.sample(others, fanout):
                            msgs[peer] = dict(known)
                    for m in comm.alltoall(msgs):
                        if m:
                            known.update(m)
                # 2. transfer
                out = defaultdict(list)
                cand = {r: x for r, x in known.items() if r != rank and x < mean}
                modified = self.opts["criterion"] == "modified"
                if my > thr * mean and cand:
                    cmf = None
                    for gid in self._order(hold, my, mean):
                        if my <= mean or not cand:
                            break
                        l_obj = hold[gid][0]
                        # no known rank could accept it: skip without drawing
                        if l_obj >= (my if modified else mean) - min(cand.values()):
                            continue
                        if cmf is None:
                            ranks, cmf = self._weights(cand, my, mean)
                        dst = ranks[min(bisect_right(cmf, prng.random()), len(ranks) - 1)]
                        if self._accept(my, cand[dst], l_obj, mean):
                            out[dst].append((gid, hold.pop(gid)))
                            my -= l_obj
                            cand[dst] += l_obj
                            if cand[dst] >= mean:
                                del cand[dst]
                            cmf = None
                # 3. hand over (ids and loads only)
                for lst in comm.alltoall([out.get(r, []) for r in range(size)]):
                    for gid, v in lst:
                        hold[gid] = v
                rl = comm.allgather(sum(v[0] for v in hold.values()))
                imb = max(rl) / mean if mean > 0 else 1.0
                history.append(round(imb, 4))
                if imb < best_imb - 1e-12:
                    best_imb, best_hold, best_at = imb, dict(hold), (trial, it)
        # migrate from origin to the best iteration's holder
        msgs = [[] for _ in range(size)]
        for gid, (_, origin) in best_hold.items():
            msgs[origin].append((gid, rank))
        where = {}
        for lst in comm.alltoall(msgs):
            for gid, holder in lst:
                where[gid] = holder
        self.details = {
            "best_imbalance": best_imb,
            "best_trial_iteration": best_at,
            "imbalance_per_iteration": history,
            "rounds": int(rounds),
        }
        return np.array([where.get(int(g), rank) for g in ids.tolist()], dtype=np.int64)
