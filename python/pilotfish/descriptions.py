"""Validated value objects: what a user asks for.

Descriptions are plain objects with a fixed set of fields. Construction checks each field on
its own (type, range); `TaskManager.submit_tasks` checks what needs context (does the request
fit any pilot). Every rejection is a `DescriptionError` naming the field, the value and why.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from typing import Any, Callable, Iterable

import msgspec

from ._errors import DescriptionError, show
from ._paths import clean_text, sandbox_relative
from ._util import parse_duration

try:
    from ._core import MAX_GPUS_PER_NODE
except ImportError:  # the Rust core not built (docs, linters): its value
    MAX_GPUS_PER_NODE = 64

RESOURCES = ("local", "slurm", "pbs", "lsf", "flux", "simulated")
LAUNCHERS = (
    "direct",
    "ssh",
    "mpirun",
    "mpiexec",
    "srun",
    "prrte",
    "flux",
    "jsrun",
    "aprun",
    "nodes",
    "pmi",
    "pmix",
)
# transfer: a copy across the two sides; tarball: the source (a file or a tree) packed into one
# archive, carried across, and unpacked at the target (one file to move instead of many)
STAGING_ACTIONS = ("copy", "link", "move", "transfer", "tarball")
# staging URL schemes (RADICAL-Pilot's): client:///p -- p on the client's side (relative: to
# where the client runs); file:///abs -- that absolute path; pilot:///p -- the pilot's shared
# directory (<pilot sandbox>/tasks/shared/p, see Pilot.stage_in); task:///p -- the task's own
# directory (the sandbox side only). A plain path: a client-side path on the outer side, a path
# in the task's directory on the sandbox side.
STAGING_SCHEMES = ("client", "file", "pilot", "task")


def _split_url(kind: str, field: str, whole: Any, path: str, sandbox_side: bool) -> str:
    """A staging path with its URL scheme resolved as far as the description can: the
    sandbox side becomes a relative path; the outer side keeps 'pilot://' (the pilot is
    known at submit) and becomes a plain path otherwise. Unknown schemes: DescriptionError."""
    if "://" not in path:
        return path
    scheme, _, rest = path.partition("://")
    if scheme not in STAGING_SCHEMES:
        raise _fail(
            kind,
            field,
            whole,
            f"{show(path, 60)}: URL scheme {scheme!r} is not "
            f"supported ({', '.join(s + '://' for s in STAGING_SCHEMES)} or a path)",
        )
    if rest.startswith("/") and scheme != "file":
        rest = rest[1:]  # client:///a.dat: a.dat where the client runs (RADICAL-Pilot's form)
    if sandbox_side:
        if scheme != "task":
            raise _fail(
                kind,
                field,
                whole,
                f"{show(path, 60)}: the task's side of staging is "
                f"its own directory: a relative path or task:///path",
            )
        return rest or "."
    if scheme == "task":
        raise _fail(
            kind,
            field,
            whole,
            f"{show(path, 60)}: task:// names the task's own "
            f"directory, which is the other side of this directive",
        )
    if scheme == "pilot":
        norm = os.path.normpath(rest or ".")
        if norm.startswith("..") or os.path.isabs(norm):
            raise _fail(kind, field, whole, f"{show(path, 60)} leaves the pilot's shared directory")
        return "pilot://" + norm
    if scheme == "file" and not rest.startswith("/"):
        raise _fail(
            kind,
            field,
            whole,
            f"{show(path, 60)}: file:// needs an absolute path (file:///abs/path)",
        )
    return rest


# -- limits: what the agent and its Rust placer can represent (rust/src/placer) ------------
# Far beyond any real machine; each keeps a number inside a type or a memory budget.
MAX_NODES = 1_000_000  # a pilot's per-node state is built at submit and at start
MAX_CORES_PER_NODE = 65_536  # placer: per-core bitsets and one cached int per core id
MAX_TOTAL_CORES = 2**30  # nodes x cores_per_node: the placer's core bitsets
MAX_MEM_MIB = 2**32 - 1  # placer: a rank's memory is a u32 (MiB)
MAX_PLACER_ENCODED = 2**28  # placer: ranks x (3 + cores + gpus) numbers per task
MAX_RANKS = MAX_PLACER_ENCODED // 4  # the most 1-core ranks the placer encodes in one task
MAX_DURATION_S = 10 * 365 * 86400.0  # 10 years: a timeout/walltime beyond is a mistake
_INT64 = (-(2**63), 2**64 - 1)  # what msgpack (the wire, the journal) carries
_MAX_NESTING = 32  # JSON-like data (tags, launcher options)


def _fail(kind: str, field: str, value: object, why: str) -> DescriptionError:
    return DescriptionError(kind, field, value, why)


def _text(kind: str, field: str, whole: Any, s: str, what: str = "") -> str:
    """s (a str) as an exact str that can cross every boundary (UTF-8, no NUL), else raise;
    `what` names the part of the field for the error ("item ", "key ")."""
    if type(s) is not str:
        s = str.__str__(s)  # a str subclass: its text, not whatever its methods say
    why = clean_text(s)
    if why is not None:
        raise _fail(kind, field, whole, f"{what}{show(s, 60)} {why}" if what else why)
    return s


# -- field checkers: (kind, field, value) -> normalized value, or raise -------------------


def _int(lo: int, hi: int, why_hi: str = "") -> Callable[[str, str, Any], int]:
    def check(kind: str, field: str, v: Any) -> int:
        if type(v) is not int:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _fail(kind, field, v, f"must be an integer >= {lo}")
            if isinstance(v, int):
                v = int.__index__(v)  # an int subclass (IntEnum): its value
            elif v.is_integer():  # False for nan and inf
                v = int(v)
            else:
                raise _fail(kind, field, v, f"must be an integer >= {lo}")
        if v < lo:
            raise _fail(kind, field, v, f"must be >= {lo}")
        if v > hi:
            raise _fail(kind, field, v, f"must be <= {hi}{why_hi}")
        return v

    return check


def _opt(check: Callable[[str, str, Any], Any]) -> Callable[[str, str, Any], Any]:
    def opt(kind: str, field: str, v: Any) -> Any:
        return None if v is None else check(kind, field, v)

    return opt


def _str(kind: str, field: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _fail(kind, field, v, "must be a string")
    if type(v) is str and v.isascii() and "\0" not in v:
        return v
    return _text(kind, field, v, v)


def _nonempty_str(kind: str, field: str, v: Any) -> str:
    v = _str(kind, field, v)
    if not v.strip():
        raise _fail(kind, field, v, "must not be empty")
    return v


def _task_sandbox(kind: str, field: str, v: Any) -> str:
    # absolute: anywhere (checked against the pilot's own files at submit); relative: under
    # the pilot's tasks/ directory, which it may not leave
    v = _nonempty_str(kind, field, v)
    return v if v.startswith("/") else sandbox_relative(kind, field, v, v)


def _number_text(kind: str, field: str, whole: Any, item: Any) -> str | None:
    """An int or float item as its text (None if item is neither); bools are not numbers."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        try:
            return int.__repr__(item)  # the digits, whatever a subclass's __str__ says
        except ValueError:  # over 4300 digits: CPython refuses the conversion
            raise _fail(
                kind, field, whole, f"number of {item.bit_length()} bits is too long"
            ) from None
    if isinstance(item, float):
        return float.__repr__(item)
    return None


def _str_list(kind: str, field: str, v: Any) -> list[str]:
    if type(v) is list:  # the common case, checked in C: every item an ASCII str, no NUL
        try:
            joined = "".join(v)
        except TypeError:  # some item is not a str: the loop below says which
            pass
        else:
            if joined.isascii() and "\0" not in joined and all(type(a) is str for a in v):
                return v[:]
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise _fail(kind, field, v, "must be a list of strings")
    out = []
    for item in v:
        if type(item) is str and item.isascii() and "\0" not in item:  # the common case
            out.append(item)
        elif isinstance(item, str):
            out.append(_text(kind, field, v, item, "item "))
        else:
            text = _number_text(kind, field, v, item)
            if text is None:
                raise _fail(kind, field, v, f"item {show(item, 60)} is not a string or number")
            out.append(text)
    return out


def _env(kind: str, field: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must be a dict of str -> str")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str):
            raise _fail(kind, field, v, f"bad variable name {show(k, 60)}")
        k = _text(kind, field, v, k, "variable name ")
        if not k or "=" in k:
            raise _fail(kind, field, v, f"bad variable name {show(k, 60)}")
        if isinstance(val, str):
            out[k] = _text(kind, field, v, val, f"value of {show(k, 60)}: ")
            continue
        text = _number_text(kind, field, v, val)
        if text is None:
            raise _fail(kind, field, v, f"value of {show(k, 60)} must be a string or number")
        out[k] = text
    return out


def _duration(kind: str, field: str, v: Any) -> float:
    try:
        seconds = parse_duration(v)
    except ValueError as e:
        raise _fail(kind, field, v, str(e)) from None
    if seconds <= 0:
        raise _fail(kind, field, v, "must be > 0")
    if seconds > MAX_DURATION_S:
        raise _fail(kind, field, v, f"must be at most 10 years ({MAX_DURATION_S:.0f} s)")
    return seconds


def _callable(kind: str, field: str, v: Any) -> Any:
    if v is not None and not callable(v):
        raise _fail(kind, field, v, "must be a callable (a function to run in the pilot)")
    return v


def _args(kind: str, field: str, v: Any) -> tuple:
    if not isinstance(v, (tuple, list)):
        raise _fail(kind, field, v, "must be a tuple or list of positional arguments")
    return tuple(v)


def _kwargs(kind: str, field: str, v: Any) -> dict:
    if type(v) is dict and not v:
        return v
    if not isinstance(v, dict) or not all(type(k) is str for k in v):
        raise _fail(kind, field, v, "must be a dict of keyword arguments (str keys)")
    return v


# what a function task cannot have: it runs in a persistent worker process, not a command
_NOT_FOR_FUNCTIONS = {
    "arguments": "give the function's arguments as args=(...), kwargs={...}",
    "shell": "a function runs in a Python worker, not a shell",
    "pre_exec": "a function runs in a persistent worker: no per-call shell lines",
    "post_exec": "a function runs in a persistent worker: no per-call shell lines",
    "sandbox": "function workers share their pilot's directory",
    "input_staging": "not for function tasks: stage into pilot:/// with Pilot.stage_in",
    "output_staging": "not for function tasks: return the data, or write it to a shared path",
    "launcher": "a function's workers are launched by the pilot",
    "retries": "a function task that fails is not run again: retry in your code",
    "named_env": "function workers run in the pilot's own environment",
}


WORKER_OPTIONS = {
    "max_calls": (1, 10**9),
    "max_mem_mib": (0, MAX_MEM_MIB),
    "idle_s": (0, MAX_DURATION_S),
}


def _workers(kind: str, field: str, v: Any) -> dict:
    """Function workers' settings: {max_calls, max_mem_mib, idle_s} (agent/functions.py)."""
    if not isinstance(v, dict):
        raise _fail(kind, field, v, f"must be a dict with keys among {', '.join(WORKER_OPTIONS)}")
    for k, x in v.items():
        if type(k) is not str or k not in WORKER_OPTIONS:  # (type first: a key's own __eq__)
            raise _fail(
                kind, field, v, f"unknown key {show(k, 30)} (known: {', '.join(WORKER_OPTIONS)})"
            )
        lo, hi = WORKER_OPTIONS[k]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not lo <= x <= hi or x != x:
            raise _fail(kind, field, v, f"{k} = {show(x, 30)}: must be a number in [{lo}, {hi}]")
    return dict(v)


def _pilot_runtime(kind: str, field: str, v: Any) -> float:
    """A walltime. A bare number is seconds; one under a minute is refused: it is almost
    always minutes meant (RADICAL-Pilot's runtime=15 is 15 minutes) -- write '15m', or '15s'
    for a pilot that short. A string that is only a number ("15", a YAML `runtime: "15"`) is
    that number, under the same rule."""
    num = v
    if isinstance(v, str) and _BARE_NUMBER.fullmatch(v):
        num = float(v)
    seconds = _duration(kind, field, v)
    if isinstance(num, (int, float)) and not isinstance(num, bool) and seconds < 60:
        raise _fail(
            kind,
            field,
            v,
            f"a bare number is seconds, and a {num:g} s pilot is most "
            f"likely minutes meant (as in RADICAL-Pilot): write '{num:g}m', or "
            f"'{num:g}s' for seconds",
        )
    return seconds


_BARE_NUMBER = re.compile(r"\s*\d+(\.\d*)?\s*")


def _output(kind: str, field: str, v: Any) -> bool | str:
    # True: captured (task.stdout); False: discarded; str: written to that path (a relative
    # one in the task sandbox, which it may not leave)
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        v = _text(kind, field, v, v)
        if v.strip():
            return v if v.startswith("/") else sandbox_relative(kind, field, v, v)
    raise _fail(kind, field, v, "must be True (capture), False (discard) or a file path")


def _json_problem(v: Any, depth: int = 0) -> str | None:
    """None if v is JSON-like data that msgpack and JSON both carry, else what is wrong."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        return clean_text(v)
    if isinstance(v, int):
        return None if _INT64[0] <= v <= _INT64[1] else "integers must fit in 64 bits"
    if isinstance(v, float):
        return None if math.isfinite(v) else "numbers must be finite"
    if depth >= _MAX_NESTING:
        return f"nested deeper than {_MAX_NESTING} levels"
    if isinstance(v, (list, tuple)):
        for x in v:
            why = _json_problem(x, depth + 1)
            if why is not None:
                return why
        return None
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return f"keys must be strings, not {show(k, 60)}"
            why = clean_text(k) or _json_problem(x, depth + 1)
            if why is not None:
                return why
        return None
    return f"{type(v).__name__} is not JSON-like data (str, number, bool, None, list, dict)"


def _tags(kind: str, field: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must be a dict, e.g. {'colocate': 'group-a'}")
    for k, val in v.items():
        if not isinstance(k, str):
            raise _fail(kind, field, v, f"tag name {show(k, 60)} must be a string")
        if k == "colocate" and not (isinstance(val, str) and val):
            raise _fail(kind, field, v, "'colocate' must name a group (a non-empty string)")
    why = _json_problem(v)
    if why is not None:
        raise _fail(kind, field, v, why)
    return dict(v)


def _choice(options: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    def check(kind: str, field: str, v: Any) -> str:
        if not isinstance(v, str) or v not in options:
            raise _fail(kind, field, v, f"must be one of {', '.join(options)}")
        return str.__str__(v)

    return check


def _staging(kind: str, field: str, v: Any) -> list[dict[str, str]]:
    """[{source, target, action}]: a plain path stands for {source: path}, the target
    defaults to the source's last component. The task-sandbox side (an input's target, an
    output's source) must stay inside the task sandbox."""
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise _fail(kind, field, v, "must be a list of {source, target, action} dicts or paths")
    inbound = field != "output_staging"
    out = []
    for item in v:
        if isinstance(item, str):
            item = {"source": item}
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            raise _fail(kind, field, v, f"item {show(item, 80)} needs a 'source' path")
        # (type first: `in` would call a key's own __eq__)
        unknown = [k for k in item if not (type(k) is str and k in ("source", "target", "action"))]
        if unknown:
            raise _fail(kind, field, v, f"item has unknown keys {show(unknown, 80)}")
        action = item.get("action", "copy")
        if not isinstance(action, str) or action not in STAGING_ACTIONS:
            raise _fail(
                kind,
                field,
                v,
                f"action {show(action, 40)} must be one of {', '.join(STAGING_ACTIONS)}",
            )
        src = _split_url(
            kind,
            field,
            v,
            _text(kind, field, v, item["source"], "source "),
            sandbox_side=not inbound,
        )
        target = item.get("target")
        if isinstance(target, str):
            target = _split_url(
                kind, field, v, _text(kind, field, v, target, "target "), sandbox_side=inbound
            )
        if target is None:
            target = os.path.basename(os.path.normpath(src.replace("pilot://", "", 1)))
            if target in ("", ".", "..", "/"):
                raise _fail(kind, field, v, f"source {show(src, 60)} has no name: give a 'target'")
        elif not isinstance(target, str):
            raise _fail(kind, field, v, f"target {show(target, 60)} must be a path")
        else:
            target = _text(kind, field, v, target, "target ")
        if inbound:  # outer source -> sandbox target
            if not src.strip():
                raise _fail(kind, field, v, "source must not be empty")
            target = sandbox_relative(kind, field, v, target)
        else:  # sandbox source -> outer target
            src = sandbox_relative(kind, field, v, src)
            if not target.strip():
                raise _fail(kind, field, v, "target must not be empty")
        out.append({"source": src, "target": target, "action": str.__str__(action)})
    return out


def _bool(kind: str, field: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _fail(kind, field, v, "must be True or False")
    return v


def _launcher_options(kind: str, field: str, v: Any) -> dict[str, dict]:
    if not isinstance(v, dict):
        raise _fail(kind, field, v, "must map launcher names to option dicts")
    for name, opts in v.items():
        if not isinstance(name, str) or name not in LAUNCHERS:
            raise _fail(
                kind, field, v, f"{show(name, 60)} is not a launcher ({', '.join(LAUNCHERS)})"
            )
        if not isinstance(opts, dict):
            raise _fail(kind, field, v, f"options of {name!r} must be a dict")
        # they travel in agent.json and on the command lines of launchers: JSON-like only
        why = _json_problem(opts)
        if why is not None:
            raise _fail(kind, field, v, f"options of {name!r}: {why}")
    return {str.__str__(k): dict(o) for k, o in v.items()}


def _partitions(kind: str, field: str, v: Any) -> int | list[dict]:
    """P (equal partitions) or [{"nodes": n, "launcher": name}, ...]; the sizes are checked
    against `nodes` in check_complete."""
    if isinstance(v, bool):
        raise _fail(kind, field, v, "must be a partition count or a list of partitions")
    if isinstance(v, (int, float)):
        return _int(1, MAX_NODES)(kind, field, v)
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise _fail(
            kind,
            field,
            v,
            "must be a partition count or a list of {'nodes': N, 'launcher': NAME} dicts",
        )
    out = []
    for i, item in enumerate(v):
        if not isinstance(item, dict):
            raise _fail(kind, field, v, f"item {i} must be a dict with 'nodes' (and 'launcher')")
        # (type first: `in` would call a key's own __eq__)
        unknown = [k for k in item if not (type(k) is str and k in ("nodes", "launcher"))]
        if unknown:
            raise _fail(
                kind,
                field,
                v,
                f"item {i}: unknown key {show(unknown[0], 40)} (expected 'nodes', 'launcher')",
            )
        if "nodes" not in item:
            raise _fail(kind, field, v, f"item {i} has no 'nodes'")
        n = item["nodes"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _fail(kind, field, v, f"item {i}: nodes = {show(n, 40)} must be an integer >= 1")
        launcher = item.get("launcher")
        if launcher is not None and (not isinstance(launcher, str) or launcher not in LAUNCHERS):
            raise _fail(
                kind,
                field,
                v,
                f"item {i}: launcher = {show(launcher, 40)} is not a "
                f"launch method ({', '.join(LAUNCHERS)})",
            )
        out.append({"nodes": int(n), "launcher": None if launcher is None else str(launcher)})
    if not out:
        raise _fail(kind, field, v, "an empty list: give at least one partition")
    return out


def _launch_model(kind: str, field: str, v: Any) -> Any:
    """A simulated pilot's launch costs: {method: {cost: seconds}} or a JSON file's path."""
    if v is None:
        return None
    from ._launch_costs import check_model

    why = check_model(v, tuple(LAUNCHERS))
    if why is not None:
        raise _fail(kind, field, v, why)
    return os.path.abspath(v) if isinstance(v, str) else {str(k): dict(c) for k, c in v.items()}


def partition_layout(
    n_nodes: int, partitions: int | list[dict] | None, launcher: str | None = None
) -> list[tuple[int, int, str | None]]:
    """[(first node index, node count, launcher or None for the pilot's)] of each partition.
    One contract for the client (which checks tasks against partitions at submit) and the
    agent (which builds them): P equal partitions take consecutive nodes, the first
    n_nodes % P of them one node more."""
    if partitions is None or partitions == 1:
        return [(0, n_nodes, launcher)]
    if isinstance(partitions, int):
        size, extra = divmod(n_nodes, partitions)
        sizes = [(size + (i < extra), launcher) for i in range(partitions)]
    else:
        sizes = [(p["nodes"], p.get("launcher") or launcher) for p in partitions]
    out, first = [], 0
    for n, lm in sizes:
        out.append((first, n, lm))
        first += n
    return out


def _metadata(kind: str, field: str, v: Any) -> Any:
    # free for the user, but it is journaled: whatever msgpack cannot carry is refused now
    try:
        msgspec.msgpack.encode(v)
    except Exception as e:  # noqa: BLE001 -- TypeError, OverflowError, UnicodeEncodeError, RecursionError...
        raise _fail(kind, field, v, f"must be msgpack-serialisable data: {show(e, 120)}") from None
    return v


class _Description:
    """Fixed fields, each checked on assignment; unknown fields are an error.

    Only fields set away from their default are stored (a queued task costs little memory);
    a mutable default (list, dict) is materialized on first access so in-place edits stick.
    """

    _kind = "Description"
    _fields: dict[str, tuple[Any, Callable[[str, str, Any], Any]]] = {}
    # names people bring from other systems (RADICAL-Pilot, Slurm) -> what to use here: a
    # closest spelling is often the wrong field ('cores' is not 'nodes', 'pilot' not 'priority')
    _aliases: dict[str, str] = {}
    __slots__ = ("values",)
    values: dict[str, Any]
    """{field: checked value} of the fields set away from their defaults: the description's
    own dict, read without a copy where descriptions go by the thousand (routing, the wire
    spec, the journal). Read it; change a field by assigning the field (a write into this
    dict skips its check). `TaskDescription.values` is the slot itself:
    `.__set__(d, values)` fills a description made with object.__new__ (as from_checked)."""

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        if from_dict is None:
            given = kwargs
        elif isinstance(from_dict, dict):
            given = dict(from_dict)
            given.update(kwargs)
        else:
            raise DescriptionError(self._kind, "(itself)", from_dict, "expected a dict of fields")
        # the fields are checked here rather than through setattr: a task description is
        # built 100k times a second
        kind, fields, values = self._kind, self._fields, {}
        object.__setattr__(self, "values", values)
        for name, value in given.items():
            spec = fields.get(name)
            if spec is None:
                name = self._unknown(name, value)
                spec = fields[name]
            values[name] = spec[1](kind, name, value)

    @classmethod
    def from_checked(cls, values: dict[str, Any]):
        """A description from values already checked field by field (no copy, no re-check):
        for a caller that builds many from parts it validated once (pf.Executor,
        pilotfish.workload). What a whole description must satisfy is still checked at
        submit (check_complete)."""
        d = object.__new__(cls)
        object.__setattr__(d, "values", values)
        return d

    def _unknown(self, name: Any, value: Any) -> str:
        """The field a str subclass names; else DescriptionError (with a suggestion)."""
        if not isinstance(name, str):
            raise DescriptionError(self._kind, show(name, 60), value, "field names must be strings")
        if type(name) is not str and str.__str__(name) in self._fields:
            return str.__str__(name)
        # (difflib is quadratic: no suggestion for a name far longer than any field's)
        alias = self._aliases.get(name) if isinstance(name, str) else None
        close = (
            difflib.get_close_matches(name, self._fields, n=1)
            if alias is None and len(name) <= 64
            else []
        )
        hint = (
            f" (did you mean {alias}?)"
            if alias
            else f" (did you mean {close[0]!r}?)"
            if close
            else ""
        )
        raise DescriptionError(self._kind, name, value, f"unknown field{hint}")

    def __getattr__(self, name: str) -> Any:
        values = self.values
        if name in values:
            return values[name]
        spec = self._fields.get(name)
        if spec is None:
            raise AttributeError(f"{self._kind} has no field {name!r}")
        default = spec[0]
        if callable(default):
            value = self.values[name] = default()
            return value
        return default

    def __setattr__(self, name: str, value: Any) -> None:
        spec = self._fields.get(name)
        if spec is None:
            name = self._unknown(name, value)
            spec = self._fields[name]
        self.values[name] = spec[1](self._kind, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.values)

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "values", dict(state))

    def as_dict(self) -> dict[str, Any]:
        """Every field with its value (defaults included)."""
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.as_dict() == self.as_dict()  # type: ignore[attr-defined]  # as_dict: each description class has one

    def __repr__(self) -> str:
        # a function's callable and arguments are any Python objects (deeply nested, huge,
        # with a failing __repr__): shown cut; the validated fields in full, unless even they
        # are too deep for repr (metadata nested ~1000 levels passes msgpack)
        shown = ", ".join(f"{k}={_field_repr(k, v)}" for k, v in self.values.items())
        return f"{self._kind}({shown})"


_OPAQUE_FIELDS = frozenset(("function", "args", "kwargs"))


def _field_repr(name: str, value: Any) -> str:
    if name in _OPAQUE_FIELDS:
        return show(value, 400)
    try:
        return repr(value)
    except RecursionError:
        return show(value, 400)


_CONTAINER_FIELDS = frozenset(
    (
        "arguments",
        "environment",
        "pre_exec",
        "post_exec",
        "tags",
        "input_staging",
        "output_staging",
        "metadata",
    )
)


class TaskDescription(_Description):
    """A unit of work and its resource request: ranks x (cores, GPUs, memory) per rank.

    executable   program to run (searched in PATH when it has no '/'); no shell unless shell=True
    function, args, kwargs  instead of executable: a Python callable run as function(*args,
                 **kwargs) on a persistent worker in the pilot (task.result, task.exception);
                 ranks > 1: on that many ranks, with comm= (an mpi4py communicator)
    arguments    list of arguments
    environment  extra environment variables
    sandbox      working directory (default: the pilot's task directory)
    pre_exec, post_exec  shell lines run before / after the executable (imply a shell)
    shell        run `executable arguments...` through /bin/sh -c
    ranks, cores_per_rank, gpus_per_rank, mem_per_rank (MiB)
    launcher     launch method for this task (default: the pilot's), e.g. "mpirun"
    stdout, stderr  True: captured into task.stdout/stderr (default); False: discarded; or a path
    timeout      seconds or "90s"/"30m": the task's process group is killed after it
    duration     the expected run time (seconds or "90s"): a scheduling hint -- longer tasks
                 start first among equals, and short ones backfill -- never enforced
    priority     higher runs first
    pilot        run on this pilot (its uid) instead of where the TaskManager routes it
    retries      run a FAILED task again up to this many times, after a backoff (0.5 s doubling,
                 at most 30 s); a task canceled or killed at the pilot's end is not retried
    tags         e.g. {"colocate": "group"}: tasks of one group share a node
    name, metadata  free for the user
    input_staging, output_staging  [{source, target, action: copy|link|move|transfer|tarball}]
    stage_on_error  stage the outputs of a task that FAILED too (default: only of DONE tasks)
    restartable  when its node is drained (Pilot.shrink) the task is stopped and queued again
                 elsewhere instead of being waited for
    named_env    run in an environment the pilot prepared (Pilot.prepare_env)
    """

    _kind = "TaskDescription"
    _aliases = {
        "cores": "'cores_per_rank' (cores of each rank; 'ranks' = processes)",
        "cpu_processes": "'ranks'",
        "processes": "'ranks'",
        "ntasks": "'ranks'",
        "cpu_threads": "'cores_per_rank'",
        "threads_per_process": "'cores_per_rank'",
        "cpu_process_type": "'launcher' (e.g. 'mpiexec', 'prrte')",
        "gpus": "'gpus_per_rank'",
        "gpu_processes": "'gpus_per_rank'",
        "gpus_per_process": "'gpus_per_rank'",
        "mem": "'mem_per_rank' (MiB)",
        "memory": "'mem_per_rank' (MiB)",
        "mem_per_process": "'mem_per_rank' (MiB)",
        "runtime": "'timeout' (a limit: seconds or '90s') or 'duration' (an estimate)",
        "walltime": "'timeout' (a limit: seconds or '90s') or 'duration' (an estimate)",
        "uid": "'name' (uids are given by the TaskManager)",
        "input_files": "'input_staging'",
        "output_files": "'output_staging'",
    }
    _fields = {
        "executable": (None, _opt(_nonempty_str)),
        "arguments": (list, _str_list),
        "environment": (dict, _env),
        "sandbox": (None, _opt(_task_sandbox)),
        "pre_exec": (list, _str_list),
        "post_exec": (list, _str_list),
        "shell": (False, _bool),
        "ranks": (1, _int(1, MAX_RANKS, " (the most ranks one task can have)")),
        "cores_per_rank": (1, _int(1, MAX_CORES_PER_NODE, " (a rank runs on one node)")),
        "gpus_per_rank": (0, _int(0, MAX_GPUS_PER_NODE, " (a rank runs on one node)")),
        "mem_per_rank": (0, _int(0, MAX_MEM_MIB, " MiB (the placer's limit)")),
        "launcher": (None, _opt(_choice(LAUNCHERS))),
        "stdout": (True, _output),
        "stderr": (True, _output),
        "timeout": (None, _opt(_duration)),
        "duration": (None, _opt(_duration)),
        "priority": (0, _int(-(2**31), 2**31 - 1)),
        "retries": (0, _int(0, 100)),
        "pilot": (None, _opt(_nonempty_str)),
        "tags": (dict, _tags),
        "name": (None, _opt(_str)),
        "metadata": (None, _metadata),
        "input_staging": (list, _staging),
        "output_staging": (list, _staging),
        "stage_on_error": (False, _bool),
        "restartable": (False, _bool),
        "named_env": (None, _opt(_nonempty_str)),
        "function": (None, _callable),
        "args": ((), _args),
        "kwargs": (dict, _kwargs),
    }
    __slots__ = ()

    def check_complete(self) -> None:
        """What only a whole description can tell (called at submit). Also checks again the
        fields that are containers: they may have been edited in place since they were set,
        and what is submitted must still be valid (and normalised) when it is sent."""
        values = self.values
        if values.get("function") is not None:
            if values.get("executable") is not None:
                raise DescriptionError(
                    self._kind,
                    "function",
                    values["function"],
                    "give either executable or function, not both "
                    f"(executable = {show(values['executable'], 40)})",
                )
            for name, why in _NOT_FOR_FUNCTIONS.items():
                if name in values and values[name] not in ((), [], {}, False, None):
                    raise DescriptionError(
                        self._kind, name, values[name], f"not for a function task: {why}"
                    )
            if values.get("timeout") is not None and values.get("ranks", 1) > 1:
                raise DescriptionError(
                    self._kind,
                    "timeout",
                    values["timeout"],
                    "not for a function on several ranks (it is raised "
                    "inside the call, which all ranks would have to see)",
                )
            if isinstance(values.get("stdout"), str) or isinstance(values.get("stderr"), str):
                field = "stdout" if isinstance(values.get("stdout"), str) else "stderr"
                raise DescriptionError(
                    self._kind,
                    field,
                    values[field],
                    "not for a function task: its output is captured",
                )
        elif values.get("executable") is None:
            raise DescriptionError(
                self._kind, "executable", None, "is required (or function=, for a Python function)"
            )
        elif "args" in values or "kwargs" in values:
            field = "args" if "args" in values else "kwargs"
            raise DescriptionError(
                self._kind,
                field,
                values[field],
                "is for function tasks: an executable takes 'arguments'",
            )
        fields = self._fields
        for name, value in values.items():
            if name in _CONTAINER_FIELDS:  # (replacing a value keeps the dict's size: safe)
                values[name] = fields[name][1](self._kind, name, value)

    @property
    def cores(self) -> int:
        """Cores of the whole task: ranks x cores_per_rank."""
        return self.ranks * self.cores_per_rank

    @property
    def gpus(self) -> int:
        """GPUs of the whole task: ranks x gpus_per_rank."""
        return self.ranks * self.gpus_per_rank


class PilotDescription(_Description):
    """A placeholder job: nodes x (cores, GPUs, memory) for a walltime.

    resource        "local" (default: an agent process on this machine), "slurm", "pbs", "lsf",
                    "flux", "simulated" (nothing runs: each task takes its `duration` on a
                    virtual clock; see pilotfish.agent.simulation)
    nodes           number of nodes
    cores_per_node, gpus_per_node, mem_per_node (MiB)
                    default: this machine's shape for "local", discovered for batch systems.
                    A local shape larger than this machine is an emulated machine: tasks are
                    placed as on the declared nodes and run here (planning and scale tests).
    runtime         walltime: seconds or "90s", "30m", "2h", "HH:MM:SS"
    sandbox         pilot directory (default: <session>/<pilot uid>)
    queue, project, reservation   passed to the batch system
    launcher        default launch method ("direct" for local)
    launcher_options  per launcher, e.g. {"srun": {"mpi": "pmi2"}, "mpirun": {"prefix": ...}},
                    {"nodes": {"lost_after_s": 10, "beat_s": 1, "start_timeout": 60}}
    node_executors  a Slurm pilot on other hosts runs its single-node tasks through one
                    node executor per node (launcher "nodes"; no launcher process per task).
                    Default None: on for such pilots, off for simulated ones; True on a
                    simulated pilot: modeled (launch model "nodes"); False: off (the pilot's
                    launcher, e.g. srun, launches every task)
    launch_model    resource="simulated" only: launch costs per launch method (a dict or a JSON
                    file; see pilotfish.agent.simulation), over the fitted defaults
    partitions      P: the nodes split into P equal partitions, each with its own launcher
                    instance (its own PRRTE DVM), placer and queue; or a list
                    [{"nodes": 12, "launcher": "prrte"}, {"nodes": 4, "launcher": "direct"}]
                    whose sizes add up to `nodes`. Default 1. A task never spans partitions.
    subagents       each partition served by an agent process of its own (a sub-agent), under
                    a root that routes whole submit batches (pilotfish.agent.subagent). Default
                    None: on for a pilot of several partitions and at least 512 nodes; True: on
                    (several partitions needed); False: one agent. Not for simulated pilots
                    (their launch model's cpu.subagents models them)
    environment     extra environment for the agent and its tasks
    """

    _kind = "PilotDescription"
    _aliases = {
        "cores": "'cores_per_node' (per node)",
        "gpus": "'gpus_per_node' (per node)",
        "walltime": "'runtime'",
        "time": "'runtime'",
        "access_schema": "'launcher'",
        "account": "'project'",
        "partition": "'queue' (the batch queue) or 'partitions' (launcher partitions of the pilot)",
    }
    _fields = {
        "resource": ("local", _choice(RESOURCES)),
        "nodes": (1, _int(1, MAX_NODES)),
        "cores_per_node": (None, _opt(_int(1, MAX_CORES_PER_NODE))),
        "gpus_per_node": (
            None,
            _opt(_int(0, MAX_GPUS_PER_NODE, " (the most GPUs a node can have)")),
        ),
        "mem_per_node": (None, _opt(_int(0, MAX_MEM_MIB, " MiB"))),
        "runtime": (3600.0, _pilot_runtime),
        "workers": (dict, _workers),
        "sandbox": (None, _opt(_nonempty_str)),
        "queue": (None, _opt(_str)),
        "project": (None, _opt(_str)),
        "reservation": (None, _opt(_str)),
        "launcher": (None, _opt(_choice(LAUNCHERS))),
        "launcher_options": (dict, _launcher_options),
        "node_executors": (None, _opt(_bool)),
        "partitions": (1, _partitions),
        "subagents": (None, _opt(_bool)),
        "launch_model": (None, _launch_model),
        "environment": (dict, _env),
        "name": (None, _opt(_str)),
    }
    __slots__ = ()

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        super().__init__(from_dict, **kwargs)
        self.check_complete()

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.values.get(name, _MISSING) if type(name) is str else _MISSING
        super().__setattr__(name, value)
        try:
            self.check_complete()
        except DescriptionError:
            if old is _MISSING:  # a rejected assignment changes nothing
                del self.values[name]
            else:
                self.values[name] = old
            raise

    def check_complete(self) -> None:
        """What only the fields together can tell: the placer's core bitsets must fit."""
        values = self.values
        nodes, cores = values.get("nodes", 1), values.get("cores_per_node")
        if cores is not None and nodes * cores > MAX_TOTAL_CORES:
            raise DescriptionError(
                self._kind,
                "nodes",
                nodes,
                f"nodes x cores_per_node = {nodes * cores} must be <= "
                f"{MAX_TOTAL_CORES} (the most cores a pilot can have)",
            )
        if values.get("launch_model") is not None and values.get("resource") != "simulated":
            raise DescriptionError(
                self._kind,
                "launch_model",
                values["launch_model"],
                "only a simulated pilot (resource='simulated') has a launch model",
            )
        parts = values.get("partitions", 1)
        if values.get("subagents") is True and (
            (parts if isinstance(parts, int) else len(parts)) < 2
            or values.get("resource") == "simulated"
        ):
            raise DescriptionError(
                self._kind,
                "subagents",
                True,
                "a simulated pilot models sub-agents in its launch model (cpu.subagents)"
                if values.get("resource") == "simulated"
                else "a sub-agent serves a partition: give the pilot several (partitions=P)",
            )
        if isinstance(parts, int) and parts > nodes:
            raise DescriptionError(
                self._kind,
                "partitions",
                parts,
                f"more partitions than nodes ({nodes}): a partition owns whole nodes",
            )
        if isinstance(parts, list) and sum(p["nodes"] for p in parts) != nodes:
            raise DescriptionError(
                self._kind,
                "partitions",
                parts,
                f"partition sizes add up to {sum(p['nodes'] for p in parts)} "
                f"nodes, the pilot has {nodes}",
            )


_MISSING = object()

RESTART_POLICIES = ("on-failure", "never")


def service_name_problem(v: Any) -> str | None:
    """Why v cannot name a service group (it names its members' uids too), or None."""
    if (
        not isinstance(v, str)
        or not v
        or len(v) > 64
        or not all(c.isalnum() or c in "_-" for c in v)
    ):
        return "must be 1-64 letters, digits, '_' or '-' (it names the group and its members)"
    return None


def _service_name(kind: str, field: str, v: Any) -> str:
    why = service_name_problem(v)
    if why is not None:
        raise _fail(kind, field, v, why)
    return str.__str__(v)  # a str subclass (numpy.str_) as a plain str: the wire carries it


class CheckedCall(TaskDescription):
    """A function task's description its maker built from a template it checked whole
    (check_complete) once, only `args` (a tuple) and `kwargs` (str keys) differing from
    call to call, and that nobody else holds before it is submitted: submit does not check
    it again. pilotfish.rp's RAPTOR calls are made so, by the thousand (RaptorState)."""

    __slots__ = ()

    def check_complete(self) -> None:
        pass


class ServiceDescription(_Description):
    """A long-running service: each member of a group (TaskManager.submit_service_group) is
    one of these, kept up by the pilot until the group shrinks or stops.

    name         the group's name (unique in the pilot): members are <name>.<k>
    executable, arguments  a program; or function, args, kwargs: a Python callable run as
                 function(*args, **kwargs) in its own process for the member's life
    environment, ranks, cores_per_rank, gpus_per_rank, mem_per_rank, launcher, pre_exec
                 as for TaskDescription
    ready_timeout  seconds a member may run before it announces its endpoint (default 60):
                 then it is stopped and FAILED, with its stderr tail
    restart      "on-failure" (default): a member that fails is replaced, up to
                 max_restarts (default 3) times per member slot; "never"
    health_interval  seconds between health checks of members that announced through
                 pilotfish.service.announce (it answers, running its probe if it has one);
                 a member silent for 3 intervals, or whose probe fails, has failed
    leave_timeout  seconds a member asked to leave may take to finish (default 30): then
                 it is stopped
    pilot        the pilot to run on (default: the TaskManager's first live pilot)
    """

    _kind = "ServiceDescription"
    _aliases = {
        "replicas": "submit_service_group(desc, replicas=N)",
        "cores": "'cores_per_rank'",
        "gpus": "'gpus_per_rank'",
    }
    _fields = {
        "name": (None, _opt(_service_name)),
        "executable": (None, _opt(_nonempty_str)),
        "arguments": (list, _str_list),
        "function": (None, _callable),
        "args": ((), _args),
        "kwargs": (dict, _kwargs),
        # as a task's (one definition, one check)
        **{
            k: TaskDescription._fields[k]
            for k in (
                "environment",
                "pre_exec",
                "ranks",
                "cores_per_rank",
                "gpus_per_rank",
                "mem_per_rank",
                "launcher",
            )
        },
        "ready_timeout": (60.0, _duration),
        "restart": ("on-failure", _choice(RESTART_POLICIES)),
        "max_restarts": (3, _int(0, 1000)),
        "health_interval": (None, _opt(_duration)),
        "leave_timeout": (30.0, _duration),
        "pilot": (None, _opt(_nonempty_str)),
    }
    __slots__ = ()

    def check_complete(self) -> None:
        """What only the fields together can tell (raises DescriptionError): a name, and
        either an executable or a function (not both)."""
        values = self.values
        if values.get("name") is None:
            raise DescriptionError(self._kind, "name", None, "is required (it names the group)")
        if (values.get("function") is None) == (values.get("executable") is None):
            field = "function" if values.get("function") is not None else "executable"
            raise DescriptionError(
                self._kind,
                field,
                values.get(field),
                "give either executable or function (one of them)",
            )
        if values.get("function") is not None and values.get("arguments"):
            raise DescriptionError(
                self._kind,
                "arguments",
                values["arguments"],
                "a function service takes args=(...), kwargs={...}",
            )
        if values.get("function") is None and ("args" in values or "kwargs" in values):
            field = "args" if "args" in values else "kwargs"
            raise DescriptionError(
                self._kind,
                field,
                values[field],
                "is for function services: an executable takes 'arguments'",
            )
        for name in ("arguments", "environment", "pre_exec"):
            if name in values:
                values[name] = self._fields[name][1](self._kind, name, values[name])


def check_descriptions(descs: Iterable[Any], cls: type[_Description]) -> list[Any]:
    """Accept descriptions or dicts; re-check each one, naming its index on error."""
    if isinstance(descs, (str, bytes, bytearray)) or not isinstance(descs, Iterable):
        raise DescriptionError(
            cls._kind, "(itself)", descs, f"expected a {cls.__name__}, a dict or a list of them"
        )
    out = []
    for i, d in enumerate(descs):
        try:
            if isinstance(d, dict):
                d = cls(d)
            elif not isinstance(d, cls):
                raise DescriptionError(
                    cls._kind, "(itself)", d, f"expected a {cls.__name__} or a dict"
                )
            # (no copy: what runs is fixed when the task is submitted, later edits to the
            # description change nothing, and a queued task costs half the memory)
            d.check_complete()
        except DescriptionError as e:
            raise DescriptionError(e.kind, e.field, e.value, e.why, index=i) from None
        out.append(d)
    return out


def rank_capacity(
    shape: list,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    enough: int | None = None,
) -> int:
    """How many ranks of this size nodes of these (cores, gpus, mem) hold at once (counting
    stops at `enough`: node lists can be long)."""
    capacity = 0
    for c, g, m in shape:
        fit = c // cores_per_rank
        if gpus_per_rank:
            fit = min(fit, g // gpus_per_rank)
        if mem_per_rank and m:
            fit = min(fit, m // mem_per_rank)
        capacity += fit
        if enough is not None and capacity >= enough:
            break
    return capacity


def misfit(
    ranks: int,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    shape: list[tuple[int, int, int]],
) -> tuple[str, str] | None:
    """None if nodes of this shape [(cores, gpus, mem MiB; 0 = not tracked)] can ever hold
    the request, else (field, why) -- shared by the client (at submit) and the agent (on
    receipt). None also promises that the Rust placer accepts the request: the agent relies
    on it, whoever built the request."""
    problem = _unplaceable(ranks, cores_per_rank, gpus_per_rank, mem_per_rank)
    if problem is not None:
        return problem
    if not shape:
        return "ranks", "the pilot has no nodes"
    max_c = max(c for c, _, _ in shape)
    max_g = max(g for _, g, _ in shape)
    if cores_per_rank > max_c:
        return "cores_per_rank", f"larger than the largest node ({max_c} cores)"
    if gpus_per_rank > max_g:
        return "gpus_per_rank", f"larger than the largest node ({max_g} GPUs)"
    if mem_per_rank:
        mems = [m for _, _, m in shape]
        if all(mems) and mem_per_rank > max(mems):  # (a node with 0 does not track memory)
            return "mem_per_rank", f"larger than the largest node ({max(mems)} MiB)"
    capacity = rank_capacity(shape, cores_per_rank, gpus_per_rank, mem_per_rank, enough=ranks)
    if capacity >= ranks:
        return None
    return "ranks", f"more ranks of this size than the pilot holds ({capacity})"


def misfit_partitions(
    ranks: int,
    cores_per_rank: int,
    gpus_per_rank: int,
    mem_per_rank: int,
    shapes: list[list[tuple[int, int, int]]],
) -> tuple[str, str] | None:
    """misfit() against a pilot made of partitions (a task never spans two): None if some
    partition can hold the request, else the reason the largest one cannot."""
    if len(shapes) <= 1:
        return misfit(
            ranks, cores_per_rank, gpus_per_rank, mem_per_rank, shapes[0] if shapes else []
        )
    first = None
    for shape in shapes:
        problem = misfit(ranks, cores_per_rank, gpus_per_rank, mem_per_rank, shape)
        if problem is None:
            return None
        first = first or problem
    biggest = max(shapes, key=lambda s: sum(c for c, _, _ in s))
    problem = misfit(ranks, cores_per_rank, gpus_per_rank, mem_per_rank, biggest) or first
    return problem[0], (
        f"{problem[1].replace('the pilot holds', 'a partition holds')} -- "
        f"larger than every one of the pilot's {len(shapes)} partitions "
        f"(a task never spans partitions)"
    )


def _unplaceable(
    ranks: Any, cores_per_rank: Any, gpus_per_rank: Any, mem_per_rank: Any
) -> tuple[str, str] | None:
    """(field, why) for a request outside what the placer's types hold (u32 counts, at most
    MAX_PLACER_ENCODED numbers per allocation), else None."""
    for field, v, lo, hi in (
        ("ranks", ranks, 1, MAX_RANKS),
        ("cores_per_rank", cores_per_rank, 1, MAX_CORES_PER_NODE),
        ("gpus_per_rank", gpus_per_rank, 0, MAX_GPUS_PER_NODE),
        ("mem_per_rank", mem_per_rank, 0, MAX_MEM_MIB),
    ):
        if isinstance(v, bool) or not isinstance(v, int):
            return field, "must be an integer"
        if not lo <= v <= hi:
            return field, f"must be between {lo} and {hi}"
    if ranks * (3 + cores_per_rank + gpus_per_rank) > MAX_PLACER_ENCODED:
        return "ranks", (
            f"ranks x (3 + cores_per_rank + gpus_per_rank) must be <= "
            f"{MAX_PLACER_ENCODED} (the most the placer holds for one task)"
        )
    return None


__all__ = [
    "TaskDescription",
    "PilotDescription",
    "check_descriptions",
    "misfit",
    "misfit_partitions",
    "partition_layout",
    "RESOURCES",
    "LAUNCHERS",
    "MAX_NODES",
    "MAX_CORES_PER_NODE",
    "MAX_GPUS_PER_NODE",
    "MAX_TOTAL_CORES",
    "MAX_MEM_MIB",
    "MAX_RANKS",
    "MAX_DURATION_S",
]


def declared_shape(d: PilotDescription) -> list[tuple[int, int, int]] | None:
    """Per node (cores, GPUs, memory MiB) of a pilot of this description, as the client
    declares it before the pilot starts (a local or simulated pilot's missing values are this
    machine's); None where only the agent learns it (a batch resource without
    cores_per_node). The one rule for the pilot manager and `pilotfish validate`."""
    from ._util import machine_shape

    if d.resource in ("local", "simulated"):
        cores, gpus, mem = machine_shape()
        return [
            (
                d.cores_per_node or cores,
                gpus if d.gpus_per_node is None else d.gpus_per_node,
                mem if d.mem_per_node is None else d.mem_per_node,
            )
        ] * d.nodes
    if d.cores_per_node is not None:
        return [(d.cores_per_node, d.gpus_per_node or 0, d.mem_per_node or 0)] * d.nodes
    return None
