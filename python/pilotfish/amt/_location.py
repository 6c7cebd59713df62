"""The location manager: where each element of a collection is, as far as this rank knows.

Every element has a *home* rank (its rank in the initial even block distribution). Knowledge
is (rank, version) per element, where version counts the element's migrations; newer
knowledge always replaces older. A rank learns:
- when an element arrives: it is here (and the arrival tells the home rank: message `LOC`);
- when it sends an element away: a *forwarding pointer* to the destination;
- from a hint: when a message needed forwarding, the element's host tells the original
  sender where it now is, so its next messages go straight there.

Routing a message for element e from rank r: deliver it if e is here; else send it to the
best known location, else to e's home. A message that reaches a rank without e follows that
rank's knowledge. This always ends at e: a forwarding pointer points to the rank the element
was sent to next, which is strictly later in the element's history (no cycles), and the
element travels on the same ordered channel ahead of any message forwarded after it
(MPI's non-overtaking order, and batches keep the order of posting). A home rank's record is
updated only by the element itself after arriving, so a message routed by the home never
overtakes the element. A message that still finds neither the element nor a pointer away from
this rank (an arrival still in this rank's queue) is parked and delivered on arrival: no
message is ever dropped.
"""

from __future__ import annotations

from bisect import bisect_right


def block_bounds(n: int, size: int) -> list[int]:
    """First flat index of each rank's block (n elements over size ranks, evenly), + n."""
    return [r * n // size for r in range(size + 1)]


class LocationManager:
    __slots__ = ("rank", "size", "n", "bounds", "where", "parked", "forwarded")

    def __init__(self, rank: int, size: int, n: int):
        self.rank = rank
        self.size = size
        self.n = n
        self.bounds = block_bounds(n, size)
        self.where: dict[int, tuple[int, int]] = {}  # flat -> (rank, version)
        self.parked: dict[int, list] = {}  # flat -> messages waiting for arrival
        self.forwarded = 0

    def home(self, flat: int) -> int:
        return bisect_right(self.bounds, flat) - 1

    def home_range(self, rank: int) -> range:
        return range(self.bounds[rank], self.bounds[rank + 1])

    def lookup(self, flat: int) -> int:
        known = self.where.get(flat)
        return known[0] if known is not None else self.home(flat)

    def learn(self, flat: int, rank: int, version: int) -> bool:
        known = self.where.get(flat)
        if known is None or version > known[1]:
            self.where[flat] = (rank, version)
            return True
        return False

    def version(self, flat: int) -> int:
        known = self.where.get(flat)
        return known[1] if known is not None else 0
