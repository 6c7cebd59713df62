"""RP's resource model for application-side scheduling: rp.RO, rp.RankRequirements,
rp.Slot, rp.Node, rp.NodeList (pilot.nodelist), ported from RADICAL-Pilot's
resource_config.py (MIT licence, tests/rp/tutorials/LICENSE.radical.pilot) onto plain
dicts with attribute access, same fields, defaults and algorithms (first fit over the nodes,
round robin from where the last search stopped; a failed request is remembered until slots
are released).

A Slot found here is the application's own bookkeeping, as in RP: pilotfish does not place a
task on the cores a Slot names (TaskDescription.slots is ignored, see docs/rp.md).
"""

from __future__ import annotations

import threading
from typing import Any

FREE = 0.0
BUSY = 1.0
DOWN = None


class _Typed(dict):
    """A dict with attribute access and per-class defaults (lists copied)."""

    _defaults: dict[str, Any] = {}

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        super().__init__()
        for k, v in self._defaults.items():
            self[k] = list(v) if isinstance(v, list) else v
        if from_dict:
            self.update(from_dict)
        if kwargs:
            self.update(kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self[name] = value

    def as_dict(self) -> dict:
        def plain(v):
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v

        return plain(self)


class RO(_Typed):
    """A resource (a core, a GPU) and its occupation (FREE 0.0 .. BUSY 1.0, DOWN None)."""

    _defaults = {"index": 0, "occupation": None}

    def __str__(self) -> str:
        if self.occupation is DOWN:
            return "%d:----" % self.index
        return "%d:%.2f" % (self.index, self.occupation)


ResourceOccupation = RO


class RankRequirements(_Typed):
    """What one rank needs: n_cores, core_occupation, n_gpus, gpu_occupation, lfs, mem."""

    _defaults = {
        "n_cores": 1,
        "core_occupation": BUSY,
        "n_gpus": 0,
        "gpu_occupation": BUSY,
        "lfs": 0,
        "mem": 0,
        "numa": False,
    }
    _KEYS = ("n_cores", "n_gpus", "lfs", "mem", "core_occupation", "gpu_occupation")

    def __str__(self) -> str:
        return "RR(%d:%.2f, %d:%.2f, %d, %d [%s])" % (
            self.n_cores,
            self.core_occupation,
            self.n_gpus,
            self.gpu_occupation,
            self.lfs,
            self.mem,
            "numa" if self.numa else "non-numa",
        )

    # RP's approximate order: 'larger' is more (or more specialised) resources
    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and all(self[k] == other.get(k) for k in self._KEYS)

    # (unhashable: a class that defines __eq__ and no __hash__ gets __hash__ = None)

    def __le__(self, other: RankRequirements) -> bool:
        return all(self[k] <= other[k] for k in self._KEYS)

    __lt__ = __le__

    def __ge__(self, other: RankRequirements) -> bool:
        return all(self[k] >= other[k] for k in self._KEYS)

    __gt__ = __ge__


class Slot(_Typed):
    """Where one rank runs: node_index, node_name, cores and gpus (lists of RO, or of
    indexes: fully occupied), lfs, mem."""

    _defaults = {
        "cores": [],
        "gpus": [],
        "lfs": 0,
        "mem": 0,
        "node_index": 0,
        "node_name": "",
        "version": 1,
    }

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        d = dict(from_dict or kwargs)
        for k in ("cores", "gpus"):
            items = d.get(k)
            if items:
                if isinstance(items[0], int):
                    d[k] = [RO(index=i, occupation=BUSY) for i in items]
                elif not isinstance(items[0], RO):
                    d[k] = [RO(x) for x in items]
        super().__init__(d, **(kwargs if from_dict else {}))


class Node(_Typed):
    """A node's resources: index, name, cores and gpus (lists of RO, or of occupations),
    lfs, mem; find_slot / allocate_slot / deallocate_slot as RP's."""

    _defaults = {"index": 0, "name": "", "cores": [], "gpus": [], "lfs": None, "mem": None}

    def __init__(self, from_dict: dict):
        d = dict(from_dict)
        for k in ("cores", "gpus"):
            items = d.get(k)
            if items and not isinstance(items[0], RO):
                d[k] = [RO(index=i, occupation=o) for i, o in enumerate(items)]
        super().__init__(d)
        self._lock = threading.RLock()

    def _position(self, kind: str, ro: RO) -> int:
        for i, x in enumerate(self[kind]):
            if x.index == ro.index:
                return i
        raise ValueError(f"invalid {kind[:-1]} index {ro.index}")

    def allocate_slot(self, slot: Slot, _check: bool = True) -> None:
        cores, gpus, lfs, mem = slot.cores, slot.gpus, slot.lfs, slot.mem
        with self._lock:
            if _check:
                if self.index != slot.node_index or self.name != slot.node_name:
                    raise ValueError(
                        f"slot of node {slot.node_name!r} ({slot.node_index}), "
                        f"not of {self.name!r} ({self.index})"
                    )
                if cores and isinstance(cores[0], int):
                    cores = [RO(index=c, occupation=BUSY) for c in cores]
                if gpus and isinstance(gpus[0], int):
                    gpus = [RO(index=g, occupation=BUSY) for g in gpus]
                for kind, ros in (("cores", cores), ("gpus", gpus)):
                    for ro in ros:
                        have = self[kind]
                        if (
                            ro.index >= len(have)
                            or have[ro.index].occupation is DOWN
                            or BUSY - have[ro.index].occupation < ro.occupation
                        ):
                            raise ValueError(
                                f"{kind[:-1]} {ro.index} of {self.name!r} "
                                f"cannot take {ro.occupation}"
                            )
                if lfs and (self.lfs or 0) < lfs or mem and (self.mem or 0) < mem:
                    raise ValueError(f"node {self.name!r} has not lfs {lfs} / mem {mem}")
            for ro in cores:
                self.cores[self._position("cores", ro)].occupation += ro.occupation
            for ro in gpus:
                self.gpus[self._position("gpus", ro)].occupation += ro.occupation
            if self.lfs is not None:
                self.lfs -= lfs
            if self.mem is not None:
                self.mem -= mem

    def deallocate_slot(self, slot: Slot) -> None:
        with self._lock:
            for ro in slot.cores:
                self.cores[ro.index].occupation -= ro.occupation
            for ro in slot.gpus:
                self.gpus[ro.index].occupation -= ro.occupation
            if self.lfs is not None:
                self.lfs += slot.lfs
            if self.mem is not None:
                self.mem += slot.mem

    def find_slot(self, rr: RankRequirements) -> Slot | None:
        """A slot for one rank on this node (allocated), or None."""
        with self._lock:
            found: dict[str, list] = {"cores": [], "gpus": []}
            for kind, n, occ in (
                ("cores", rr.n_cores, rr.core_occupation),
                ("gpus", rr.n_gpus, rr.gpu_occupation),
            ):
                if not n:
                    continue
                out = found[kind]
                for ro in self[kind]:
                    if ro.occupation is DOWN:
                        continue
                    if occ <= BUSY - ro.occupation:
                        out.append(RO(index=ro.index, occupation=occ))
                        if len(out) == n:
                            break
                if len(out) < n:
                    return None
            if self.lfs is not None and rr.lfs and self.lfs < rr.lfs:
                return None
            if self.mem is not None and rr.mem and self.mem < rr.mem:
                return None
            slot = Slot(
                cores=found["cores"],
                gpus=found["gpus"],
                lfs=rr.lfs,
                mem=rr.mem,
                node_index=self.index,
                node_name=self.name,
            )
            self.allocate_slot(slot, _check=False)
            return slot


class NodeList(_Typed):
    """rp.NodeList(nodes=[rp.Node, ...]): uniform, cores_per_node, gpus_per_node,
    lfs_per_node, mem_per_node; find_slots(rr, n_slots) / release_slots(slots) as RP's."""

    _defaults = {
        "nodes": [],
        "uniform": True,
        "cores_per_node": None,
        "gpus_per_node": None,
        "lfs_per_node": None,
        "mem_per_node": None,
    }

    def __init__(self, from_dict: dict | None = None, **kwargs: Any) -> None:
        super().__init__(from_dict, **kwargs)
        self._index = 0
        self._failed: tuple | None = None  # (rr, n_slots) of the last failed search
        self._verified = False
        self.verify()

    def verify(self) -> None:
        if not self.nodes:
            return
        n0 = self.nodes[0]
        self.uniform = all(
            n.cores == n0.cores and n.gpus == n0.gpus and n.lfs == n0.lfs and n.mem == n0.mem
            for n in self.nodes[1:]
        )
        u = self.uniform
        self.cores_per_node = len(n0.cores) if u else None
        self.gpus_per_node = len(n0.gpus) if u else None
        self.lfs_per_node = n0.lfs if u else None
        self.mem_per_node = n0.mem if u else None
        self._verified = True

    def _assert_rr(self, rr: RankRequirements, n_slots: int) -> None:
        if not self._verified:
            self.verify()
        if not self.uniform:
            raise RuntimeError("verification unsupported for non-uniform nodes")
        if not rr.n_cores:
            raise ValueError(f"invalid rank requirements: {rr}")
        per = self.cores_per_node / rr.n_cores
        if rr.n_gpus:
            per = min(per, self.gpus_per_node / rr.n_gpus)
        if rr.lfs:
            per = min(per, (self.lfs_per_node or 0) / rr.lfs)
        if rr.mem:
            per = min(per, (self.mem_per_node or 0) / rr.mem)
        if per < 1 or n_slots > len(self.nodes) * per:
            raise ValueError(f"invalid rank requirements: {rr}")

    def find_slots(self, rr: RankRequirements, n_slots: int = 1) -> list[Slot] | None:
        """n_slots slots for ranks of rr (allocated), or None when they are not free."""
        self._assert_rr(rr, n_slots)
        if self._failed and self._failed[0] >= rr and self._failed[1] >= n_slots:
            return None
        slots: list[Slot] = []
        nodes = self.nodes
        stop = self._index
        for i in range(len(nodes)):
            idx = (self._index + i) % len(nodes)
            node = nodes[idx]
            while len(slots) < n_slots:
                slot = node.find_slot(rr)
                if not slot:
                    break
                slots.append(slot)
            if len(slots) == n_slots:
                stop = idx
                break
        if len(slots) != n_slots:
            for slot in slots:
                nodes[slot.node_index].deallocate_slot(slot)
            self._failed = (rr, n_slots)
            return None
        self._index = stop
        return slots

    def release_slots(self, slots: list[Slot]) -> None:
        for slot in slots:
            self.nodes[slot.node_index].deallocate_slot(slot)
        if self._failed and slots:
            self._index = min(s.node_index for s in slots) - 1
        self._failed = None


def nodelist_of(nodes: list) -> NodeList:
    """The NodeList of a pilot's nodes (pilotfish's NodeInfo: name, cores, gpus, mem MiB)."""
    return NodeList(
        nodes=[
            Node(
                {
                    "index": i,
                    "name": n.name,
                    "cores": [RO(index=c, occupation=FREE) for c in range(n.cores)],
                    "gpus": [RO(index=g, occupation=FREE) for g in range(n.gpus)],
                    "lfs": 0,
                    "mem": n.mem,
                }
            )
            for i, n in enumerate(nodes)
        ]
    )
