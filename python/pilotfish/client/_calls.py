"""Function tasks' calls, pickled for the wire: the callable once per submit (cloudpickle), the
arguments with the standard pickler unless they refer to a module workers cannot import.
Used by TaskManager.submit_tasks and by service groups whose members are functions.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys

from .._errors import DescriptionError


def pickle_calls(descs: list, indices: list[int]) -> dict[int, tuple[bytes, bytes, bytes]]:
    """{index: (pickled function, pickled (args, kwargs), the function's digest)} for the
    function tasks among descs[indices]. A callable is pickled (and digested) once per
    submit. Arguments go through the standard
    pickler (fast) unless they refer to __main__ (a script's own classes and functions, which
    a worker cannot import): cloudpickle carries those by value. DescriptionError names the
    task and the field that cannot be pickled."""
    out: dict[int, tuple[bytes, bytes, bytes]] = {}
    fns: dict[int, tuple[bytes, bytes]] = {}
    for i in indices:
        d = descs[i]
        v = d.values
        fn = v.get("function")
        if fn is None:
            continue
        got = fns.get(id(fn))
        if got is None:
            try:
                _by_value(fn)
                fb = _cloudpickle().dumps(fn, protocol=5)
            except Exception as e:  # noqa: BLE001 -- whatever the callable holds: a DescriptionError
                raise DescriptionError(
                    "TaskDescription",
                    "function",
                    fn,
                    f"cannot be pickled: {type(e).__name__}: {e}",
                    index=i,
                ) from None
            got = fns[id(fn)] = (fb, hashlib.blake2b(fb, digest_size=16).digest())
        fb, ref = got
        payload = (v.get("args", ()), v.get("kwargs") or {})
        try:
            cb = pickle.dumps(payload, protocol=5)
            if any(name in cb for name in _BY_VALUE):
                raise pickle.PicklingError("refers to a module workers cannot import")
        except Exception:  # noqa: BLE001 -- by reference failed: try by value
            try:
                cb = _cloudpickle().dumps(payload, protocol=5)
            except Exception as e:  # noqa: BLE001 -- whatever the args hold: a DescriptionError
                field = "args" if v.get("args") else "kwargs"
                raise DescriptionError(
                    "TaskDescription",
                    field,
                    v.get(field),
                    f"cannot be pickled: {type(e).__name__}: {e}",
                    index=i,
                ) from None
        out[i] = (fb, cb, ref)
    return out


_BY_VALUE: set[bytes] = {b"__main__"}  # modules whose objects travel by value
_INSTALLED = tuple(
    {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
)


def _by_value(fn) -> None:
    """A function from the user's own module (a script's neighbour, a test file: a module
    not installed in this Python) goes by value, with that module's other objects: a worker
    cannot import it. Installed packages go by reference (workers run the same Python)."""
    name = getattr(fn, "__module__", None)
    if not name or name == "__main__" or name.encode() in _BY_VALUE:
        return
    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    if (
        mod is None
        or not path
        or os.path.realpath(path).startswith(_INSTALLED)
        or name.split(".")[0] == "pilotfish"
    ):
        return
    _cloudpickle().register_pickle_by_value(mod)
    _BY_VALUE.add(name.encode())


def _cloudpickle():
    import cloudpickle

    return cloudpickle
