"""Elements, collections and proxies: the user-facing objects."""

from __future__ import annotations

import math
import numbers
import operator
from math import prod

from . import _runtime
from ._errors import AmtError, IndexOutOfRangeError, UnknownHandlerError
from ._location import LocationManager


class Element:
    """Base class of collection elements.

    `self.index` (an int for 1-D collections, a tuple for n-D) is set before `__init__` runs.
    Public methods are handlers: `coll[i].method(*args)` runs `method` on element i wherever it
    lives. An element migrates with its state: pickled (protocol 5; numpy arrays travel
    out-of-band), or through `__getstate__`/`__setstate__` when it defines them.
    """

    index = None
    _amt_cid: int
    _amt_flat: int

    @property
    def collection(self) -> Collection:
        """The collection this element belongs to (to message its neighbours)."""
        return _runtime.get().colls[self._amt_cid]

    @property
    def rank(self) -> int:
        """The rank this element lives on now."""
        return _runtime.get().rank

    def add_load(self, load: float) -> None:
        """Add synthetic load to this element's current phase (see amt.configure(measure=))."""
        coll = self.collection
        if not (isinstance(load, numbers.Real) and math.isfinite(load) and load >= 0):
            raise ValueError(
                f"{coll.describe(self._amt_flat)}.add_load({load!r}): a load must "
                "be a finite number >= 0"
            )
        coll.ledger.synth[self._amt_flat] = coll.ledger.synth.get(self._amt_flat, 0.0) + float(load)

    def migrate(self, rank: int) -> None:
        """Ask the runtime to move this element to `rank` (asynchronously)."""
        self.collection.migrate(self.index, rank)

    # hooks
    def on_migrated_out(self) -> None:
        """Called on the old rank after the element's state was packed (it is then dropped)."""

    def on_migrated_in(self) -> None:
        """Called on the new rank after the element was unpacked."""


class Ledger:
    """What the runtime keeps of one collection on this rank (amt/_runtime.py reads and writes
    it; a program has no use for it): the local elements, and per flat index of each, its
    [version, load history], this phase's measured and synthetic loads, why a lost one was
    lost; and the handlers' last run times."""

    __slots__ = ("local", "meta", "load", "synth", "lost", "span")

    def __init__(self) -> None:
        self.local: dict[int, Element] = {}
        self.meta: dict[int, list] = {}  # flat -> [version, load history]
        self.load: dict[int, float] = {}  # flat -> measured load this phase
        self.synth: dict[int, float] = {}  # flat -> synthetic load this phase
        self.lost: dict[int, str] = {}  # flat -> why (state could not be unpickled)
        # (flat, handler) -> wall seconds of its last run here; (-1, hook) for the migration
        # hooks: whether a handler is short enough to run before pending sends leave
        self.span: dict[tuple, float] = {}

    def clear(self) -> None:
        for d in (self.local, self.meta, self.load, self.synth, self.lost, self.span):
            d.clear()


class ElementProxy:
    """`coll[i]`: attribute access gives a function that sends that handler to element i."""

    __slots__ = ("_coll", "_flat")

    def __init__(self, coll, flat):
        self._coll = coll
        self._flat = flat

    def __getattr__(self, name):
        coll = self._coll
        if coll.destroyed:
            coll._check_alive()
        flat = self._flat
        if not coll._handlers.get(name):
            coll._check_handler(name, flat)
        rt = coll._rt

        def send(*args, **kwargs):
            rt.send_invoke(coll, flat, name, args, kwargs)

        send.__name__ = name
        return send

    def __repr__(self):
        return f"<proxy {self._coll.describe(self._flat)}>"


class Collection:
    """An overdecomposed collection of elements, spread over all ranks.

    Collective: every rank creates the same collections in the same order.
    shape: an int (1-D) or a tuple of ints (n-D). Elements start in an even block
    distribution of their row-major flat index over the ranks.
    """

    def __init__(self, element_class, shape, args=(), kwargs=None, name=None, migratable=True):
        if not (isinstance(element_class, type) and issubclass(element_class, Element)):
            raise TypeError(f"amt.Collection: {element_class!r} is not a subclass of amt.Element")
        self.shape = _normalise_shape(shape)
        self.n = prod(self.shape)
        self._n1 = self.n if len(self.shape) == 1 else 0  # 1-D: an int index is its flat
        self.element_class = element_class
        self.name = name or element_class.__name__
        self.migratable = migratable
        rt = _runtime.get()
        self._rt = rt
        rt.sync_check("collection")
        self.cid = rt.register(self)
        self.loc = LocationManager(rt.rank, rt.size, self.n)
        self.ledger = Ledger()  # (the runtime's bookkeeping of it on this rank)
        self._handlers: dict[str, bool] = {}
        self.destroyed = False
        kwargs = kwargs or {}
        # every local element exists before any __init__ runs, so that an __init__ may message
        # its neighbours (queued, run once construction is over) without any being unknown here
        for flat in self.loc.home_range(rt.rank):
            el = element_class.__new__(element_class)
            el.index = self._unflat(flat)
            el._amt_cid = self.cid
            el._amt_flat = flat
            self.ledger.local[flat] = el
            self.ledger.meta[flat] = [0, []]
        for flat, el in list(self.ledger.local.items()):
            prev = rt.ctx_elem
            rt.ctx_elem = (self, flat)
            try:
                el.__init__(*args, **kwargs)
            finally:
                rt.ctx_elem = prev

    # -- indices -------------------------------------------------------------------------------
    def _flat(self, index) -> int:
        shape = self.shape
        try:
            if len(shape) == 1:
                if isinstance(index, tuple) and len(index) == 1:
                    index = index[0]
                i = operator.index(index)
                if 0 <= i < shape[0]:
                    return i
            else:
                idx = tuple(operator.index(x) for x in index)
                if len(idx) == len(shape) and all(0 <= x < s for x, s in zip(idx, shape)):
                    flat = 0
                    for x, s in zip(idx, shape):
                        flat = flat * s + x
                    return flat
        except TypeError:
            pass
        raise IndexOutOfRangeError(
            f"index {index!r} is outside collection {self.name!r} of "
            f"shape {self.shape if len(shape) > 1 else shape[0]}"
        )

    def adopt(self, flat: int, el: Element, version: int, hist: list, cur: float, syn: float):
        """A migrated element arrives here (the runtime): element `flat` of this collection
        again, with its version, load history and this phase's loads so far."""
        el.index = self._unflat(flat)
        el._amt_cid = self.cid
        el._amt_flat = flat
        ledger = self.ledger
        ledger.local[flat] = el
        ledger.meta[flat] = [version, hist]
        if cur:
            ledger.load[flat] = cur
        if syn:
            ledger.synth[flat] = syn

    def _unflat(self, flat: int):
        if len(self.shape) == 1:
            return flat
        idx = []
        for s in reversed(self.shape):
            idx.append(flat % s)
            flat //= s
        return tuple(reversed(idx))

    def describe(self, flat: int) -> str:
        return f"{self.element_class.__name__}[{self._unflat(flat)!r}] of collection {self.name!r}"

    def _check_handler(self, name: str, flat: int) -> None:
        ok = self._handlers.get(name)
        if ok is None:
            attr = getattr(self.element_class, name, None)
            ok = callable(attr) and not name.startswith("_") and not isinstance(attr, property)
            self._handlers[name] = ok
        if not ok:
            raise UnknownHandlerError(
                f"{self.describe(flat)} has no handler {name!r} "
                f"({self.element_class.__qualname__} defines no public "
                f"method {name!r})"
            )

    # -- messages ------------------------------------------------------------------------------
    def __getitem__(self, index) -> ElementProxy:
        return ElementProxy(self, self._flat(index))  # (a destroyed one fails at the send)

    def _check_alive(self) -> None:
        if self.destroyed:
            raise AmtError(
                f"collection {self.name!r} was destroyed: its elements can no "
                "longer be messaged or migrated"
            )

    def send(self, index, method: str, *args, **kwargs) -> None:
        """coll.send(i, "m", *args) == coll[i].m(*args) (a little faster)."""
        # the hot path of every message: the checks' common outcomes inline
        if self.destroyed:
            self._check_alive()
        if type(index) is int and self._n1 > index >= 0:
            flat = index
        else:
            flat = self._flat(index)
        if not self._handlers.get(method):
            self._check_handler(method, flat)
        self._rt.send_invoke(self, flat, method, args, kwargs)

    def broadcast(self, method: str, *args, **kwargs) -> None:
        """Run `method(*args)` on every element once (call it on one rank)."""
        self._check_alive()
        self._check_handler(method, 0)
        self._rt.send_broadcast(self, method, args, kwargs)

    def reduce(self, value, op="sum"):
        """Collective: combine one value per rank (or `value(element)` for every element when
        `value` is callable) with op ('sum', 'prod', 'max', 'min' or a function of two values);
        every rank gets the result. Waits for all top-level messages first."""
        return self._rt.reduce(self, value, op)

    def migrate(self, index, rank: int) -> None:
        """Move element `index` to `rank`, asynchronously (messages to it are forwarded)."""
        self._check_alive()
        flat = self._flat(index)
        rank = operator.index(rank)
        if not 0 <= rank < self._rt.size:
            raise ValueError(
                f"migrate {self.describe(flat)}: no rank {rank} (size {self._rt.size})"
            )
        if not self.migratable:
            raise AmtError(f"collection {self.name!r} is not migratable")
        self._rt.send_migrate(self, flat, rank)

    # -- local view ----------------------------------------------------------------------------
    def local_indices(self) -> list:
        """Indices of the elements on this rank now (sorted)."""
        return [self._unflat(f) for f in sorted(self.ledger.local)]

    def local_elements(self) -> list:
        return [self.ledger.local[f] for f in sorted(self.ledger.local)]

    def local(self, index) -> Element:
        """The element object if it lives on this rank (KeyError otherwise)."""
        flat = self._flat(index)
        try:
            return self.ledger.local[flat]
        except KeyError:
            raise KeyError(f"{self.describe(flat)} is not on rank {self._rt.rank}") from None

    def is_local(self, index) -> bool:
        return self._flat(index) in self.ledger.local

    def __len__(self) -> int:
        return self.n

    def destroy(self) -> None:
        """Collective: wait for all top-level messages, then drop this collection's elements
        on every rank (it may no longer be messaged; its elements are no longer balanced)."""
        self._rt.destroy(self)

    def __repr__(self) -> str:
        return (
            f"<amt.Collection {self.name!r} shape={self.shape} "
            f"local={len(self.ledger.local)} on rank {self._rt.rank}>"
        )


def _normalise_shape(shape) -> tuple[int, ...]:
    try:
        if isinstance(shape, tuple | list):
            dims = tuple(operator.index(s) for s in shape)
        else:
            dims = (operator.index(shape),)
    except TypeError:
        raise TypeError(
            f"amt.Collection shape must be an int or a tuple of ints, not {shape!r}"
        ) from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"amt.Collection shape must be positive, got {shape!r}")
    return dims
