"""rp.states, as RP's radical.pilot.states: the state names (rp.states.DONE, ...) and the
lists INITIAL, FINAL, PILOT_STATES, TASK_STATES. One source: _states.py."""

from ._states import (  # noqa: F401 -- re-exports: RP's radical.pilot.states names
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

__all__ = [n for n in dir() if n.isupper()]
