"""What the agent checks of a task again on arrival: the client checked it already, but the
wire is an API too (a task must never kill the agent), and the agent knows its partitions.
"""

from __future__ import annotations

from .. import _wire
from .._paths import resolve, task_cwd
from .._shapes import misfit_partitions
from ..launch import LAUNCHERS, launchers

_SHAPE_FIELDS = ("ranks", "cores_per_rank", "gpus_per_rank", "mem_per_rank")


def misfit_reason(
    key: tuple[int, int, int, int], shapes: list, memo: dict | None = None
) -> str | None:
    """ "field = value: why" when no partition can ever hold a request of this shape (ranks,
    cores, GPUs, memory per rank), else None; memoized per shape (misfit is O(nodes))."""
    r = memo.get(key, memo) if memo is not None else memo
    if r is memo:
        r = misfit_partitions(*key, shapes)
        if memo is not None and all(type(x) is int for x in key):
            memo[key] = r
    if r is None:
        return None
    return f"{r[0]} = {key[_SHAPE_FIELDS.index(r[0])]}: {r[1]}"


def check_spec(
    spec: _wire.TaskSpec, shapes: list, tasks_dir: str, sandbox: str, memo: dict | None = None
) -> str | None:
    """Why the agent cannot run this task, or None. The client checked it already; the agent
    checks again because the wire is an API too (a task must never kill the agent).
    shapes: per partition, its nodes' (cores, gpus, mem); memo: misfit per request shape
    (it is O(nodes); the request's numbers are checked by misfit itself the first time)."""
    why = misfit_reason(
        (spec.ranks, spec.cores_per_rank, spec.gpus_per_rank, spec.mem_per_rank), shapes, memo
    )
    if why is not None:
        return why
    if not spec.uid or not spec.executable:
        return "uid and executable must not be empty"
    if "/" in spec.uid or spec.uid in (".", "..") or "\0" in spec.uid:
        return f"uid = {spec.uid!r}: must be one path component (it names the task's directory)"
    lm = spec.launcher
    if lm is not None and lm not in LAUNCHERS and lm not in launchers():
        return f"launcher = {spec.launcher!r}: not a launch method"
    if spec.timeout is not None and not (0 < spec.timeout < 1e9):
        return f"timeout = {spec.timeout!r}: must be > 0 and finite"
    if spec.duration is not None and not (0 < spec.duration < 1e9):
        return f"duration = {spec.duration!r}: must be > 0 and finite"
    # (NUL bytes and text that is not UTF-8 in argv/env: the core refuses them per spec at
    # spawn, and the task fails alone there -- no per-task scan of every string here)
    if spec.sandbox is not None:
        resolve(tasks_dir, spec.sandbox, sandbox)
    for field in ("stdout", "stderr"):
        v = getattr(spec, field)
        if isinstance(v, str):  # (the common case, captured or discarded, needs no path)
            resolve(task_cwd(spec, spec.uid, tasks_dir), v, sandbox)
    return None
