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
from .client import Executor, Pilot, PilotManager, Session, Task, TaskManager
from .client.services import ServiceGroup
from .descriptions import PilotDescription, ServiceDescription, TaskDescription
from .service import ServiceError
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
