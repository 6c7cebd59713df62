"""A root's routing (root.py): which sub-agent takes which tasks, by counts alone.

The root never places a task. It knows, per sub-agent (a Share): its partition's nodes and
shape, and the cores of the tasks it routed there that have not ended (`load`: routed minus
finals, what the sub-agents' updates say). A Submit batch goes whole to the share with the
most free cores when the batch fits there (the frame is sent on as it came: nothing
re-encoded); a larger batch is cut into a few contiguous slices that bring the shares it goes
to to the same load per core (water-filling), so a burst spreads over the pilot at once.
Tasks of a shape some partitions cannot hold go among those that can; a task no live
partition can hold is refused with why (a task never spans partitions: the client refuses one
that fits no partition at submit, the root the one whose only partitions' sub-agents died).

Function calls: a callable travels once per pilot (its first call carries it, later ones only
its digest, fn_ref). A sub-agent that gets a later call of a callable it never saw gets the
callable with it: the root keeps each callable it has seen.

`live` holds each unfinished task the root routed: its share, its spec (to route it again
when its sub-agent dies); `started` those seen EXECUTING.
"""

from __future__ import annotations

import msgspec

from ..states import EXECUTING, FINAL
from .._wire import TaskSpec
from .._shapes import misfit


class Share:
    """One sub-agent as its root routes to it."""

    __slots__ = ("index", "names", "shape", "cores", "load", "alive", "why", "fns", "tasks")

    def __init__(self, index: int, nodes: list) -> None:
        self.index = index
        self.names = [n.name for n in nodes]
        self.shape = [(n.cores, n.gpus, n.mem) for n in nodes]
        self.cores = max(1, sum(n.cores for n in nodes))
        self.load = 0  # cores of its routed tasks that have not ended
        self.alive = True
        self.why: str | None = None  # why it is gone
        self.fns: set[bytes] = set()  # the callables it was sent
        self.tasks = 0  # its unfinished tasks

    @property
    def label(self) -> str:
        """'sub-agent p1 (n3, n4)': how reasons name it."""
        names = ", ".join(self.names[:4]) + (", ..." if len(self.names) > 4 else "")
        return f"sub-agent p{self.index} ({names})"


def cores_of(spec: TaskSpec) -> int:
    return spec.ranks * spec.cores_per_rank


class Routing:
    def __init__(self, shares: list[Share]) -> None:
        self.shares = shares
        # uid -> (its share's index, its spec): tuples of no tracked object, which the
        # garbage collector stops looking at (a million queued tasks cost it nothing)
        self.live: dict[str, tuple[int, TaskSpec]] = {}
        self.started: set[str] = set()  # live tasks seen EXECUTING
        self.fn_bodies: dict[bytes, bytes] = {}
        self._fit: dict[tuple[int, int, int, int], tuple[Share, ...]] = {}

    # -- in ------------------------------------------------------------------------------------
    def route(
        self, specs: list[TaskSpec]
    ) -> tuple[list[tuple[Share, list[TaskSpec]]], list[tuple[str, str]], bool]:
        """([(share, its slice)], [(uid, why refused)], whole): whole when the batch goes
        as it came -- one slice, every task, nothing added -- so its frame can be sent on."""
        if len(specs) == 1:  # one task per frame: the hot path, kept short
            spec = specs[0]
            if spec.uid not in self.live:
                key = (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)
                fit = self._fit.get(key)
                if fit is None:
                    fit = self._fits(key)
                if fit:
                    one = [(self._freest(fit), specs)]
                    added = spec.fn_ref is not None and self._callables(one)
                    self._count(one)
                    return one, [], not added
        groups: dict[tuple[Share, ...], list[TaskSpec]] = {}
        refused: list[tuple[str, str]] = []
        dups: dict[Share, list[TaskSpec]] = {}
        live, fit_memo, shares = self.live, self._fit, self.shares
        for spec in specs:
            held = live.get(spec.uid)
            if held is not None:  # its sub-agent fails it, as one agent does
                dups.setdefault(shares[held[0]], []).append(spec)
                continue
            key = (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank)
            fit = fit_memo.get(key)
            if fit is None:
                fit = self._fits(key)
            if not fit:
                refused.append((spec.uid, self._why_not(key)))
                continue
            group = groups.get(fit)
            if group is None:
                groups[fit] = [spec]
            else:
                group.append(spec)
        out: list[tuple[Share, list[TaskSpec]]] = []
        for fit, group in groups.items():
            out += self._spread(group, fit)
        for share, ts in dups.items():
            out.append((share, ts))
        added = self._callables(out)
        whole = len(out) == 1 and not refused and not added and len(out[0][1]) == len(specs)
        self._count(out)
        return out, refused, whole

    def _fits(self, key: tuple[int, int, int, int]) -> tuple[Share, ...]:
        fit = self._fit[key] = tuple(
            s for s in self.shares if s.alive and misfit(*key, s.shape) is None
        )
        return fit

    @staticmethod
    def _freest(fit: tuple[Share, ...]) -> Share:
        """The share with the most free cores (then the least load per core, then first)."""
        best = fit[0]
        free = best.cores - best.load
        for s in fit[1:]:
            f = s.cores - s.load
            if f > free or (f == free and s.load * best.cores < best.load * s.cores):
                best, free = s, f
        return best

    def _count(self, out: list[tuple[Share, list[TaskSpec]]]) -> None:
        live = self.live
        for share, ts in out:
            cores = n = 0
            i = share.index
            for spec in ts:
                if spec.uid not in live:
                    live[spec.uid] = (i, spec)
                    cores += spec.ranks * spec.cores_per_rank
                    n += 1
            share.load += cores
            share.tasks += n

    def _spread(self, group: list[TaskSpec], fit: tuple[Share, ...]):
        total = sum(cores_of(s) for s in group)
        best = self._freest(fit)
        if len(fit) == 1 or best.cores - best.load >= total or len(group) == 1:
            return [(best, group)]
        # water-filling: the level L (load per core) where sum(max(0, L*c - load)) = total
        by_ratio = sorted(fit, key=lambda s: s.load / s.cores)
        level, cores_in, load_in = 0.0, 0, 0
        for i, s in enumerate(by_ratio):
            cores_in += s.cores
            load_in += s.load
            level = (total + load_in) / cores_in
            nxt = by_ratio[i + 1].load / by_ratio[i + 1].cores if i + 1 < len(by_ratio) else None
            if nxt is None or level <= nxt:
                break
        out, k = [], 0
        taking = [s for s in by_ratio if level * s.cores - s.load > 0]
        for j, s in enumerate(taking):
            want = level * s.cores - s.load
            start, got = k, 0
            last = j == len(taking) - 1
            while k < len(group) and (last or got < want):
                got += cores_of(group[k])
                k += 1
            if k > start:
                out.append((s, group[start:k]))
        return out

    def _callables(self, out: list[tuple[Share, list[TaskSpec]]]) -> bool:
        """Give each sub-agent the callables of its calls it was never sent; True if a
        slice was changed for that."""
        added = False
        bodies = self.fn_bodies
        for share, ts in out:
            for i, spec in enumerate(ts):
                ref = spec.fn_ref
                if ref is None:
                    continue
                if spec.function is not None:
                    bodies.setdefault(ref, spec.function)
                    share.fns.add(ref)
                elif ref not in share.fns and ref in bodies:
                    ts[i] = msgspec.structs.replace(spec, function=bodies[ref])
                    share.fns.add(ref)
                    added = True
        return added

    def _why_not(self, key: tuple[int, int, int, int]) -> str:
        why = None
        for s in self.shares:
            problem = misfit(*key, s.shape)
            if problem is None and not s.alive:
                return f"the only partitions that hold it lost their sub-agent: {s.label}: {s.why}"
            why = why or problem
        field, text = why or ("ranks", "no partition holds it")
        return (
            f"{field}: {text.replace('the pilot holds', 'a partition holds')} -- no partition "
            f"of the pilot holds it (a task never spans partitions)"
        )

    # -- out -----------------------------------------------------------------------------------
    def seen(self, uid: str, state: str) -> None:
        """A sub-agent's update: a final ends the task's count; EXECUTING marks it started."""
        if state in FINAL:
            held = self.live.pop(uid, None)
            if held is not None:
                share = self.shares[held[0]]
                spec = held[1]
                share.load -= spec.ranks * spec.cores_per_rank
                share.tasks -= 1
                self.started.discard(uid)
        elif state == EXECUTING and uid in self.live:
            self.started.add(uid)

    def owner(self, uid: str) -> Share | None:
        held = self.live.get(uid)
        return self.shares[held[0]] if held is not None else None

    def lost(self, share: Share, why: str) -> list[tuple[TaskSpec, bool]]:
        """The share's sub-agent is gone: nothing more goes there; its unfinished tasks
        [(spec, seen executing)], no longer counted (the caller ends or re-routes them)."""
        share.alive = False
        share.why = why
        self._fit.clear()
        i = share.index
        out = [(h[1], uid in self.started) for uid, h in self.live.items() if h[0] == i]
        for spec, _ in out:
            del self.live[spec.uid]
            self.started.discard(spec.uid)
        share.load = share.tasks = 0
        return out
