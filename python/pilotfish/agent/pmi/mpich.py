"""What the PMI server knows of MPICH beyond the wire: the process mapping it builds its node
map from, the world id of a KVS name that names its shared memory on a node, and the choice of
the name a job's ranks are told.

MPICH names a job's shared memory on a node after its KVS name, /dev/shm/mpich_shm_<id:x>_<node
id> (id: mpich_world_id). A name whose files exist already -- planted by another user, or left
by a killed run -- is never served (MPICH would open such a file rather than create its own),
nor one that shares a live job's world id: the job gets a fresh name instead, 128 random bits
(pick_name), and so does every job added with fresh_name=True (the node executors' and the
agent's: another user can predict none). remove_shm deletes a finished job's files: our own
regular files only, never through a link.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from collections.abc import Iterable, Sequence

from .wire import KVSNAME_MAX

log = logging.getLogger("pilotfish.pmi")

SHM_DIR = "/dev/shm"
NAME_TRIES = 16  # fresh names tried for a job whose name's shared memory exists


def process_mapping(node_of_rank: Sequence[int]) -> str:
    """MPICH's PMI_process_mapping for a rank -> node list: `(vector,(node,nodes,ranks),...)`,
    each block `ranks` consecutive ranks on each of `nodes` consecutive node ids from `node`.
    MPICH builds its node map (who shares memory with whom) from it; without it, it allgathers
    host names over PMI (one fence more). Node ids are renumbered by first appearance."""
    ids: dict[int, int] = {}
    norm = [ids.setdefault(n, len(ids)) for n in node_of_rank]
    runs: list[list[int]] = []  # [node, count] of consecutive ranks on one node
    for n in norm:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    blocks: list[list[int]] = []  # [first node, nodes, ranks per node]
    for n, c in runs:
        b = blocks[-1] if blocks else None
        if b is not None and b[2] == c and b[0] + b[1] == n:
            b[1] += 1
        else:
            blocks.append([n, 1, c])
    return "(vector," + ",".join(f"({a},{b},{c})" for a, b, c in blocks) + ")"


def mpich_world_id(kvsname: str) -> int:
    """MPICH's world id of a job: FNV-1a of its KVS name (MPICH 4.x/5.0; MPICH's main branch
    hashes `<kvsname>-<init count>`). It names the job's shared-memory segments on a node,
    /dev/shm/mpich_shm_<id:x>_<node id>: two live jobs of one id on a node would share one,
    and a segment left by a killed run is opened again by the next job of that name."""
    h = 2166136261
    for b in kvsname.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def world_ids(name: str) -> set[int]:
    """The world ids MPICH may give a job told `name` (both hashes: see mpich_world_id)."""
    return {mpich_world_id(name), mpich_world_id(f"{name}-1")}


def shm_paths(name: str, node_id: int) -> list[str]:
    """The shared-memory files MPICH makes for a job told `name` on node `node_id` (a run
    whose ranks were killed leaves them: 2 MiB each)."""
    out = []
    for wid in world_ids(name):
        for kind in ("shm", "vci"):
            out.append(f"{SHM_DIR}/mpich_{kind}_{wid:x}_{node_id}")
    return out


def remove_shm(paths: Iterable[str]) -> None:
    """Remove those of `paths` that are our own regular files (unlink never follows a link)."""
    uid = os.getuid()
    for p in paths:
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
                os.unlink(p)
        except OSError:
            pass


def pick_name(kvsname: str, node_id: int, fresh: bool, live: Iterable[str]) -> str:
    """The name a job of `kvsname` on node `node_id` is told: kvsname, unless MPICH's shared
    memory of that name exists here or it shares a world id with a `live` job's name -- then,
    and always with `fresh`, `<kvsname>.<128 random bits>`, drawn again while taken. Raises
    ValueError after NAME_TRIES taken names in a row."""
    taken_ids: set[int] = set()
    for other in live:
        taken_ids.update(world_ids(other))
    name = kvsname
    for i in range(NAME_TRIES):
        if i or fresh:
            name = f"{kvsname[: KVSNAME_MAX - 34]}.{secrets.token_hex(16)}"
        taken = [p for p in shm_paths(name, node_id) if os.path.lexists(p)]
        if not taken and not world_ids(name) & taken_ids:
            return name
        log.warning(
            "%s: %s (a killed run's, another job's or user's): serving it under a new name",
            name,
            taken[0] if taken else "its MPICH world id is a live job's",
        )
    raise ValueError(
        f"kvsname={kvsname!r}: {NAME_TRIES} fresh names taken in a row "
        f"({SHM_DIR} is flooded with MPICH's names)"
    )
