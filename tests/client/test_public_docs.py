"""help() on every public class, function, method and property of `pilotfish` says what it
does (issue 30: a user's first look is help())."""

from __future__ import annotations

import inspect

import pilotfish as pf


def test_every_public_name_has_a_docstring():
    missing = []
    for name in pf.__all__:
        obj = getattr(pf, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                f = value.fget if isinstance(value, property) else value
                if isinstance(f, (staticmethod, classmethod)):
                    f = f.__func__
                if inspect.isfunction(f) and not (f.__doc__ or "").strip():
                    missing.append(f"{name}.{attr}")
    assert not missing, f"no docstring: {missing}"
