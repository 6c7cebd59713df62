"""A 2-D particle-in-cell particle move, three ways from one code base (after the EMPIRE/DARMA
study): bulk-synchronous MPI, pilotfish.amt without load balancing, pilotfish.amt with a
load-balancing strategy.

Domain: the periodic unit square, cut into bx x by mesh blocks; `factor` blocks per rank
(overdecomposition). Particles: a dense blob (`--blob` of them, Gaussian) held by a harmonic
trap whose centre drifts along y, plus a uniform, fast background. The blob starts in the left
half of the domain, which the static block decomposition gives to rank 0: a strongly
non-uniform load that shifts over time (blocks gain and lose the blob as it drifts).

One iteration = push + move:
  push   real compute on each block's particles (numpy): `--sub` sub-cycles of a field gather
         (trap force + a wave field, trigonometric) and a leapfrog update; it yields each
         particle's displacement for the step
  move   particles travel along their displacement through the blocks; a particle that reaches a
         block face goes to the neighbour block with the rest of its displacement, which
         continues it (fast particles cross several blocks: CFL > 1).
  MPI    micro-iterations: every rank tracks what it holds, exchanges the particles that left
         (alltoall), then an Allreduce of the number of particles sent decides whether another
         micro-iteration is needed -- the bulk-synchronous pattern of EMPIRE's MPI move.
  amt    each block is an amt.Element; arriving particles are an active message
         (`receive(ids, data)`, numpy arrays out-of-band) whose handler tracks them and sends
         on whatever leaves; `with amt.epoch():` ends the move by termination detection.
         amt + LB: every iteration closes a phase (handler times per block), every `--lb-every`
         iterations `amt.rebalance(strategy)` migrates blocks (with their particles).
         `--load counts`: the blocks report a particle-count cost model as their load and
         the runtime measures nothing -- noise-free loads, to tell a balancer's decisions
         apart from the machine's noise.

    mpiexec -n 2 python examples/pic/pic.py --versions mpi,amt,amt+greedy --factors 1,8
    mpiexec -n 2 python examples/pic/pic.py --check       # conservation checks, small problem

Per-particle arithmetic is elementwise and identical in every version, so the versions give
the same particles at the same places (up to the last bits of vectorised transcendental
functions) and particle ids are conserved exactly: --check verifies both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

try:
    from pilotfish import amt
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from pilotfish import amt

from pilotfish.amt._location import block_bounds

COLS = 7
X, Y, VX, VY, Q, DX, DY = range(COLS)
TWO_PI = 2.0 * math.pi


@dataclass
class Params:
    particles: int = 200_000
    blob: float = 0.99          # fraction of particles in the trapped blob
    sigma: float = 0.07         # blob width
    cx: float = 0.25            # trap centre x (left half: rank 0's side of the domain)
    cy: float = 0.30            # trap centre y at t = 0
    drift: float = 0.012        # trap centre drift along y per unit time
    k: float = 0.1              # trap stiffness (period ~ 20 steps)
    vth: float = 0.02           # blob thermal speed
    vbg: float = 0.15           # background speed (CFL > 1 on fine grids)
    eps: float = 0.002          # wave field amplitude
    sub: int = 8                # push sub-cycles per step (the compute knob)
    dt: float = 1.0
    seed: int = 2019

    def centre(self, t: float) -> tuple[float, float]:
        return self.cx, (self.cy + self.drift * t) % 1.0


def grid_dims(nblocks: int) -> tuple[int, int]:
    """bx x by = nblocks, as square as powers of two allow (bx >= by)."""
    bx = 2 ** math.ceil(math.log2(nblocks) / 2) if nblocks > 1 else 1
    while nblocks % bx:
        bx //= 2
    return bx, nblocks // bx


def initial_particles(p: Params) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(p.seed)
    n = p.particles
    nb = int(round(n * p.blob))
    d = np.zeros((n, COLS))
    cx, cy = p.centre(0.0)
    d[:nb, X] = (cx + rng.normal(0, p.sigma, nb)) % 1.0
    d[:nb, Y] = (cy + rng.normal(0, p.sigma, nb)) % 1.0
    d[:nb, VX] = rng.normal(0, p.vth, nb)
    d[:nb, VY] = rng.normal(0, p.vth, nb) + p.drift
    d[:nb, Q] = 1.0
    d[nb:, X] = rng.random(n - nb)
    d[nb:, Y] = rng.random(n - nb)
    ang = rng.random(n - nb) * TWO_PI
    d[nb:, VX] = p.vbg * np.cos(ang)
    d[nb:, VY] = p.vbg * np.sin(ang)
    return np.arange(n, dtype=np.int64), d


class BlockState:
    """One mesh block's particles and the push/track kernels (shared by all versions)."""

    def __init__(self, ix: int, iy: int, bx: int, by: int, p: Params):
        self.ix, self.iy, self.bx, self.by, self.p = ix, iy, bx, by, p
        self.x0, self.x1 = ix / bx, (ix + 1) / bx
        self.y0, self.y1 = iy / by, (iy + 1) / by
        self.ids = np.zeros(0, dtype=np.int64)
        self.data = np.zeros((0, COLS))
        self.settled_ids: list[np.ndarray] = []
        self.settled: list[np.ndarray] = []

    def load(self, ids: np.ndarray, data: np.ndarray) -> None:
        ix = np.minimum((data[:, X] * self.bx).astype(np.int64), self.bx - 1)
        iy = np.minimum((data[:, Y] * self.by).astype(np.int64), self.by - 1)
        mine = (ix == self.ix) & (iy == self.iy)
        self.settled_ids = [ids[mine]]
        self.settled = [data[mine].copy()]

    def count(self) -> int:
        return sum(len(a) for a in self.settled_ids)

    def begin_step(self) -> None:
        self.ids = np.concatenate(self.settled_ids) if self.settled_ids else self.ids[:0]
        self.data = np.concatenate(self.settled) if self.settled else self.data[:0]
        self.settled_ids, self.settled = [], []

    def push(self, t: float) -> None:
        """The compute: sub-cycled field gather + leapfrog; leaves the step's displacement in
        DX, DY (positions are updated by the move)."""
        d = self.data
        if not len(d):
            return
        p = self.p
        x, y = d[:, X].copy(), d[:, Y].copy()
        vx, vy, q = d[:, VX].copy(), d[:, VY].copy(), d[:, Q]
        h = p.dt / p.sub
        kq = -p.k * q
        for s in range(p.sub):
            ts = t + s * h
            cx, cy = p.centre(ts)
            rx = x - cx
            rx -= np.round(rx)
            ry = y - cy
            ry -= np.round(ry)
            ax = kq * rx + p.eps * np.sin(TWO_PI * (3.0 * y + 0.05 * ts)) * np.cos(TWO_PI * 2.0 * x)
            ay = kq * ry + p.eps * np.cos(TWO_PI * (3.0 * x - 0.05 * ts)) * np.sin(TWO_PI * 2.0 * y)
            vx += h * ax
            vy += h * ay
            x += h * vx
            y += h * vy
        d[:, VX] = vx
        d[:, VY] = vy
        d[:, DX] = x - d[:, X]
        d[:, DY] = y - d[:, Y]

    def neighbour(self, dx: int, dy: int) -> tuple[int, int]:
        return (self.ix + dx) % self.bx, (self.iy + dy) % self.by

    def track(self, ids: np.ndarray, d: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray,
                                                                  np.ndarray]]:
        """Move particles through this block; keep those that stop here, return the rest
        grouped by the neighbour they enter: [(block, ids, data)]."""
        if not len(d):
            return []
        x, y, dx, dy = d[:, X], d[:, Y], d[:, DX], d[:, DY]
        with np.errstate(divide="ignore", invalid="ignore"):
            tx = np.where(dx > 0, (self.x1 - x) / dx, np.where(dx < 0, (self.x0 - x) / dx, np.inf))
            ty = np.where(dy > 0, (self.y1 - y) / dy, np.where(dy < 0, (self.y0 - y) / dy, np.inf))
        t = np.maximum(np.minimum(tx, ty), 0.0)
        stay = t >= 1.0
        if stay.any():
            s = d[stay]
            s[:, X] = np.clip(s[:, X] + s[:, DX], self.x0, self.x1)
            s[:, Y] = np.clip(s[:, Y] + s[:, DY], self.y0, self.y1)
            s[:, DX] = 0.0
            s[:, DY] = 0.0
            self.settled.append(s)
            self.settled_ids.append(ids[stay])
        go = ~stay
        if not go.any():
            return []
        g = d[go]
        gi = ids[go]
        tg = t[go]
        xfirst = tx[go] <= ty[go]
        g[:, X] += tg * g[:, DX]
        g[:, Y] += tg * g[:, DY]
        g[:, DX] *= 1.0 - tg
        g[:, DY] *= 1.0 - tg
        out = []
        for mask, face, axis, lo, hi, step in (
                (xfirst & (g[:, DX] > 0), self.x1, X, self.y0, self.y1, (1, 0)),
                (xfirst & (g[:, DX] <= 0), self.x0, X, self.y0, self.y1, (-1, 0)),
                (~xfirst & (g[:, DY] > 0), self.y1, Y, self.x0, self.x1, (0, 1)),
                (~xfirst & (g[:, DY] <= 0), self.y0, Y, self.x0, self.x1, (0, -1))):
            if not mask.any():
                continue
            m = g[mask]
            other = Y if axis == X else X
            m[:, axis] = face
            if step[axis == Y] == 1 and face == 1.0:
                m[:, axis] = 0.0                      # periodic wrap
            elif step[axis == Y] == -1 and face == 0.0:
                m[:, axis] = 1.0
            m[:, other] = np.clip(m[:, other], lo, hi)
            out.append((self.neighbour(*step), gi[mask], m))
        return out


# -- amt version ------------------------------------------------------------------------------

# `--load counts`: the blocks report their work as a cost model in particle-push units instead
# of the runtime timing their handlers (amt.configure(measure=False) + Element.add_load). The
# loads are then free of machine noise, which tells a balancer's decisions apart from the
# noise of executing them. Weights measured here (8 sub-cycles): push + track ~0.5 us per
# particle; a track of arrivals ~0.18 us per particle + ~50 us per call.
ARRIVAL_COST = 0.35      # per arriving particle, in units of one particle's push + track
CALL_COST = 100.0        # per track of arrivals (numpy call overhead)


class PicBlock(amt.Element):
    count_load = False   # set by --load counts

    def __init__(self, bx: int, by: int, p: Params):
        self.s = BlockState(self.index[0], self.index[1], bx, by, p)
        self.inbox: list[tuple[np.ndarray, np.ndarray]] = []

    def step(self, t: float):
        s = self.s
        s.begin_step()
        s.push(t)
        self._send(s.track(s.ids, s.data))
        if self.count_load:
            self.add_load(len(s.ids))

    def receive(self, ids, data):
        # Arrivals are tracked together: the first one queues a `track_inbox` message to this
        # block (behind whatever is queued already), later ones join it. One vectorised track
        # per burst instead of one per neighbour and hop -- the same grouping the MPI
        # version gets per micro-iteration.
        if not self.inbox:
            self.collection[self.index].track_inbox()
        self.inbox.append((ids, data))

    def track_inbox(self):
        box, self.inbox = self.inbox, []
        ids, data = _joined(box)
        self._send(self.s.track(ids, data))
        if self.count_load:
            self.add_load(ARRIVAL_COST * len(ids) + CALL_COST)

    def _send(self, out):
        coll = self.collection
        for nbr, ids, data in out:
            coll[nbr].receive(ids, data)


# -- the driver -------------------------------------------------------------------------------

def _joined(parts):
    """[(ids, data), ...] as one (ids, data)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _group(inbox):
    """Arrivals per block, concatenated: one track call per block and micro-iteration."""
    by_block: dict = {}
    for blk, i, d in inbox:
        by_block.setdefault(blk, []).append((i, d))
    return {blk: _joined(parts) for blk, parts in by_block.items()}


def _owner_table(bx, by, size):
    bounds = block_bounds(bx * by, size)
    return {(f // by, f % by): r for r in range(size) for f in range(bounds[r], bounds[r + 1])}


class MpiVersion:
    """Bulk-synchronous: static blocks, alltoall exchange + Allreduce per micro-iteration."""

    def __init__(self, factor, p, ids, data):
        self.name, self.factor, self.strategy = "mpi", factor, None
        self.MPI = amt.mpi()
        self.comm = self.MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        bx, by = grid_dims(factor * self.size)
        self.grid = (bx, by)
        self.owner = _owner_table(bx, by, self.size)
        self.blocks = {b: BlockState(b[0], b[1], bx, by, p)
                       for b, r in self.owner.items() if r == self.rank}
        for b in self.blocks.values():
            b.load(ids, data)
        self.times, self.imb, self.micro, self.lb, self.lb_s = [], [], [], [], []

    def move(self, it):
        comm, size, rank, owner, blocks = self.comm, self.size, self.rank, self.owner, self.blocks
        comm.Barrier()
        t0 = time.perf_counter()
        pending = []
        for b in blocks.values():
            b.begin_step()
            b.push(float(it))
            pending += b.track(b.ids, b.data)
        busy = time.perf_counter() - t0
        n_micro = 0
        while comm.allreduce(sum(len(i) for _, i, _ in pending)):    # EMPIRE's all-reduce
            n_micro += 1
            sends = [[] for _ in range(size)]
            inbox = []
            for blk, i, d in pending:
                r = owner[blk]
                (inbox if r == rank else sends[r]).append((blk, i, d))
            for lst in comm.alltoall(sends):
                inbox += lst
            c0 = time.perf_counter()
            pending = []
            for blk, (i, d) in _group(inbox).items():
                pending += blocks[blk].track(i, d)
            busy += time.perf_counter() - c0
        comm.Barrier()
        self.times.append(time.perf_counter() - t0)
        self.imb.append(amt.imbalance(comm.allgather(busy)))
        self.micro.append(n_micro)

    def after_phase(self, ph, it, iters):
        pass

    def holders(self):
        return list(self.blocks.values())

    def count(self):
        return self.comm.allreduce(sum(b.count() for b in self.blocks.values()))

    def close(self):
        pass


class AmtVersion:
    """Overdecomposed amt collection; the move ends by termination detection; optional LB."""

    def __init__(self, name, factor, p, ids, data, model="last", lb_every=5):
        self.name, self.factor = name, factor
        self.strategy = name.split("+", 1)[1] if "+" in name else None
        self.model, self.lb_every = model, lb_every
        self.comm = amt.mpi().COMM_WORLD
        bx, by = grid_dims(factor * amt.size())
        self.grid = (bx, by)
        self.coll = amt.Collection(PicBlock, (bx, by), args=(bx, by, p),
                                   name=f"pic-{name}-{factor}")
        for e in self.coll.local_elements():
            e.s.load(ids, data)
        self.times, self.imb, self.micro, self.lb, self.lb_s = [], [], [], [], []

    def move(self, it):
        coll, comm = self.coll, self.comm
        comm.Barrier()
        t0 = time.perf_counter()
        with amt.epoch():
            for i in coll.local_indices():
                coll[i].step(float(it))
        comm.Barrier()
        self.times.append(time.perf_counter() - t0)

    def after_phase(self, ph, it, iters):
        self.imb.append(ph.imbalance_of(self.coll.name))
        if self.strategy and (it == 0 or (it + 1) % self.lb_every == 0) and it < iters - 1:
            self.comm.Barrier()
            t1 = time.perf_counter()
            st = amt.rebalance(strategy=self.strategy, model=self.model,
                               collections=[self.coll])
            self.lb_s.append(time.perf_counter() - t1)
            self.lb.append({"iteration": it, "before": st.imbalance_before,
                            "after": st.imbalance_after, "migrations": st.migrations,
                            "bytes": st.migrated_bytes, "strategy_s": st.strategy_seconds})

    def holders(self):
        return [e.s for e in self.coll.local_elements()]

    def count(self):
        return self.comm.allreduce(sum(e.s.count() for e in self.coll.local_elements()))

    def close(self):
        self.coll.destroy()


def run_versions(names, factor: int, p: Params, iters: int, lb_every: int = 5,
                 model: str = "last", check: bool = False) -> list[dict]:
    """All versions side by side: each iteration runs every version's move in turn (order
    alternating), so machine noise hits them alike; then one amt phase closes, and versions
    with a strategy rebalance their own collection."""
    ids, data = initial_particles(p)
    vs = [MpiVersion(factor, p, ids, data) if n == "mpi" else
          AmtVersion(n, factor, p, ids, data, model, lb_every) for n in names]
    amt.phase()
    counts = {v.name: [] for v in vs}
    for it in range(iters):
        for v in (vs if it % 2 == 0 else vs[::-1]):
            v.move(it)
        ph = amt.phase()
        for v in vs:
            v.after_phase(ph, it, iters)
            if check:
                counts[v.name].append(v.count())
    comm = amt.mpi().COMM_WORLD
    out = []
    for v in vs:
        res = {"version": v.name, "factor": factor, "blocks": list(v.grid),
               "ranks": comm.Get_size(), "iter_s": v.times, "imbalance": v.imb,
               "lb_s": v.lb_s, "lb": v.lb, "counts": counts[v.name], "micro": v.micro}
        if check:
            res.update(_final_state(comm, v.holders(), p.particles))
        v.close()
        out.append(res)
    return out


def _final_state(comm, holders, n) -> dict:
    ids = [i for h in holders for i in h.settled_ids]
    dat = [d for h in holders for d in h.settled]
    ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    dat = np.concatenate(dat)[:, [X, Y, VX, VY]] if dat else np.zeros((0, 4))
    parts = comm.gather((ids, dat), root=0)
    if comm.Get_rank() != 0:
        return {}
    all_ids = np.concatenate([a for a, _ in parts])
    all_dat = np.concatenate([b for _, b in parts])
    order = np.argsort(all_ids, kind="stable")
    all_ids, all_dat = all_ids[order], all_dat[order]
    return {"ids_exact": bool(len(all_ids) == n and (all_ids == np.arange(n)).all()),
            "state_sha": hashlib.sha256(np.round(all_dat, 9).tobytes()).hexdigest()[:16],
            "state": all_dat}


def summarise(res: dict, warmup: int) -> dict:
    it = res["iter_s"][warmup:] or res["iter_s"]
    im = res["imbalance"][warmup:] or res["imbalance"]
    total = sum(res["iter_s"][warmup:]) + sum(res["lb_s"][1:])
    n = max(1, len(res["iter_s"][warmup:]))
    after = [res["imbalance"][x["iteration"] + 1] for x in res["lb"]
             if x["iteration"] + 1 < len(res["imbalance"])]
    return {"version": res["version"], "factor": res["factor"],
            "post_lb_imbalance": float(np.mean(after)) if after else None,
            "median_iter_s": float(np.median(it)), "mean_iter_s": float(np.mean(it)),
            "with_lb_iter_s": total / n, "mean_imbalance": float(np.mean(im)),
            "max_imbalance": float(np.max(im)), "lb_calls": len(res["lb_s"]),
            "lb_mean_s": float(np.mean(res["lb_s"])) if res["lb_s"] else 0.0,
            "lb_after": [round(x["after"], 3) for x in res["lb"]],
            "migrations": sum(x["migrations"] for x in res["lb"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default="mpi,amt,amt+greedy,amt+greedy_refine,"
                    "amt+hierarchical,amt+tempered")
    ap.add_argument("--factors", default="8", help="blocks per rank, e.g. 1,2,4,8,16")
    ap.add_argument("--particles", type=int, default=Params.particles)
    ap.add_argument("--sub", type=int, default=Params.sub)
    ap.add_argument("--blob", type=float, default=Params.blob)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lb-every", type=int, default=5)
    ap.add_argument("--model", default="last")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="what amt measures as a block's load (amt.configure(clock=))")
    ap.add_argument("--load", default="measured", choices=("measured", "counts"),
                    help="what LB balances: handler times the runtime measures, or a particle "
                    "count model the blocks report (noise-free; imbalances then in its units)")
    ap.add_argument("--idle", default="spin", choices=("spin", "sleep"),
                    help="amt's idle policy; 'spin' waits like MPI does (fair comparison)")
    ap.add_argument("--check", action="store_true", help="small problem, conservation checks")
    ap.add_argument("--json", help="write all results (rank 0) to this file")
    a = ap.parse_args(argv)
    if a.check:
        a.particles, a.iters, a.sub, a.lb_every = min(a.particles, 20_000), min(a.iters, 8), 1, 2
    p = Params(particles=a.particles, sub=a.sub, blob=a.blob)
    amt.configure(clock=a.clock, idle=a.idle, measure=a.load == "measured")
    PicBlock.count_load = a.load == "counts"
    versions = a.versions.split(",")
    factors = [int(f) for f in a.factors.split(",")]
    rank = amt.rank()
    out = []
    for factor in factors:
        for res in run_versions(versions, factor, p, a.iters, a.lb_every, a.model, a.check):
            if rank != 0:
                continue
            s = summarise(res, a.warmup)
            line = (f"{res['version']:22s} f={factor:<3d} iter {s['median_iter_s'] * 1e3:8.1f} ms"
                    f" (+LB {s['with_lb_iter_s'] * 1e3:7.1f}) imbalance "
                    f"{s['mean_imbalance']:.2f}")
            if a.check:
                ok = all(c == p.particles for c in res["counts"]) and res["ids_exact"]
                line += f" conserved={ok} sha={res['state_sha']}"
                res["conserved"] = ok
            print(line, flush=True)
            out.append({"summary": s, **{k: v for k, v in res.items() if k != "state"},
                        "params": asdict(p)})
            if a.check:
                out[-1]["state_max"] = res["state"]
    if rank == 0 and a.check:
        ref = out[0]["state_max"]
        worst = max(float(np.abs(o["state_max"] - ref).max()) for o in out)
        ok = all(o["conserved"] for o in out)
        print(f"CHECK conserved={ok} max_state_difference={worst:.3g}", flush=True)
        for o in out:
            o.pop("state_max")
        if not ok or worst > 1e-6:
            raise SystemExit(f"conservation check failed: conserved={ok} diff={worst}")
    if rank == 0 and a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    amt.run(main)
