"""The field checkers of the description value objects (descriptions.py): each takes
(kind, field, value) and returns the normalized value or raises a `DescriptionError` naming
the field, the value and why. Combinators build checkers from parameters (`int_range`,
`optional`, `choice`); the rest check one field's form (staging directives, environment,
launcher options, partitions, ...).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Iterable

import msgspec

from ._errors import DescriptionError, show
from ._paths import clean_text, sandbox_relative
from ._shapes import MAX_DURATION_S, MAX_MEM_MIB, MAX_NODES
from ._util import parse_duration

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
        raise fail(
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
            raise fail(
                kind,
                field,
                whole,
                f"{show(path, 60)}: the task's side of staging is "
                f"its own directory: a relative path or task:///path",
            )
        return rest or "."
    if scheme == "task":
        raise fail(
            kind,
            field,
            whole,
            f"{show(path, 60)}: task:// names the task's own "
            f"directory, which is the other side of this directive",
        )
    if scheme == "pilot":
        norm = os.path.normpath(rest or ".")
        if norm.startswith("..") or os.path.isabs(norm):
            raise fail(kind, field, whole, f"{show(path, 60)} leaves the pilot's shared directory")
        return "pilot://" + norm
    if scheme == "file" and not rest.startswith("/"):
        raise fail(
            kind,
            field,
            whole,
            f"{show(path, 60)}: file:// needs an absolute path (file:///abs/path)",
        )
    return rest


_INT64 = (-(2**63), 2**64 - 1)  # what msgpack (the wire, the journal) carries
_MAX_NESTING = 32  # JSON-like data (tags, launcher options)


def fail(kind: str, field: str, value: object, why: str) -> DescriptionError:
    return DescriptionError(kind, field, value, why)


def _text(kind: str, field: str, whole: Any, s: str, what: str = "") -> str:
    """s (a str) as an exact str that can cross every boundary (UTF-8, no NUL), else raise;
    `what` names the part of the field for the error ("item ", "key ")."""
    if type(s) is not str:
        s = str.__str__(s)  # a str subclass: its text, not whatever its methods say
    why = clean_text(s)
    if why is not None:
        raise fail(kind, field, whole, f"{what}{show(s, 60)} {why}" if what else why)
    return s


# -- field checkers: (kind, field, value) -> normalized value, or raise -------------------


def int_range(lo: int, hi: int, why_hi: str = "") -> Callable[[str, str, Any], int]:
    def check(kind: str, field: str, v: Any) -> int:
        if type(v) is not int:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise fail(kind, field, v, f"must be an integer >= {lo}")
            if isinstance(v, int):
                v = int.__index__(v)  # an int subclass (IntEnum): its value
            elif v.is_integer():  # False for nan and inf
                v = int(v)
            else:
                raise fail(kind, field, v, f"must be an integer >= {lo}")
        if v < lo:
            raise fail(kind, field, v, f"must be >= {lo}")
        if v > hi:
            raise fail(kind, field, v, f"must be <= {hi}{why_hi}")
        return v

    return check


def optional(check: Callable[[str, str, Any], Any]) -> Callable[[str, str, Any], Any]:
    def opt(kind: str, field: str, v: Any) -> Any:
        return None if v is None else check(kind, field, v)

    return opt


def string(kind: str, field: str, v: Any) -> str:
    if not isinstance(v, str):
        raise fail(kind, field, v, "must be a string")
    if type(v) is str and v.isascii() and "\0" not in v:
        return v
    return _text(kind, field, v, v)


def nonempty_string(kind: str, field: str, v: Any) -> str:
    v = string(kind, field, v)
    if not v.strip():
        raise fail(kind, field, v, "must not be empty")
    return v


def task_sandbox(kind: str, field: str, v: Any) -> str:
    # absolute: anywhere (checked against the pilot's own files at submit); relative: under
    # the pilot's tasks/ directory, which it may not leave
    v = nonempty_string(kind, field, v)
    return v if v.startswith("/") else sandbox_relative(kind, field, v, v)


def _number_text(kind: str, field: str, whole: Any, item: Any) -> str | None:
    """An int or float item as its text (None if item is neither); bools are not numbers."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        try:
            return int.__repr__(item)  # the digits, whatever a subclass's __str__ says
        except ValueError:  # over 4300 digits: CPython refuses the conversion
            raise fail(
                kind, field, whole, f"number of {item.bit_length()} bits is too long"
            ) from None
    if isinstance(item, float):
        return float.__repr__(item)
    return None


def string_list(kind: str, field: str, v: Any) -> list[str]:
    if type(v) is list:  # the common case, checked in C: every item an ASCII str, no NUL
        try:
            joined = "".join(v)
        except TypeError:  # some item is not a str: the loop below says which
            pass
        else:
            if joined.isascii() and "\0" not in joined and all(type(a) is str for a in v):
                return v[:]
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise fail(kind, field, v, "must be a list of strings")
    out = []
    for item in v:
        if type(item) is str and item.isascii() and "\0" not in item:  # the common case
            out.append(item)
        elif isinstance(item, str):
            out.append(_text(kind, field, v, item, "item "))
        else:
            text = _number_text(kind, field, v, item)
            if text is None:
                raise fail(kind, field, v, f"item {show(item, 60)} is not a string or number")
            out.append(text)
    return out


def env(kind: str, field: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise fail(kind, field, v, "must be a dict of str -> str")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str):
            raise fail(kind, field, v, f"bad variable name {show(k, 60)}")
        k = _text(kind, field, v, k, "variable name ")
        if not k or "=" in k:
            raise fail(kind, field, v, f"bad variable name {show(k, 60)}")
        if isinstance(val, str):
            out[k] = _text(kind, field, v, val, f"value of {show(k, 60)}: ")
            continue
        text = _number_text(kind, field, v, val)
        if text is None:
            raise fail(kind, field, v, f"value of {show(k, 60)} must be a string or number")
        out[k] = text
    return out


def duration(kind: str, field: str, v: Any) -> float:
    try:
        seconds = parse_duration(v)
    except ValueError as e:
        raise fail(kind, field, v, str(e)) from None
    if seconds <= 0:
        raise fail(kind, field, v, "must be > 0")
    if seconds > MAX_DURATION_S:
        raise fail(kind, field, v, f"must be at most 10 years ({MAX_DURATION_S:.0f} s)")
    return seconds


def a_callable(kind: str, field: str, v: Any) -> Any:
    if v is not None and not callable(v):
        raise fail(kind, field, v, "must be a callable (a function to run in the pilot)")
    return v


def args(kind: str, field: str, v: Any) -> tuple:
    if not isinstance(v, (tuple, list)):
        raise fail(kind, field, v, "must be a tuple or list of positional arguments")
    return tuple(v)


def kwargs(kind: str, field: str, v: Any) -> dict:
    if type(v) is dict and not v:
        return v
    if not isinstance(v, dict) or not all(type(k) is str for k in v):
        raise fail(kind, field, v, "must be a dict of keyword arguments (str keys)")
    return v


# what a function task cannot have: it runs in a persistent worker process, not a command
NOT_FOR_FUNCTIONS = {
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


def workers(kind: str, field: str, v: Any) -> dict:
    """Function workers' settings: {max_calls, max_mem_mib, idle_s} (agent/functions.py)."""
    if not isinstance(v, dict):
        raise fail(kind, field, v, f"must be a dict with keys among {', '.join(WORKER_OPTIONS)}")
    for k, x in v.items():
        if type(k) is not str or k not in WORKER_OPTIONS:  # (type first: a key's own __eq__)
            raise fail(
                kind, field, v, f"unknown key {show(k, 30)} (known: {', '.join(WORKER_OPTIONS)})"
            )
        lo, hi = WORKER_OPTIONS[k]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not lo <= x <= hi or x != x:
            raise fail(kind, field, v, f"{k} = {show(x, 30)}: must be a number in [{lo}, {hi}]")
    return dict(v)


def pilot_runtime(kind: str, field: str, v: Any) -> float:
    """A walltime. A bare number is seconds; one under a minute is refused: it is almost
    always minutes meant (RADICAL-Pilot's runtime=15 is 15 minutes) -- write '15m', or '15s'
    for a pilot that short. A string that is only a number ("15", a YAML `runtime: "15"`) is
    that number, under the same rule."""
    num = v
    if isinstance(v, str) and _BARE_NUMBER.fullmatch(v):
        num = float(v)
    seconds = duration(kind, field, v)
    if isinstance(num, (int, float)) and not isinstance(num, bool) and seconds < 60:
        raise fail(
            kind,
            field,
            v,
            f"a bare number is seconds, and a {num:g} s pilot is most "
            f"likely minutes meant (as in RADICAL-Pilot): write '{num:g}m', or "
            f"'{num:g}s' for seconds",
        )
    return seconds


_BARE_NUMBER = re.compile(r"\s*\d+(\.\d*)?\s*")


def output(kind: str, field: str, v: Any) -> bool | str:
    # True: captured (task.stdout); False: discarded; str: written to that path (a relative
    # one in the task sandbox, which it may not leave)
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        v = _text(kind, field, v, v)
        if v.strip():
            return v if v.startswith("/") else sandbox_relative(kind, field, v, v)
    raise fail(kind, field, v, "must be True (capture), False (discard) or a file path")


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


def tags(kind: str, field: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise fail(kind, field, v, "must be a dict, e.g. {'colocate': 'group-a'}")
    for k, val in v.items():
        if not isinstance(k, str):
            raise fail(kind, field, v, f"tag name {show(k, 60)} must be a string")
        if k == "colocate" and not (isinstance(val, str) and val):
            raise fail(kind, field, v, "'colocate' must name a group (a non-empty string)")
    why = _json_problem(v)
    if why is not None:
        raise fail(kind, field, v, why)
    return dict(v)


def launcher_names() -> tuple[str, ...]:
    """The registered launch methods (launch/__init__.py's LAUNCHERS; imported when first
    needed: this module stays cheap to import)."""
    from .launch import launchers

    return tuple(launchers())


def resource_names() -> tuple[str, ...]:
    """The registered batch systems (batch/registry.py)."""
    from .batch.registry import names

    return names()


def _launcher_dict() -> dict:
    from .launch import LAUNCHERS

    return LAUNCHERS


def _resource_dict() -> dict:
    from .batch.registry import SYSTEMS

    return SYSTEMS


def registered(
    names: Callable[[], tuple[str, ...]], table: Callable[[], dict]
) -> Callable[[str, str, Any], str]:
    """choice() over a registry's names, read when a value is checked: a plain str the
    registry holds passes at once (a task description is built 100k times a second); any
    other value is checked against the names with the plug-ins loaded."""
    held: list[dict] = []

    def check(kind: str, field: str, v: Any) -> str:
        if not held:
            held.append(table())
        if type(v) is str and v in held[0]:
            return v
        return choice(names())(kind, field, v)

    return check


def registered_launcher() -> Callable[[str, str, Any], str]:
    """A launch method's name (launch/__init__.py's LAUNCHERS)."""
    return registered(launcher_names, _launcher_dict)


def registered_resource() -> Callable[[str, str, Any], str]:
    """A batch system's name (batch/registry.py)."""
    return registered(resource_names, _resource_dict)


def choice(options: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    def check(kind: str, field: str, v: Any) -> str:
        if not isinstance(v, str) or v not in options:
            raise fail(kind, field, v, f"must be one of {', '.join(options)}")
        return str.__str__(v)

    return check


def staging(kind: str, field: str, v: Any) -> list[dict[str, str]]:
    """[{source, target, action}]: a plain path stands for {source: path}, the target
    defaults to the source's last component. The task-sandbox side (an input's target, an
    output's source) must stay inside the task sandbox."""
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise fail(kind, field, v, "must be a list of {source, target, action} dicts or paths")
    inbound = field != "output_staging"
    out = []
    for item in v:
        if isinstance(item, str):
            item = {"source": item}
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            raise fail(kind, field, v, f"item {show(item, 80)} needs a 'source' path")
        # (type first: `in` would call a key's own __eq__)
        unknown = [k for k in item if not (type(k) is str and k in ("source", "target", "action"))]
        if unknown:
            raise fail(kind, field, v, f"item has unknown keys {show(unknown, 80)}")
        action = item.get("action", "copy")
        if not isinstance(action, str) or action not in STAGING_ACTIONS:
            raise fail(
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
                raise fail(kind, field, v, f"source {show(src, 60)} has no name: give a 'target'")
        elif not isinstance(target, str):
            raise fail(kind, field, v, f"target {show(target, 60)} must be a path")
        else:
            target = _text(kind, field, v, target, "target ")
        if inbound:  # outer source -> sandbox target
            if not src.strip():
                raise fail(kind, field, v, "source must not be empty")
            target = sandbox_relative(kind, field, v, target)
        else:  # sandbox source -> outer target
            src = sandbox_relative(kind, field, v, src)
            if not target.strip():
                raise fail(kind, field, v, "target must not be empty")
        out.append({"source": src, "target": target, "action": str.__str__(action)})
    return out


def boolean(kind: str, field: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise fail(kind, field, v, "must be True or False")
    return v


def launcher_options(kind: str, field: str, v: Any) -> dict[str, dict]:
    if not isinstance(v, dict):
        raise fail(kind, field, v, "must map launcher names to option dicts")
    known = launcher_names()
    for name, opts in v.items():
        if not isinstance(name, str) or name not in known:
            raise fail(kind, field, v, f"{show(name, 60)} is not a launcher ({', '.join(known)})")
        if not isinstance(opts, dict):
            raise fail(kind, field, v, f"options of {name!r} must be a dict")
        # they travel in agent.json and on the command lines of launchers: JSON-like only
        why = _json_problem(opts)
        if why is not None:
            raise fail(kind, field, v, f"options of {name!r}: {why}")
    return {str.__str__(k): dict(o) for k, o in v.items()}


def partitions(kind: str, field: str, v: Any) -> int | list[dict]:
    """P (equal partitions) or [{"nodes": n, "launcher": name}, ...]; the sizes are checked
    against `nodes` in check_complete."""
    if isinstance(v, bool):
        raise fail(kind, field, v, "must be a partition count or a list of partitions")
    if isinstance(v, (int, float)):
        return int_range(1, MAX_NODES)(kind, field, v)
    if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, Iterable):
        raise fail(
            kind,
            field,
            v,
            "must be a partition count or a list of {'nodes': N, 'launcher': NAME} dicts",
        )
    out = []
    for i, item in enumerate(v):
        if not isinstance(item, dict):
            raise fail(kind, field, v, f"item {i} must be a dict with 'nodes' (and 'launcher')")
        # (type first: `in` would call a key's own __eq__)
        unknown = [k for k in item if not (type(k) is str and k in ("nodes", "launcher"))]
        if unknown:
            raise fail(
                kind,
                field,
                v,
                f"item {i}: unknown key {show(unknown[0], 40)} (expected 'nodes', 'launcher')",
            )
        if "nodes" not in item:
            raise fail(kind, field, v, f"item {i} has no 'nodes'")
        n = item["nodes"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise fail(kind, field, v, f"item {i}: nodes = {show(n, 40)} must be an integer >= 1")
        launcher = item.get("launcher")
        known = launcher_names()
        if launcher is not None and (not isinstance(launcher, str) or launcher not in known):
            raise fail(
                kind,
                field,
                v,
                f"item {i}: launcher = {show(launcher, 40)} is not a "
                f"launch method ({', '.join(known)})",
            )
        out.append({"nodes": int(n), "launcher": None if launcher is None else str(launcher)})
    if not out:
        raise fail(kind, field, v, "an empty list: give at least one partition")
    return out


def launch_model(kind: str, field: str, v: Any) -> Any:
    """A simulated pilot's launch costs: {method: {cost: seconds}} or a JSON file's path."""
    if v is None:
        return None
    from ._launch_costs import check_model

    why = check_model(v, launcher_names())
    if why is not None:
        raise fail(kind, field, v, why)
    return os.path.abspath(v) if isinstance(v, str) else {str(k): dict(c) for k, c in v.items()}


def metadata(kind: str, field: str, v: Any) -> Any:
    # free for the user, but it is journaled: whatever msgpack cannot carry is refused now
    try:
        msgspec.msgpack.encode(v)
    except Exception as e:  # noqa: BLE001 -- TypeError, OverflowError, UnicodeEncodeError, RecursionError...
        raise fail(kind, field, v, f"must be msgpack-serialisable data: {show(e, 120)}") from None
    return v
