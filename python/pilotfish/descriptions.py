"""Validated value objects: what a user asks for.

Descriptions are plain objects with a fixed set of fields. Construction checks each field on
its own (type, range); `TaskManager.submit_tasks` checks what needs context (does the request
fit any pilot). Every rejection is a `DescriptionError` naming the field, the value and why.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from ._errors import DescriptionError
from ._util import parse_duration

RESOURCES = ("local", "slurm", "pbs", "lsf", "flux")
LAUNCHERS = ("direct", "ssh", "mpirun", "mpiexec", "srun", "prrte", "flux", "jsrun", "aprun")
STAGING_ACTIONS = ("copy", "link", "move")


def _fail(kind: str, field: str, value: object, why: str) -> DescriptionError:
    return DescriptionError(kind, field, value, why)


# -- field checkers: (kind, field, value) -> normalized value, or raise -------------------

def _int(lo: int, hi: int | None = None) -> Callable[[str, str, Any], int]:
    def check(kind: str, field: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise _fail(kind, field, v, f"must be an integer >= {lo}")
        if v < lo:
            raise _fail(kind, field, v, f"must be >= {lo}")
        if hi is not None and v > hi:
            raise _fail(kind, field, v, f"must be <= {hi}")
        return v
    return check


def _opt(check: Callable[[str, str, Any], Any]) -> Callable[[str, str, Any], Any]:
    def opt(kind: str, field: str, v: Any) -> Any:
        return None if v is None else check(kind, field, v)
    return opt


def _str(kind: str, field: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _fail(kind, field, v, "must be a string")
    return v


def _nonempty_str(kind: str, field: str, v: Any) -> str:
    v = _str(kind, field, v)
    if not v.strip():
        raise _fail(kind, field, v, "must not be empty")
    if "\0" in v:
        raise _fail(kind, field, v, "must not contain NUL bytes")
    return v


def _str_list(kind: str, field: str, v: Any) -> list[str]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise _fail(kind, field, v, "must be a list of strings")
    out = []
    for item in v:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _fail(kind, field, v, f"item {item!r} is not a string or number")
        s = str(item)
        if "\0" in s:
            raise _fail(kind, field, v, "items must not contain NUL bytes")
        out.append(s)
    return out


def _env(kind: str, field: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must be a dict of str -> str")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k:
            raise _fail(kind, field, v, f"bad variable name {k!r}")
        if isinstance(val, bool) or not isinstance(val, (str, int, float)):
            raise _fail(kind, field, v, f"value of {k!r} must be a string or number")
        out[k] = str(val)
    return out


def _duration(kind: str, field: str, v: Any) -> float:
    try:
        seconds = parse_duration(v)
    except ValueError as e:
        raise _fail(kind, field, v, str(e)) from None
    if seconds <= 0:
        raise _fail(kind, field, v, "must be > 0")
    return seconds


def _output(kind: str, field: str, v: Any) -> bool | str:
    # True: captured (task.stdout); False: discarded; str: written to that path
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip():
        return v
    raise _fail(kind, field, v, "must be True (capture), False (discard) or a file path")


def _tags(kind: str, field: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must be a dict, e.g. {'colocate': 'group-a'}")
    for k, val in v.items():
        if not isinstance(k, str):
            raise _fail(kind, field, v, f"tag name {k!r} must be a string")
        if k == "colocate" and not (isinstance(val, str) and val):
            raise _fail(kind, field, v, "'colocate' must name a group (a non-empty string)")
    return dict(v)


def _choice(options: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    def check(kind: str, field: str, v: Any) -> str:
        if v not in options:
            raise _fail(kind, field, v, f"must be one of {', '.join(options)}")
        return v
    return check


def _staging(kind: str, field: str, v: Any) -> list[dict[str, str]]:
    if isinstance(v, (str, dict)) or not isinstance(v, Iterable):
        raise _fail(kind, field, v, "must be a list of {source, target, action} dicts or paths")
    out = []
    for item in v:
        if isinstance(item, str):
            item = {"source": item}
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            raise _fail(kind, field, v, f"item {item!r} needs a 'source' path")
        unknown = set(item) - {"source", "target", "action"}
        if unknown:
            raise _fail(kind, field, v, f"item has unknown keys {sorted(unknown)}")
        action = item.get("action", "copy")
        if action not in STAGING_ACTIONS:
            raise _fail(kind, field, v, f"action {action!r} must be one of {', '.join(STAGING_ACTIONS)}")
        src = item["source"]
        out.append({"source": src, "target": item.get("target") or src.rsplit("/", 1)[-1],
                    "action": action})
    return out


def _bool(kind: str, field: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _fail(kind, field, v, "must be True or False")
    return v


def _launcher_options(kind: str, field: str, v: Any) -> dict[str, dict]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must map launcher names to option dicts")
    for name, opts in v.items():
        if name not in LAUNCHERS:
            raise _fail(kind, field, v, f"{name!r} is not a launcher ({', '.join(LAUNCHERS)})")
        if not isinstance(opts, dict):
            raise _fail(kind, field, v, f"options of {name!r} must be a dict")
    return {k: dict(o) for k, o in v.items()}


def _any(kind: str, field: str, v: Any) -> Any:
    return v


class _Description:
    """Fixed fields, each checked on assignment; unknown fields are an error.

    Only fields set away from their default are stored (a queued task costs little memory);
    a mutable default (list, dict) is materialized on first access so in-place edits stick.
    """

    _kind = "Description"
    _fields: dict[str, tuple[Any, Callable[[str, str, Any], Any]]] = {}
    __slots__ = ("_values",)

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        object.__setattr__(self, "_values", {})
        if from_dict is not None and not isinstance(from_dict, dict):
            raise DescriptionError(self._kind, "(itself)", from_dict, "expected a dict of fields")
        given = dict(from_dict or {})
        given.update(kwargs)
        for name, value in given.items():
            setattr(self, name, value)

    def _unknown(self, name: str, value: Any) -> None:
        close = difflib.get_close_matches(name, self._fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DescriptionError(self._kind, name, value, f"unknown field{hint}")

    def __getattr__(self, name: str) -> Any:
        values = self._values
        if name in values:
            return values[name]
        spec = self._fields.get(name)
        if spec is None:
            raise AttributeError(f"{self._kind} has no field {name!r}")
        default = spec[0]
        if callable(default):
            value = self._values[name] = default()
            return value
        return default

    def __setattr__(self, name: str, value: Any) -> None:
        spec = self._fields.get(name)
        if spec is None:
            self._unknown(name, value)
        self._values[name] = spec[1](self._kind, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._values)

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(state))

    def as_dict(self) -> dict[str, Any]:
        """Every field with its value (defaults included)."""
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.as_dict() == self.as_dict()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{self._kind}({shown})"


class TaskDescription(_Description):
    """A unit of work and its resource request: ranks x (cores, GPUs, memory) per rank.

    executable   program to run (searched in PATH when it has no '/'); no shell unless shell=True
    arguments    list of arguments
    environment  extra environment variables
    sandbox      working directory (default: the pilot's task directory)
    pre_exec, post_exec  shell lines run before / after the executable (imply a shell)
    shell        run `executable arguments...` through /bin/sh -c
    ranks, cores_per_rank, gpus_per_rank, mem_per_rank (MiB)
    launcher     launch method for this task (default: the pilot's), e.g. "mpirun"
    stdout, stderr  True: captured into task.stdout/stderr (default); False: discarded; or a path
    timeout      seconds or "90s"/"30m": the task's process group is killed after it
    priority     higher runs first
    tags         e.g. {"colocate": "group"}: tasks of one group share a node
    name, metadata  free for the user
    input_staging, output_staging  [{source, target, action: copy|link|move}]
    """

    _kind = "TaskDescription"
    _fields = {
        "executable": (None, _opt(_nonempty_str)),
        "arguments": (list, _str_list),
        "environment": (dict, _env),
        "sandbox": (None, _opt(_nonempty_str)),
        "pre_exec": (list, _str_list),
        "post_exec": (list, _str_list),
        "shell": (False, _bool),
        "ranks": (1, _int(1)),
        "cores_per_rank": (1, _int(1)),
        "gpus_per_rank": (0, _int(0)),
        "mem_per_rank": (0, _int(0)),
        "launcher": (None, _opt(_choice(LAUNCHERS))),
        "stdout": (True, _output),
        "stderr": (True, _output),
        "timeout": (None, _opt(_duration)),
        "priority": (0, _int(-(2**31), 2**31 - 1)),
        "tags": (dict, _tags),
        "name": (None, _opt(_str)),
        "metadata": (None, _any),
        "input_staging": (list, _staging),
        "output_staging": (list, _staging),
    }
    __slots__ = ()

    def check_complete(self) -> None:
        """What only a whole description can tell (called at submit)."""
        if self.executable is None:
            raise DescriptionError(self._kind, "executable", None, "is required")

    @property
    def cores(self) -> int:
        return self.ranks * self.cores_per_rank

    @property
    def gpus(self) -> int:
        return self.ranks * self.gpus_per_rank


class PilotDescription(_Description):
    """A placeholder job: nodes x (cores, GPUs, memory) for a walltime.

    resource        "local" (default: an agent process on this machine), "slurm", "pbs", "lsf", "flux"
    nodes           number of nodes
    cores_per_node, gpus_per_node, mem_per_node (MiB)
                    default: this machine's shape for "local", discovered for batch systems.
                    A local shape larger than this machine is an emulated machine: tasks are
                    placed as on the declared nodes and run here (planning and scale tests).
    runtime         walltime: seconds or "90s", "30m", "2h", "HH:MM:SS"
    sandbox         pilot directory (default: <session>/<pilot uid>)
    queue, project, reservation   passed to the batch system
    launcher        default launch method ("direct" for local)
    launcher_options  per launcher, e.g. {"srun": {"mpi": "pmi2"}, "mpirun": {"prefix": ...}}
    environment     extra environment for the agent and its tasks
    """

    _kind = "PilotDescription"
    _fields = {
        "resource": ("local", _choice(RESOURCES)),
        "nodes": (1, _int(1)),
        "cores_per_node": (None, _opt(_int(1))),
        "gpus_per_node": (None, _opt(_int(0))),
        "mem_per_node": (None, _opt(_int(0))),
        "runtime": (3600.0, _duration),
        "sandbox": (None, _opt(_nonempty_str)),
        "queue": (None, _opt(_str)),
        "project": (None, _opt(_str)),
        "reservation": (None, _opt(_str)),
        "launcher": (None, _opt(_choice(LAUNCHERS))),
        "launcher_options": (dict, _launcher_options),
        "environment": (dict, _env),
        "name": (None, _opt(_str)),
    }
    __slots__ = ()


def check_descriptions(descs: Iterable[Any], cls: type[_Description]) -> list[Any]:
    """Accept descriptions or dicts; re-check each one, naming its index on error."""
    out = []
    for i, d in enumerate(descs):
        try:
            if isinstance(d, dict):
                d = cls(d)
            elif not isinstance(d, cls):
                raise DescriptionError(cls._kind, "(itself)", d,
                                       f"expected a {cls.__name__} or a dict")
            # (no copy: what runs is fixed when the task is submitted, later edits to the
            # description change nothing, and a queued task costs half the memory)
            if isinstance(d, TaskDescription):
                d.check_complete()
        except DescriptionError as e:
            raise DescriptionError(e.kind, e.field, e.value, e.why, index=i) from None
        out.append(d)
    return out


def misfit(ranks: int, cores_per_rank: int, gpus_per_rank: int, mem_per_rank: int,
           shape: list[tuple[int, int, int]]) -> tuple[str, str] | None:
    """None if nodes of this shape [(cores, gpus, mem MiB)] can ever hold the request,
    else (field, why) -- shared by the client (at submit) and the agent (on receipt)."""
    max_c = max(c for c, _, _ in shape)
    max_g = max(g for _, g, _ in shape)
    max_m = max(m for _, _, m in shape)
    if cores_per_rank > max_c:
        return "cores_per_rank", f"larger than the largest node ({max_c} cores)"
    if gpus_per_rank > max_g:
        return "gpus_per_rank", f"larger than the largest node ({max_g} GPUs)"
    if mem_per_rank and max_m and mem_per_rank > max_m:
        return "mem_per_rank", f"larger than the largest node ({max_m} MiB)"
    capacity = 0
    for c, g, m in shape:
        fit = c // cores_per_rank
        if gpus_per_rank:
            fit = min(fit, g // gpus_per_rank)
        if mem_per_rank and m:
            fit = min(fit, m // mem_per_rank)
        capacity += fit
    if ranks > capacity:
        return "ranks", f"more ranks of this size than the pilot holds ({capacity})"
    return None


__all__ = ["TaskDescription", "PilotDescription", "check_descriptions", "misfit", "RESOURCES", "LAUNCHERS"]
