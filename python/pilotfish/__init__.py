"""pilotfish: a pilot-job runtime for HPC.

import pilotfish as pf
with pf.Session() as session:
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=4, cores_per_node=16, runtime="30m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/echo", arguments=["hi"])])
    tmgr.wait_tasks()
"""

from typing import TYPE_CHECKING

from ._version import __version__

from ._errors import (
    DescriptionError,
    JournalError,
    PilotfishError,
    RemoteError,
    SessionClosed,
    SessionError,
    TimeoutExpired,
)
from ._running import task_uid
from .states import (
    ACTIVE,
    AGENT_SCHEDULING,
    CANCELED,
    DONE,
    EXECUTING,
    FAILED,
    FINAL,
    LAUNCHING,
    NEW,
    SCHEDULING,
    STAGING_INPUT,
    STAGING_OUTPUT,
)

# The user's API is imported on first use (PEP 562): `import pilotfish.agent` (every agent,
# sub-agent and node executor runs this file first) imports nothing of the client layer.
_LAZY = {
    "Executor": "client",
    "Pilot": "client",
    "PilotManager": "client",
    "Session": "client",
    "Task": "client",
    "TaskManager": "client",
    "ServiceGroup": "client.services",
    "PilotDescription": "descriptions",
    "ServiceDescription": "descriptions",
    "TaskDescription": "descriptions",
    "ServiceError": "service",
}

if TYPE_CHECKING:
    from .client import Executor, Pilot, PilotManager, Session, Task, TaskManager
    from .client.services import ServiceGroup
    from .descriptions import PilotDescription, ServiceDescription, TaskDescription
    from .service import ServiceError


def __getattr__(name: str):
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'pilotfish' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # (once: the next lookup is the module's own)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Session",
    "PilotManager",
    "TaskManager",
    "Pilot",
    "Task",
    "Executor",
    "PilotDescription",
    "TaskDescription",
    "ServiceDescription",
    "ServiceGroup",
    "ServiceError",
    "PilotfishError",
    "DescriptionError",
    "RemoteError",
    "SessionClosed",
    "TimeoutExpired",
    "SessionError",
    "JournalError",
    "task_uid",
    "NEW",
    "LAUNCHING",
    "ACTIVE",
    "SCHEDULING",
    "STAGING_INPUT",
    "AGENT_SCHEDULING",
    "EXECUTING",
    "STAGING_OUTPUT",
    "DONE",
    "FAILED",
    "CANCELED",
    "FINAL",
]
