"""State names and their order.

State models are linear (as in RADICAL-Pilot): a pilot or task only moves forward, and a
final state is never left. Every transition is an event with a timestamp.
"""

from __future__ import annotations

# -- pilot states
NEW = "NEW"
LAUNCHING = "LAUNCHING"
ACTIVE = "ACTIVE"

# -- task states
SCHEDULING = "SCHEDULING"
STAGING_INPUT = "STAGING_INPUT"
AGENT_SCHEDULING = "AGENT_SCHEDULING"
EXECUTING = "EXECUTING"
STAGING_OUTPUT = "STAGING_OUTPUT"

# -- final states (both)
DONE = "DONE"
FAILED = "FAILED"
CANCELED = "CANCELED"

FINAL = frozenset({DONE, FAILED, CANCELED})

# the reason of a task the pilot's walltime killed: FAILED (it did not finish), yet not the
# task's fault, so `pilotfish run --resume` runs it again as it does a CANCELED one
WALLTIME_KILLED = "killed: the pilot reached its walltime"

PILOT_STATES = (NEW, LAUNCHING, ACTIVE, DONE, FAILED, CANCELED)
TASK_STATES = (
    NEW,
    SCHEDULING,
    STAGING_INPUT,
    AGENT_SCHEDULING,
    EXECUTING,
    STAGING_OUTPUT,
    DONE,
    FAILED,
    CANCELED,
)

_PILOT_RANK = {s: i for i, s in enumerate(PILOT_STATES[:3])}
_TASK_RANK = {s: i for i, s in enumerate(TASK_STATES[:6])}
for _s in FINAL:
    _PILOT_RANK[_s] = _TASK_RANK[_s] = 100


TASK_RANK = _TASK_RANK  # state -> position (finals share the top); sub-events are absent


def pilot_state_rank(state: str) -> int:
    return _PILOT_RANK[state]
