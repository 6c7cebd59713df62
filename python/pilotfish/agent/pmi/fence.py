"""A PMI world's fences across nodes, in bounded parts, checked against the world's cap where
they are merged (issue 47): what the agent (worlds.py) and the node executors' PMI
servers (node.py) exchange when every local rank of a world entered a fence.

    node: its ranks' new keys -> split() into parts of at most PART_BYTES
          part 0 ──PmiFence──► agent          (unasked: a fence of one part costs one message)
          part i ◄──pull i──── agent ──►      (one node pulled at a time)
    agent (Gather): each part counted against the world's cap BEFORE it is kept
          every node in ──► the union's part 0 ──PmiFenceDone──► each node
          each node pulls the union's next part until the last, which completes its fence

The union is the nodes' parts in the order they arrived (a later part's key wins, as the
dict update of a whole merge did). What the agent holds of a world is its parts, at most the
cap (keys and values, all nodes together, each key charged ENTRY_COST more, as a node's own
server charges them: job.py) + the part in hand -- the contribution that would take the world
past its cap fails it as it arrives, naming the cap, the size and the node, before anything
is merged or sent back. In flight at once: the first part of each node that entered the fence,
one pulled part, and one part of the union per node. A node's server holds its own keys until
they are pulled and the union as its parts come: each bounded by the cap too (job.PmiJob).

Steps are encoded here (msgspec.Raw inside the wire's PmiFence / PmiFenceDone,
_node_wire.py): a step that does not decode -- a part over the wire's bounds, garbage -- is a
FenceError naming why, and its world fails at once instead of waiting for a fence that never
completes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from ... import _node_wire as W
from .wire import ENTRY_COST

PART_BYTES = W.PMI_PART_BYTES
HERE = ""  # the place of ranks the agent serves itself (worlds.HERE)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(W.PmiStep)


class FenceError(Exception):
    """A fence step its world cannot go on from: the world fails with this reason."""


def charge(key: str, value: str) -> int:
    """What a key costs a key-value space: its text and ENTRY_COST (job.py's rule)."""
    return len(key) + len(value) + ENTRY_COST


def split(keys: Mapping[str, str], budget: int = PART_BYTES) -> list[dict[str, str]]:
    """keys in parts of at most `budget` (charge()), in order; no keys: one empty part."""
    parts: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    n = 0
    for k, v in keys.items():
        c = charge(k, v)
        if cur and n + c > budget:
            parts.append(cur)
            cur, n = {}, 0
        cur[k] = v
        n += c
    parts.append(cur)
    return parts


def part(keys: dict[str, str], more: bool) -> msgspec.Raw:
    return msgspec.Raw(_encoder.encode(W.PmiPart(keys, more)))


def pull(i: int) -> msgspec.Raw:
    return msgspec.Raw(_encoder.encode(W.PmiPull(i)))


def decode(raw: object, sender: str) -> W.PmiPart | W.PmiPull:
    """A step from `sender` (in reasons), or FenceError naming why it cannot be accepted."""
    if isinstance(raw, dict):  # (a whole contribution handed over in this process)
        return W.PmiPart(raw)
    try:
        return _decoder.decode(raw)  # type: ignore[arg-type]  # Raw and bytes are buffers
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as e:
        raise FenceError(
            f"a fence frame from {sender} cannot be accepted: {str(e)[:200]}"
        ) from None


class _Union:
    """A completed fence's union while nodes pull it: its parts, each node's last part sent."""

    __slots__ = ("parts", "sent", "held")

    def __init__(self, parts: list[dict[str, str]], places: list[str], held: int):
        self.parts = parts
        self.sent = dict.fromkeys(places, 0)
        self.held = held


class Gather:
    """One world's fences at the agent: the places (node executors; HERE: the agent's own
    ranks) it spans, its cap, and how to reach them -- send(place, epoch, step) a step to a
    node executor; local(epoch, keys, more) a part of the union to the agent's own server;
    pending() the bytes the agent's own ranks have put and not fenced yet (they count
    against the same cap)."""

    def __init__(
        self,
        places: set[str],
        cap: int,
        send: Callable[[str, int, msgspec.Raw], None],
        local: Callable[[int, dict[str, str], bool], None],
        pending: Callable[[], int] = lambda: 0,
        name: Callable[[str], str] = str,
    ):
        self.places = frozenset(places)
        self.cap = cap
        self.send = send
        self.local = local
        self.pending = pending
        self.name = name  # place -> what a reason calls it ("node n2 (ranks 2-3)")
        self.epoch = 0  # the fence being gathered
        self.charges: dict[str, int] = {}  # the world's keys (every fence so far): their cost
        self.total = 0  # ... summed: the world's key-value space, bytes
        self.parts: list[dict[str, str]] = []  # this fence's, as they came
        self.held = 0  # ... their cost
        self.held_here = 0  # ... of it, the agent's own ranks'
        self.got: dict[str, int] = {}  # place -> parts it sent of this fence
        self.done: set[str] = set()  # places whose whole contribution came
        self.waiting: list[str] = []  # places with more parts, not pulled yet
        self.pulling: str | None = None
        self.unions: dict[int, _Union] = {}  # completed fences the nodes still pull
        self.dropped = False  # its world failed: nothing more is sent

    def held_bytes(self) -> int:
        """What the agent holds of this world's keys now: this fence's parts and the unions
        still being pulled (their cost, charge())."""
        return self.held + sum(u.held for u in self.unions.values())

    def elsewhere(self) -> int:
        """Bytes of this fence gathered from the node executors (not the agent's own ranks')."""
        return self.held - self.held_here

    def drop(self) -> None:
        """The world failed (or ended): forget what is held."""
        self.parts, self.held, self.unions, self.charges = [], 0, {}, {}
        self.dropped = True

    # -- steps ----------------------------------------------------------------------------------
    def step(self, place: str, epoch: int, raw: object) -> None:
        """A step from `place` (FenceError: the world cannot go on)."""
        if self.dropped:
            return
        s = decode(raw, self.name(place))
        if isinstance(s, W.PmiPull):
            self._pulled(place, epoch, s.part)
        else:
            self._part(place, epoch, s.keys, s.more)

    def _part(self, place: str, epoch: int, keys: dict[str, str], more: bool) -> None:
        if epoch != self.epoch or place in self.done:
            raise FenceError(
                f"{self.name(place)} entered fence {epoch} while the world is at fence {self.epoch}"
            )
        n = self.got.get(place, 0)
        if n and self.pulling != place:
            raise FenceError(f"{self.name(place)} sent part {n} of fence {epoch} unasked")
        add = 0
        charges = self.charges
        for k, v in keys.items():
            c = charge(k, v)
            add += c - charges.get(k, 0)
            charges[k] = c
        size = self.total + add + self.pending()
        if size > self.cap:
            raise FenceError(
                f"the world's key-value space (its keys and values, all nodes together) "
                f"would grow to {size} bytes with a part of fence {epoch} from "
                f"{self.name(place)}, over max_kvs_bytes={self.cap}"
            )
        self.total += add
        cost = sum(charge(k, v) for k, v in keys.items())
        self.held += cost
        if place == HERE:
            self.held_here += cost
        self.parts.extend(split(keys) if cost > PART_BYTES else [keys])
        self.got[place] = n + 1
        if more:
            if self.pulling is None or self.pulling == place:
                self.pulling = place
                self.send(place, epoch, pull(n + 1))
            else:
                self.waiting.append(place)
            return
        self.done.add(place)
        if self.pulling == place:
            self.pulling = None
            if self.waiting:
                self.pulling = self.waiting.pop(0)
                self.send(self.pulling, epoch, pull(self.got[self.pulling]))
        if len(self.done) == len(self.places):
            self._complete()

    def _complete(self) -> None:
        e, parts, held = self.epoch, self.parts, self.held
        self.epoch += 1
        self.parts, self.held, self.held_here = [], 0, 0
        self.got, self.done, self.waiting, self.pulling = {}, set(), [], None
        if HERE in self.places:
            for i, keys in enumerate(parts):
                self.local(e, keys, i < len(parts) - 1)
        away = [p for p in self.places if p != HERE]
        if away and not self.dropped:  # (the agent's own server may have failed the world)
            self.unions[e] = _Union(parts, away, held)
            for place in away:
                self._give(place, e, 0)

    def _give(self, place: str, epoch: int, i: int) -> None:
        u = self.unions[epoch]
        last = len(u.parts) - 1
        u.sent[place] = i
        self.send(place, epoch, part(u.parts[i], i < last))
        if i == last:
            del u.sent[place]
            if not u.sent:
                del self.unions[epoch]

    def _pulled(self, place: str, epoch: int, i: int) -> None:
        u = self.unions.get(epoch)
        if u is None or place not in u.sent or i != u.sent[place] + 1:
            raise FenceError(
                f"{self.name(place)} pulled part {i} of fence {epoch}'s keys out of turn"
            )
        self._give(place, epoch, i)
