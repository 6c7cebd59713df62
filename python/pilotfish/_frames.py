"""Length-prefixed frames: the one framing of pilotfish's own files -- the journals
(_journal.py), the events files (_events.py, read fast by analytics/_load.py and followed live
by analytics/dashboard/tail.py) and a function worker's result log (agent/worker.py).

A frame is a u32 little-endian length, then that many bytes (a msgpack array, for all of
them). Writers put each frame (or batch of frames) in one write(), so a killed writer leaves
at most a last frame cut short: `spans` and `whole` stop before it, and each reader says what
that means for its file (the journal tells a torn tail from damage: _journal.py).
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator

LEN = struct.Struct("<I")
HEADER = LEN.size  # bytes before a frame's payload


def pack(payload: bytes) -> bytes:
    """One frame."""
    return LEN.pack(len(payload)) + payload


def pack_all(payloads: Iterable[bytes]) -> bytes:
    """Frames, back to back (for one write())."""
    return b"".join(LEN.pack(len(p)) + p for p in payloads)


def length_at(data: bytes | bytearray | memoryview, pos: int) -> int:
    """The payload length the frame at `pos` declares (its header must be there)."""
    return LEN.unpack_from(data, pos)[0]


def spans(data: bytes | memoryview, pos: int = 0) -> Iterator[tuple[int, int]]:
    """(start, end) of each whole frame's payload from `pos` on; stops before a last frame
    cut short (or a header cut short)."""
    n = len(data)
    while pos + HEADER <= n:
        end = pos + HEADER + LEN.unpack_from(data, pos)[0]
        if end > n:
            return
        yield pos + HEADER, end
        pos = end


def whole(data: bytes | memoryview) -> int:
    """The length of the prefix of `data` made of whole frames."""
    end = 0
    for _, end in spans(data):
        pass
    return end
