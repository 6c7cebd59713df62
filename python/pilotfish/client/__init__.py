"""The client layer: Session, PilotManager, TaskManager (a synchronous API, one IO thread)."""

from .executor import Executor
from .pilot import Pilot, PilotManager
from .session import Session
from .task import Task, TaskManager

__all__ = ["Session", "Pilot", "PilotManager", "Task", "TaskManager", "Executor"]
