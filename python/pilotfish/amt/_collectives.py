"""The runtime's collectives, called by the main program on every rank: the bounded-time
check that all ranks entered the same one (sync_check), quiesce, phase, reduce, destroy,
finalize and rebalance (a strategy from lb/ places the elements by their predicted loads; the
leaving ones are serialised first -- all or nothing -- then migrate in one epoch).

Each is a function of the Runtime `rt` (_runtime.py: its methods of the same names call
them; this module does not import it), apart from its scheduler loop, message processing and
epochs, which it uses: each collective first waits for the quiet of epoch 0. Their results
travel on comm_ctl (phase, reduce) and comm_lb (the strategies' own traffic).
"""

from __future__ import annotations

import time

from ._errors import AmtError, CollectiveMismatchError, MigrationError
from ._instrument import HISTORY, LBStats, LoadModel, PhaseStats, imbalance
from ._messages import GID_SHIFT, serialise

COLLECTIVES = ("collection", "phase", "rebalance", "reduce", "finalize", "quiesce", "destroy")


# -- bounded-time collective check ---------------------------------------------------------
def sync_check(rt, what: str, timeout: float | None = None):
    """All ranks must enter the same collective: an Iallgather of (collective, sequence)
    on comm_ctl, served with messages until a deadline. A rank that waits past the deadline
    raises CollectiveMismatchError instead of hanging; ranks that entered different
    collectives all raise it at once, naming who called what."""
    if rt.broken:
        raise CollectiveMismatchError(
            f"amt.{what}(): the runtime is unusable after an "
            f"earlier collective failure: {rt.broken}"
        )
    np = rt.np
    rt.op_seq += 1
    code = COLLECTIVES.index(what)
    send = np.array([code, rt.op_seq], dtype=np.int64)
    recv = np.zeros((rt.size, 2), dtype=np.int64)
    req = rt.comm_ctl.Iallgather(send, recv)
    timeout = rt.sync_timeout if timeout is None else timeout
    if not rt.wait_until(req.Test, time.monotonic() + timeout):
        rt.broken = (
            f"rank {rt.rank} entered amt.{what}() (collective #{rt.op_seq}) "
            f"and the other ranks did not enter it within {timeout:g}s"
        )
        raise CollectiveMismatchError(
            f"amt.{what}() was called on rank {rt.rank} but not on every rank: the "
            f"others did not call it within {timeout:g}s (collectives must be called by "
            "all ranks, in the same order; timeout: amt.configure(sync_timeout=...) or "
            "PILOTFISH_AMT_SYNC_TIMEOUT)"
        )
    if (recv[:, 0] != code).any() or (recv[:, 1] != rt.op_seq).any():
        calls: dict[str, list[int]] = {}
        for r, (c, s) in enumerate(recv.tolist()):
            calls.setdefault(f"amt.{COLLECTIVES[c]}() (collective #{s})", []).append(r)
        desc = "; ".join(f"ranks {rs} called {name}" for name, rs in calls.items())
        rt.broken = f"mismatched collectives: {desc}"
        raise CollectiveMismatchError(f"mismatched collective calls: {desc}")


# -- phases, reductions --------------------------------------------------------------------
def quiesce(rt):
    rt.require_top_level("quiesce")
    rt.sync_check("quiesce")
    rt.wait_epoch(0)


def phase(rt) -> PhaseStats:
    rt.require_top_level("phase")
    rt.sync_check("phase")
    rt.wait_epoch(0)
    local = 0.0
    count = 0
    per_coll: dict[str, float] = {}
    for coll in rt.colls.values():
        load, synth, meta = coll.ledger.load, coll.ledger.synth, coll.ledger.meta
        mine = 0.0
        for flat in coll.ledger.local:
            x = load.get(flat, 0.0) + synth.get(flat, 0.0)
            hist = meta[flat][1]
            hist.append(x)
            if len(hist) > HISTORY:
                del hist[0]
            mine += x
            count += 1
        load.clear()
        synth.clear()
        local += mine
        per_coll[coll.name] = per_coll.get(coll.name, 0.0) + mine
    rows = rt.comm_ctl.allgather((local, per_coll))
    loads = [row[0] for row in rows]
    by_coll = {name: [row[1].get(name, 0.0) for row in rows] for name in per_coll}
    stats = PhaseStats(
        phase=rt.phase_id,
        rank_loads=loads,
        imbalance=imbalance(loads),
        max_load=max(loads),
        mean_load=sum(loads) / len(loads),
        elements=count,
        collections=by_coll,
    )
    rt.phase_id += 1
    return stats


def reduce(rt, coll, value, op):
    rt.require_top_level("reduce")
    rt.sync_check("reduce")
    rt.wait_epoch(0)
    combine = _combiner(op)
    if callable(value):
        local = None
        for el in coll.ledger.local.values():
            v = value(el)
            local = v if local is None else combine(local, v)
    else:
        local = value
    result = None
    for v in rt.comm_ctl.allgather(local):
        if v is not None:
            result = v if result is None else combine(result, v)
    return result


def destroy(rt, coll):
    rt.require_top_level("destroy")
    rt.sync_check("destroy")
    rt.wait_epoch(0)
    rt.colls.pop(coll.cid, None)
    coll.destroyed = True
    coll.ledger.clear()
    coll.loc.where.clear()


def finalize(rt):
    if rt.finalized:
        return
    rt.require_top_level("finalize")
    rt.sync_check("finalize")
    rt.wait_epoch(0)
    rt.wait_until(lambda: not rt.messenger.sends_pending())
    rt.finalized = True


# -- load balancing ------------------------------------------------------------------------
def rebalance(rt, strategy="greedy", model="last", collections=None, **options) -> LBStats:
    from .lb import make_strategy

    rt.require_top_level("rebalance")
    lm = LoadModel(model) if isinstance(model, str) else model
    strat = make_strategy(strategy, **options)
    rt.sync_check("rebalance")
    rt.wait_epoch(0)
    np = rt.np
    comm = rt.comm_lb
    ids, loads = [], []
    chosen = None if collections is None else {c.cid for c in collections}
    for coll in rt.colls.values():
        if not coll.migratable or (chosen is not None and coll.cid not in chosen):
            continue
        base = coll.cid << GID_SHIFT
        meta = coll.ledger.meta
        for flat in coll.ledger.local:
            ids.append(base | flat)
            loads.append(lm.predict(meta[flat][1]))
    ids = np.array(ids, dtype=np.int64)
    loads = np.array(loads, dtype=np.float64)
    homes = np.array(
        [rt.colls[g >> GID_SHIFT].loc.home(g & ((1 << GID_SHIFT) - 1)) for g in ids.tolist()],
        dtype=np.int64,
    )
    # a strategy that fails on some ranks only would leave the others in its collectives:
    # loads are checked here, collectively, before any strategy runs
    bad = np.nonzero(~np.isfinite(loads) | (loads < 0))[0]
    first = None
    if len(bad):
        g = int(ids[bad[0]])
        what = rt.colls[g >> GID_SHIFT].describe(g & ((1 << GID_SHIFT) - 1))
        first = f"rank {rt.rank}: {what} has predicted load {float(loads[bad[0]])!r}"
    firsts = [f for f in comm.allgather(first) if f]
    if firsts:
        raise AmtError(
            f"rebalance: load model {lm.spec!r} predicted a negative or non-finite "
            f"load: {firsts[0]} (loads must be finite and >= 0)"
        )
    comm.Barrier()
    t0 = time.perf_counter()
    dest = strat.run(comm, ids, loads, homes=homes)
    t_strategy = time.perf_counter() - t0
    dest = np.asarray(dest, dtype=np.int64)
    bad = len(dest) != len(ids) or (len(dest) and (dest.min() < 0 or dest.max() >= rt.size))
    if comm.allreduce(int(bool(bad)), op=rt.MPI.SUM):
        raise AmtError(f"load balancer {strat.name!r} returned an invalid placement")
    before = comm.allgather(float(loads.sum()))
    contrib = np.bincount(dest, weights=loads, minlength=rt.size).astype(np.float64)
    after = np.zeros(rt.size)
    comm.Allreduce(contrib, after, op=rt.MPI.SUM)
    # serialise every leaving element first: all or nothing
    t1 = time.perf_counter()
    moving = np.nonzero(dest != rt.rank)[0].tolist()
    prepared, failures, nbytes = [], [], 0
    mask = (1 << GID_SHIFT) - 1
    for k in moving:
        g = int(ids[k])
        coll = rt.colls[g >> GID_SHIFT]
        flat = g & mask
        try:
            data, bufs, size = serialise(coll.ledger.local[flat])
        except Exception as exc:  # noqa: BLE001 -- whatever it holds: the migration fails, named
            failures.append(
                f"rank {rt.rank}: cannot migrate {coll.describe(flat)} to "
                f"rank {int(dest[k])}: state not serialisable: "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        prepared.append((coll, flat, int(dest[k]), data, bufs))
        nbytes += size
    all_failures = [f for fs in comm.allgather(failures) for f in fs]
    if all_failures:
        raise MigrationError(
            f"rebalance({strat.name!r}) moved nothing: "
            f"{len(all_failures)} element(s) cannot be serialised; "
            f"first: {all_failures[0]}"
        )
    ep = rt.new_epoch()
    for coll, flat, d, data, bufs in prepared:
        rt.depart(coll, flat, d, ep, data, bufs)
    rt.wait_epoch(ep)
    t_migrate = time.perf_counter() - t1
    rows = comm.allgather((len(prepared), nbytes, t_strategy, t_migrate))
    totals = (sum(r[0] for r in rows), sum(r[1] for r in rows))
    times = (max(r[2] for r in rows), max(r[3] for r in rows))
    return LBStats(
        strategy=strat.name,
        model=lm.spec,
        imbalance_before=imbalance(before),
        imbalance_after=imbalance(after.tolist()),
        migrations=int(totals[0]),
        migrated_bytes=int(totals[1]),
        strategy_seconds=times[0],
        migrate_seconds=times[1],
        rank_loads_before=before,
        rank_loads_after=after.tolist(),
        details=getattr(strat, "details", {}),
    )


def _combiner(op):
    import operator

    if callable(op):
        return op
    table = {
        "sum": operator.add,
        "+": operator.add,
        "prod": operator.mul,
        "*": operator.mul,
        "max": max,
        "min": min,
    }
    try:
        return table[op]
    except KeyError:
        raise ValueError(
            f"unknown reduction op {op!r}: use 'sum', 'prod', 'max', 'min' or a "
            "function of two values"
        ) from None
