"""The runtime's messages: their kinds, the global ids they name, and how an element's state
travels (pickle protocol 5, large buffers out-of-band).

Message kinds (plain tuples, first two fields: kind, epoch):
  INVOKE  (0, ep, cid, flat, method, args, kwargs, origin, hops)  run a handler
  BCAST   (1, ep, cid, method, args, kwargs)        expands on each rank to INVOKEs of the
                                                    elements it is home of (routed, so
                                                    migrated elements get it once)
  ELEMENT (2, ep, cid, flat, data, buffers, meta)   a migrating element (pickled state)
  LOC     (3, ep, cid, flat, rank, version)         location update (to home) or hint
  MIGRATE (4, ep, cid, flat, dest, origin, hops)    ask the element's host to migrate it
"""

from __future__ import annotations

import pickle

INVOKE, BCAST, ELEMENT, LOC, MIGRATE = 0, 1, 2, 3, 4
GID_SHIFT = 40  # global object id = cid << GID_SHIFT | flat
MAX_HOPS = 10_000  # a routing loop would be a bug: reported, never silent


def serialise(el) -> tuple[bytes, list, int]:
    """Pickle an element with protocol 5; large buffers (numpy arrays) stay out-of-band."""
    bufs: list = []
    data = pickle.dumps(el, protocol=5, buffer_callback=bufs.append)
    nbytes = len(data) + sum(b.raw().nbytes for b in bufs)
    return data, bufs, nbytes


def deserialise(data, bufs):
    bufs = [b if isinstance(b, bytearray) else bytearray(b) for b in bufs]
    return pickle.loads(data, buffers=bufs)
