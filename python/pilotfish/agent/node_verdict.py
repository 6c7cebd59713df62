"""A node as the agent sees it (Node), and a lost node's verdict (agent/node_link.py): how each
task it held ended, read from its node executor's journal on the shared file system, once the
node has stayed silent for verdict_after_s after its loss.

The executor (agent/node_executor.py) journals each process it starts the moment the child
exists (its pid, written before its spawn call returns) and as it is reaped (its exit):
`nodes/<node>/exits`, the core's exit log. When it fences itself it kills what it runs, flushes
that journal, and only then marks the fence (`nodes/<node>/fenced`, its pid: mark_fenced); from
then on it starts nothing until the agent answers it (a Resync), and it takes the mark away
before it takes a spawn again (unmark). So, for each task held on the lost node:

- its journal has its exit: the task ended so (DONE, or FAILED saying why);
- no exit, and the mark of the executor the agent knew stands: the executor fenced and has
  started nothing since; a task it has no spawn record of never started there -- every
  process it started before the fence was journaled before the mark -- so it is queued again,
  not FAILED (its spawn went astray, reached it fenced, or failed to start);
- otherwise (it started and its end is unknown, or the executor could not mark its fence:
  dead, frozen, cut off from the file system): taken as ended, "no word of it" (it FAILS, or
  runs again with retries).

A spawn reaches the executor before any Resync the agent sends after the loss (one connection
keeps their order; a new connection starts empty), and the agent sends no spawn to a lost node:
a task found never started here cannot start there later.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from typing import Any, NamedTuple

log = logging.getLogger("pilotfish.agent")

NEVER_STARTED = -errno.EHOSTUNREACH  # a spawn result (executor.UNREACHABLE): queued again
FENCED = "fenced"  # the fence mark, in the node's journal directory


class Ended(NamedTuple):
    """A process of a node executor's that ended, as the agent takes it: the core's exit row
    (key, pid, code, signal, time, user and system CPU seconds, max RSS KiB) and why, when the
    agent knows better than the code (a fence's kill, a lost node's verdict)."""

    key: int
    pid: int
    code: int
    sig: int
    t: float
    ut: float
    st: float
    rss: int
    reason: str | None

    def core(self) -> tuple:
        """The row as the core's reap gives it (agent/task_runner.py)."""
        return tuple(self[:8])


class Node:
    """A node of the pilot as the agent sees it (agent/node_link.py): its executor's connection
    and state, the keys of what it runs, and while it is lost what is held of it."""

    __slots__ = (
        "name",
        "route",
        "token",
        "step",
        "pid",
        "host",
        "up",
        "lost",
        "last_heard",
        "last_sent",
        "keys",
        "expected_by",
        "starter",
        "lost_at",
        "decided",
        "kills",
        "kill_uids",
        "fences",
        "late",
        "late_ran",
        "resynced",
        "due",
    )

    def __init__(self, name: str, expected_by: float, starter: Any, step: int = 0):
        self.name = name
        self.route: bytes | None = None  # the routing id of its connection (its hello's)
        self.token: bytes | None = None  # its executor's, from its first hello
        self.step = step  # the launcher step its executor is of (node_keys.NodeKeys)
        self.pid = 0
        self.host = ""
        self.up = False
        self.lost: str | None = None
        self.last_heard = 0.0
        self.last_sent = 0.0
        self.keys: set[int] = set()  # its running processes' spawn keys
        self.expected_by = expected_by  # its executor must have said hello by then
        self.starter = starter  # the NodesLaunch method that started it
        # while lost (agent/node_link.py): its keys are held, undecided, until its hello or
        # its verdict; then what was decided without it, and what is asked of it meanwhile
        self.lost_at = 0.0
        self.decided: dict[int, bool] = {}  # key -> decided without word of its end
        self.kills: set[int] = set()  # keys killed while it was lost: killed when it rejoins
        self.kill_uids: set[str] = set()  # tasks whose escapees go then too
        self.fences: list[tuple[Any, int]] = []  # (partition, placer key) held on it
        self.late = 0  # exits of decided keys since it was lost
        self.late_ran = 0  # ... of which ran to their end after a verdict without word
        self.resynced = 0.0  # when it was last sent a Resync (one per heartbeat period)
        self.due = float("inf")  # its next deadline in the agent's heap (agent/node_link.py)


# -- the executor's side ---------------------------------------------------------------------
def mark_fenced(d: str) -> bool:
    """The executor fenced itself: its journal (d/exits) flushed, then the mark (its pid).
    False when either failed (then nothing is promised: the verdict takes no word as none)."""
    from .._util import write_private

    try:
        fd = os.open(os.path.join(d, "exits"), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        write_private(os.path.join(d, FENCED), json.dumps({"pid": os.getpid()}).encode())
    except OSError as e:
        log.warning("cannot mark the fence in %s: %s", d, e)
        return False
    return True


def unmark(d: str) -> bool:
    """The mark taken away (before the executor takes a spawn again); False if it stands."""
    try:
        os.unlink(os.path.join(d, FENCED))
    except FileNotFoundError:
        pass
    except OSError as e:
        log.error("cannot take the fence mark away (%s): taking no spawn", e)
        return False
    return True


# -- the agent's side -------------------------------------------------------------------------
def fenced_by(d: str) -> int:
    """The pid in the node's fence mark (0: none, or not one)."""
    from .._util import open_private

    try:
        fd = open_private(os.path.join(d, FENCED), os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            pid = json.loads(f.read(256)).get("pid")
    except (OSError, ValueError, AttributeError):
        return 0
    return pid if isinstance(pid, int) and pid > 0 else 0


class Verdict(NamedTuple):
    exits: list[Ended]  # ended as its journal says, or taken as ended
    never: list[tuple[int, int, str]]  # (key, NEVER_STARTED, why): queued again
    decided: dict[int, bool]  # key -> decided without word of its end (never started too)


def verdict(sandbox: str, node: Node, t: float, after_s: tuple[float, float]) -> Verdict:
    """The verdict on the keys held on a lost node (the module docstring); t: now (the agent's
    clock); after_s: (fence_after_s, verdict_after_s), for the reasons."""
    from .._exit_log import read_node_exit_logs

    fence_after_s, verdict_after_s = after_s
    d = os.path.join(sandbox, "nodes", node.name)
    fenced = node.pid > 0 and fenced_by(d) == node.pid  # (the mark first, then the journal)
    try:
        ended, pids = read_node_exit_logs(sandbox)  # (keys are the agent's: all nodes' at once)
    except (OSError, ValueError) as e:
        log.warning("cannot read the node executors' journals: %s", e)
        ended, pids, fenced = {}, {}, False
    why = f"node {node.name} lost: {node.lost}"
    out = Verdict([], [], {})
    for key in sorted(node.keys):
        end = ended.get(key)
        if end is not None:
            code, sig, t_exit = end
            reason = None
            if sig:
                reason = f"{why}; killed by signal {sig} there (its journal)"
            elif code:
                reason = f"{why}; it ended there with exit code {code} (its journal)"
            out.exits.append(Ended(key, pids.get(key, 0), code, sig, t_exit, 0.0, 0.0, 0, reason))
            out.decided[key] = False
        elif fenced and key not in pids:
            out.never.append(
                (key, NEVER_STARTED, f"{why}; it never started there (its executor's journal)")
            )
            out.decided[key] = True
        else:
            out.exits.append(
                Ended(
                    key,
                    0,
                    255,
                    0,
                    t,
                    0.0,
                    0.0,
                    0,
                    f"{why}; no word of it for {verdict_after_s:g} s since: taken as ended "
                    f"(its node executor kills what it runs after {fence_after_s:g} s without "
                    "the agent)",
                )
            )
            out.decided[key] = True
    log.warning(
        "node %s: verdict on %d tasks (%d ended as its journal says, %d never started)",
        node.name,
        len(node.keys),
        sum(1 for v in out.decided.values() if not v),
        len(out.never),
    )
    return out
