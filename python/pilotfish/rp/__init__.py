"""RADICAL-Pilot's API on pilotfish: change `import radical.pilot as rp` into
`import pilotfish.rp as rp` and an RP script runs on pilotfish.

    session = rp.Session()
    pmgr = rp.PilotManager(session)
    tmgr = rp.TaskManager(session)
    pilot = pmgr.submit_pilots(rp.PilotDescription({"resource": "local.localhost",
                                                    "cores": 8, "runtime": 15}))
    tmgr.add_pilots(pilot)
    tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/date"}) for _ in range(10)])
    tmgr.wait_tasks()
    session.close(download=True)

What differs from RP, and why, is in docs/rp.md: RAPTOR masters' calls run on pilotfish's
function workers (raptor.py), `runtime` in minutes as in RP, staging defaults as in RP
(TRANSFER), a sandbox per task, resource labels from a small table (rp.add_resource for sites).

A module per facade, lowest first (each imports only those before it):
    _callbacks, _layout  RP's callbacks and listify; an RP task's place on disk
    _session             Session: its managers join it (add_*_manager) with their close steps
    _task                Task, RaptorTask, RaptorMaster, Early (a task held for its pilot)
    _pilot               Pilot: its setup thread; attach / wait_set_up for a TaskManager
    _api                 TaskManager: submit (plain, mixed, RAPTOR), early binding, waits,
                         callbacks; RaptorPort (RAPTOR's bookkeeping, _masters.py, meets it)
    _pilot_manager       PilotManager (a pilot's services run on _api.setup_task_manager's)
_describe.py translates RP's descriptions (_staging.py their directives), _states.py RP's
states.
"""

from . import raptor, states, utils
from ._api import SCHEDULER_BACKFILLING, SCHEDULER_DEFAULT, SCHEDULER_ROUND_ROBIN, TaskManager
from ._callbacks import PILOT_STATE, TASK_STATE
from ._describe import (
    AGENT_SERVICE,
    CUDA,
    FUNC,
    GPU,
    GPU_MPI,
    MPI,
    POSIX,
    RAPTOR_MASTER,
    RAPTOR_WORKER,
    SERIAL,
    TASK_EVAL,
    TASK_EXEC,
    TASK_EXECUTABLE,
    TASK_FUNC,
    TASK_FUNCTION,
    TASK_METH,
    TASK_METHOD,
    TASK_PROC,
    TASK_SERVICE,
    TASK_SHELL,
    GPU_OpenMP,
    OpenMP,
    PilotDescription,
    PythonTask,
    TaskDescription,
    pythontask,
)
from ._nodes import (
    BUSY,
    DOWN,
    FREE,
    RO,
    Node,
    NodeList,
    RankRequirements,
    ResourceOccupation,
    Slot,
)
from ._pilot import Pilot
from ._pilot_manager import PilotManager
from ._resources import RESOURCES, ResourceConfig, add_resource
from ._session import Session
from ._staging import (
    COPY,
    CREATE_PARENTS,
    DEFAULT_ACTION,
    DEFAULT_FLAGS,
    DEFAULT_PRIORITY,
    DOWNLOAD,
    LINK,
    MOVE,
    NON_FATAL,
    RECURSIVE,
    SKIP_FAILED,
    TARBALL,
    TRANSFER,
)
from ._states import (
    AGENT_EXECUTING,
    AGENT_EXECUTING_PENDING,
    AGENT_SCHEDULING,
    AGENT_SCHEDULING_PENDING,
    AGENT_STAGING_INPUT,
    AGENT_STAGING_INPUT_PENDING,
    AGENT_STAGING_OUTPUT,
    AGENT_STAGING_OUTPUT_PENDING,
    CANCELED,
    DONE,
    FAILED,
    FINAL,
    INITIAL,
    NEW,
    PILOT_STATES,
    PMGR_ACTIVE,
    PMGR_ACTIVE_PENDING,
    PMGR_LAUNCHING,
    PMGR_LAUNCHING_PENDING,
    TASK_STATES,
    TMGR_SCHEDULING,
    TMGR_SCHEDULING_PENDING,
    TMGR_STAGING_INPUT,
    TMGR_STAGING_INPUT_PENDING,
    TMGR_STAGING_OUTPUT,
    TMGR_STAGING_OUTPUT_PENDING,
)
from ._task import Raptor, RaptorMaster, RaptorWorker, Task
from .._errors import DescriptionError, PilotfishError

WAIT_QUEUE_SIZE = "WAIT_QUEUE_SIZE"  # (a callback metric RP never fires)
version = "pilotfish.rp (RADICAL-Pilot API subset)"

__all__ = [name for name in dir() if not name.startswith("_")]
