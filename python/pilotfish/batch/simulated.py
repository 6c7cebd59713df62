"""resource="simulated": nothing runs -- an agent here (batch/local.py's LocalJob) plays the
pilot's declared nodes, each task taking its `duration` on a simulated clock."""

from __future__ import annotations

from .registry import BatchSystem, register

SIMULATED = register(BatchSystem(name="simulated", runs_here=True))

__all__ = ["SIMULATED"]
