"""Exit logs: what the Rust core (and the agent's keeper) append the moment a process starts or
is reaped -- the agent's `agent.exits`, each node executor's `nodes/<node>/exits` -- read back
when an agent resumes, its keeper takes over, or a lost node gets its verdict (the journals
beside them: _journal.py).

A record is 24 bytes (little-endian key: i64, code: i32, signal: i32, time: f64): an exit
(signal >= 0), a spawn (signal SPAWN_MARK, the pid in the code field) or an intent written just
before a spawn was tried (signal INTENT_MARK). A torn last record (a kill mid-write) is
ignored.
"""

from __future__ import annotations

import os
import struct

_EXIT = struct.Struct("<qiid")
SPAWN_MARK = -1  # an exit-log record with this in its signal field is a spawn: code = pid
INTENT_MARK = -2  # ... with this: written just before the spawn of that key was tried


def read_exit_log(
    sandbox: str, intents: set[int] | None = None
) -> tuple[dict[int, tuple[int, int, float]], dict[int, int]]:
    """({key: (exit code, signal, time)}, {key: pid}) from a pilot's `agent.exits`: the Rust
    core writes an intent record before each spawn, a spawn record (pid) as the child
    exists and an exit record as it is reaped; the agent's keeper appends the exits of what
    it inherited in the same format. Keys with an intent record are added to `intents`."""
    return _read_exits(os.path.join(sandbox, "agent.exits"), intents)


def read_node_exit_logs(sandbox: str) -> tuple[dict[int, tuple[int, int, float]], dict[int, int]]:
    """The same, merged, from the journals of the pilot's node executors
    (`nodes/<node>/exits`, agent/node_executor.py): their keys are the agent's, their pids another
    host's (never to be mixed with this host's)."""
    exits: dict[int, tuple[int, int, float]] = {}
    pids: dict[int, int] = {}
    d = os.path.join(sandbox, "nodes")
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return exits, pids
    for name in names:
        path = os.path.join(d, name, "exits")
        if os.path.isfile(path):
            e, p = _read_exits(path, None)
            exits.update(e)
            pids.update(p)
    return exits, pids


def _read_exits(
    path: str, intents: set[int] | None
) -> tuple[dict[int, tuple[int, int, float]], dict[int, int]]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}, {}
    exits: dict[int, tuple[int, int, float]] = {}
    pids: dict[int, int] = {}
    for i in range(0, len(data) - len(data) % _EXIT.size, _EXIT.size):
        key, code, sig, t = _EXIT.unpack_from(data, i)
        if sig >= 0:
            exits[key] = (code, sig, t)
        elif sig == SPAWN_MARK:
            pids[key] = code
        elif intents is not None:
            intents.add(key)
    return exits, pids


def exit_record(key: int, code: int, sig: int, t: float) -> bytes:
    return _EXIT.pack(key, code, sig, t)
