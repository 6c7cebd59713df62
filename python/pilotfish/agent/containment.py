"""Keeping task process trees inside the pilot.

Every process the agent starts carries PILOTFISH_SANDBOX (the pilot's, unique: task uids
repeat across sessions) and a task's processes PILOTFISH_TASK_UID in their environment, which
children inherit even when they leave the task's process group or session with setsid. The
agent is a child subreaper, so such escapees
stay its descendants (and are reaped by its reaper) instead of moving to init. On the paths
that must stop a task for good (timeout, cancel, pilot end) the agent finds them by those
variables and signals them too.

Why not a cgroup: on these machines cgroup v2 delegation is not set up for the batch job's
user (and Slurm's own cgroup plugin owns the hierarchy where it runs); the environment mark
plus a subreaper works wherever /proc does. The /proc scan costs milliseconds, so it runs only
on those stop paths, never per task on the hot path.
"""

from __future__ import annotations

import ctypes
import os
import signal as _signal

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process instead of init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def marked(
    scope: str, var: str | None = None, values: set[str] | None = None, here_only: bool = False
) -> dict[str, list[int]]:
    """Live processes (not this one) of this pilot -- PILOTFISH_SANDBOX=scope in their
    environment: task uids repeat across sessions, sandboxes do not. With var: {value: [pids]}
    of those whose var is one of values; without: {scope: [pids]}. here_only (a node
    executor's): only those of this node, in this process's network namespace -- on a real
    node all of its processes; on hosts sharing one kernel (the test cluster's namespaces) not
    the agent's launcher steps on another host, whose SIGKILL would tear down the pilot's
    srun step under Slurm and leave its nodes COMPLETING until slurmctld's next ping."""
    if var is not None and not values:
        return {}
    me = os.getpid()
    netns = _netns("self") if here_only else None
    mark = b"PILOTFISH_SANDBOX=" + scope.encode()
    out: dict[str, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            continue  # gone, or not ours
        if mark not in raw:
            continue
        if netns is not None and _netns(entry) != netns:
            continue
        env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if item)
        if env.get(b"PILOTFISH_SANDBOX") != scope.encode():
            continue
        if var is None:
            out.setdefault(scope, []).append(int(entry))
            continue
        v = env.get(var.encode(), b"").decode(errors="replace")
        if v in values:  # type: ignore[operator]  # values: a container of str
            out.setdefault(v, []).append(int(entry))
    return out


def kill_marked(
    scope: str,
    var: str | None = None,
    values: set[str] | None = None,
    sig: int = _signal.SIGKILL,
    here_only: bool = False,
) -> int:
    """Signal every process marked as above; returns how many."""
    n = 0
    for pids in marked(scope, var, values, here_only).values():
        for pid in pids:
            try:
                os.kill(pid, sig)
                n += 1
            except (ProcessLookupError, PermissionError):
                pass
    return n


def _netns(pid: str) -> str | None:
    """The network namespace of a process ("net:[4026531840]"), None if it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
