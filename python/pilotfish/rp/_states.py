"""RADICAL-Pilot's state names, and the map from pilotfish's states onto them.

RP's task model has more steps (the client-side and agent-side halves of staging and
scheduling, each with a _PENDING twin). pilotfish reports the states it has; each maps onto
the RP state it stands for, so `state == rp.AGENT_EXECUTING` and waits for any RP state work.
A wait for an RP state that pilotfish has no twin for waits for the next one it has.
"""

from __future__ import annotations

from .. import states as S

NEW = "NEW"
# pilot states
PMGR_LAUNCHING_PENDING = "PMGR_LAUNCHING_PENDING"
PMGR_LAUNCHING = "PMGR_LAUNCHING"
PMGR_ACTIVE_PENDING = "PMGR_ACTIVE_PENDING"
PMGR_ACTIVE = "PMGR_ACTIVE"
# task states
TMGR_SCHEDULING_PENDING = "TMGR_SCHEDULING_PENDING"
TMGR_SCHEDULING = "TMGR_SCHEDULING"
TMGR_STAGING_INPUT_PENDING = "TMGR_STAGING_INPUT_PENDING"
TMGR_STAGING_INPUT = "TMGR_STAGING_INPUT"
AGENT_STAGING_INPUT_PENDING = "AGENT_STAGING_INPUT_PENDING"
AGENT_STAGING_INPUT = "AGENT_STAGING_INPUT"
AGENT_SCHEDULING_PENDING = "AGENT_SCHEDULING_PENDING"
AGENT_SCHEDULING = "AGENT_SCHEDULING"
AGENT_EXECUTING_PENDING = "AGENT_EXECUTING_PENDING"
AGENT_EXECUTING = "AGENT_EXECUTING"
AGENT_STAGING_OUTPUT_PENDING = "AGENT_STAGING_OUTPUT_PENDING"
AGENT_STAGING_OUTPUT = "AGENT_STAGING_OUTPUT"
TMGR_STAGING_OUTPUT_PENDING = "TMGR_STAGING_OUTPUT_PENDING"
TMGR_STAGING_OUTPUT = "TMGR_STAGING_OUTPUT"
# both
DONE = "DONE"
FAILED = "FAILED"
CANCELED = "CANCELED"
FINAL = [DONE, FAILED, CANCELED]
INITIAL = [NEW]

PILOT_STATES = [
    NEW,
    PMGR_LAUNCHING_PENDING,
    PMGR_LAUNCHING,
    PMGR_ACTIVE_PENDING,
    PMGR_ACTIVE,
    DONE,
    FAILED,
    CANCELED,
]
TASK_STATES = [
    NEW,
    TMGR_SCHEDULING_PENDING,
    TMGR_SCHEDULING,
    TMGR_STAGING_INPUT_PENDING,
    TMGR_STAGING_INPUT,
    AGENT_STAGING_INPUT_PENDING,
    AGENT_STAGING_INPUT,
    AGENT_SCHEDULING_PENDING,
    AGENT_SCHEDULING,
    AGENT_EXECUTING_PENDING,
    AGENT_EXECUTING,
    AGENT_STAGING_OUTPUT_PENDING,
    AGENT_STAGING_OUTPUT,
    TMGR_STAGING_OUTPUT_PENDING,
    TMGR_STAGING_OUTPUT,
    DONE,
    FAILED,
    CANCELED,
]

# pilotfish state -> the RP state it reports as
TASK_STATE = {
    S.NEW: NEW,
    S.SCHEDULING: TMGR_SCHEDULING,
    S.STAGING_INPUT: AGENT_STAGING_INPUT,
    S.AGENT_SCHEDULING: AGENT_SCHEDULING,
    S.EXECUTING: AGENT_EXECUTING,
    S.STAGING_OUTPUT: AGENT_STAGING_OUTPUT,
    S.DONE: DONE,
    S.FAILED: FAILED,
    S.CANCELED: CANCELED,
}
PILOT_STATE = {
    S.NEW: NEW,
    S.LAUNCHING: PMGR_LAUNCHING,
    S.ACTIVE: PMGR_ACTIVE,
    S.DONE: DONE,
    S.FAILED: FAILED,
    S.CANCELED: CANCELED,
}

_TASK_ORDER = {s: i for i, s in enumerate(TASK_STATES)}
_PILOT_ORDER = {s: i for i, s in enumerate(PILOT_STATES)}
_PF_TASK = [(TASK_STATES.index(rp), pf) for pf, rp in TASK_STATE.items() if rp not in FINAL]
_PF_PILOT = [(PILOT_STATES.index(rp), pf) for pf, rp in PILOT_STATE.items() if rp not in FINAL]


def _to_pf(states, order: dict, table: list, kind: str) -> list[str]:
    if isinstance(states, str):
        states = [states]
    out = []
    for s in states:
        if s in FINAL:
            out.append(s)
            continue
        if s not in order:
            raise ValueError(f"{s!r} is no RADICAL-Pilot {kind} state (one of {', '.join(order)})")
        # the first pilotfish state at or after it
        later = sorted((i, pf) for i, pf in table if i >= order[s])
        out.append(later[0][1] if later else FINAL[0])
    return out


def task_states_to_pf(states) -> list[str]:
    """RP task states to wait for, as pilotfish states."""
    return _to_pf(states, _TASK_ORDER, _PF_TASK, "task")


def pilot_states_to_pf(states) -> list[str]:
    return _to_pf(states, _PILOT_ORDER, _PF_PILOT, "pilot")
