"""Pipelines: what a staging server runs on the blocks a simulation stages (Colza's model).

A pipeline is a class with activate(iteration), stage(block_id, array, meta),
execute(iteration) -> result, deactivate(iteration) and destroy(); it is made on every server
of the area from a JSON-able config. Register one with @pipeline("name") in a module the
servers import (the shipped ones are in pilotfish.insitu.pipelines; create_pipeline(...,
module="pkg.mod") imports yours), or through the entry point group
"pilotfish.insitu.pipelines".
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

ENTRY_POINTS = "pilotfish.insitu.pipelines"
SHIPPED = {
    "statistics": "pilotfish.insitu.pipelines.statistics",
    "isosurface": "pilotfish.insitu.pipelines.isosurface",
}

_REGISTRY: dict[str, type] = {}


class InsituError(Exception):
    """A staging-area request that failed: the server's reason (the area keeps serving)."""


class Pipeline:
    """Base class. `self.comm` (set by the server before each call of an iteration) holds the
    collectives among the servers of the iteration's view: rank, size, reduce, allreduce,
    gather, bcast, barrier."""

    comm: Any = None
    _type: str | None  # the type it was created as, where set (by the server: its "ping")

    def __init__(self, config: dict):
        self.config = config

    def activate(self, iteration: int) -> None:
        pass

    def stage(self, block_id: Any, array: Any, meta: dict) -> None:
        raise NotImplementedError

    def execute(self, iteration: int) -> Any:
        raise NotImplementedError

    def deactivate(self, iteration: int) -> None:
        pass

    def destroy(self) -> None:
        pass

    def warm(self) -> None:
        """Pay one-time costs now (a spare server, before it joins: StagingArea.resize(n,
        warm=True)) rather than in its first iteration."""


def pipeline(name: str) -> Callable[[type], type]:
    """Class decorator: register a pipeline under `name`."""

    def register(cls: type) -> type:
        _REGISTRY[name] = cls
        return cls

    return register


@functools.lru_cache(maxsize=1)
def _entry_points() -> dict:
    """The installed pipelines' entry points, by name (read once: a scan of every installed
    distribution costs ~50 ms, per unknown name a client asks for)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)}


def lookup(name: str, module: str | None = None) -> type:
    """The pipeline class registered as `name` (importing `module`, a shipped pipeline's
    module, or an entry point first); InsituError if there is none."""
    if name not in _REGISTRY:
        if module:
            try:
                importlib.import_module(module)
            except (Exception, SystemExit) as e:  # noqa: BLE001 -- the client learns why
                # (a module that exits on import -- unittest.__main__ -- must not end the server)
                raise InsituError(
                    f"pipeline {name!r}: cannot import {module!r}: {type(e).__name__}: {e}"
                ) from None
        elif name in SHIPPED:
            importlib.import_module(SHIPPED[name])
        else:
            ep = _entry_points().get(name)
            if ep is not None:
                _REGISTRY[name] = ep.load()
    cls = _REGISTRY.get(name)
    if cls is None:
        known = sorted(set(_REGISTRY) | set(SHIPPED))
        raise InsituError(
            f"unknown pipeline {name!r} (known: {', '.join(known)}; register "
            f"with @pilotfish.insitu.pipeline and pass module=)"
        )
    return cls
