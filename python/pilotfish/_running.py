"""What a function worker is running now: the uid of the call (its task) in progress.

Set by the worker (agent/worker.py) before each call, on every rank; read through
`pilotfish.task_uid()`. A module of its own (no imports), so that the worker -- run as
`python -m pilotfish.agent.worker`, i.e. as __main__ -- and the code it calls see one and the
same variable."""

from __future__ import annotations

uid: str | None = None  # the task whose call runs in this process now (None: none)


def task_uid() -> str | None:
    """The uid of the function task whose call is running in this process (in a function
    worker), else None -- as RP_TASK_ID is for an executable, without its cost per call."""
    return uid
