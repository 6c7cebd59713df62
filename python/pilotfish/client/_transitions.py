"""The client's two state machines: the moves a Task and a Pilot make, as the agent's
`agent/tasks.py` LEGAL table is for its tasks. `Task._move` and `Pilot._move` are the only
writers of a `.state` in client/ (tests/client/test_client_shape.py fails on any other) and
raise IllegalTransition for a move the table lacks: a bug in the client, never the user's
fault, so it is loud.

The wire is filtered before anything moves: the client hears its agents out of order and
twice (a re-attached agent's answers, a resumed session's journal, a final state sent again,
a requeued task's second EXECUTING), and the managers drop what is late or repeated -- a
task or pilot in a final state takes nothing; news no later than the state it is in is
history only (TaskBooks.apply_updates, PilotManager._advance). What reaches `_move` is forward,
and may skip states:

Task   NEW ──► SCHEDULING ──► STAGING_INPUT ──► AGENT_SCHEDULING ──► EXECUTING ──►
       STAGING_OUTPUT ──► DONE | FAILED | CANCELED, any of the middle ones skipped (an agent's
       batch that carries only the latest state, a function call's start and end in one
       update, a re-attached agent's answer before its frame's send is marked, a task never
       sent that ends locally).
Pilot  NEW ──► LAUNCHING ──► ACTIVE ──► DONE | FAILED | CANCELED, any middle one skipped (a
       pilot that cannot start fails NEW; an agent's hello can beat the LAUNCHING mark); NEW
       ──► NEW marks a pilot's birth (its first event and callbacks, or a re-attached one's
       first history entry).
"""

from __future__ import annotations

from .. import states as S

_FINALS = frozenset({S.DONE, S.FAILED, S.CANCELED})

# from -> the states it may go to (the module's docstring says why each skip happens)
TASK_LEGAL: dict[str, frozenset[str]] = {
    # a task is born SCHEDULING (submit_tasks): it is never sent, nor ended, from NEW
    S.NEW: frozenset({S.SCHEDULING}),
    S.SCHEDULING: frozenset(
        {S.STAGING_INPUT, S.AGENT_SCHEDULING, S.EXECUTING, S.STAGING_OUTPUT, *_FINALS}
    ),
    S.STAGING_INPUT: frozenset({S.AGENT_SCHEDULING, S.EXECUTING, S.STAGING_OUTPUT, *_FINALS}),
    S.AGENT_SCHEDULING: frozenset({S.EXECUTING, S.STAGING_OUTPUT, *_FINALS}),
    S.EXECUTING: frozenset({S.STAGING_OUTPUT, *_FINALS}),
    S.STAGING_OUTPUT: _FINALS,
    **{s: frozenset() for s in _FINALS},
}

PILOT_LEGAL: dict[str, frozenset[str]] = {
    S.NEW: frozenset({S.NEW, S.LAUNCHING, S.ACTIVE, *_FINALS}),
    S.LAUNCHING: frozenset({S.ACTIVE, *_FINALS}),
    S.ACTIVE: frozenset(_FINALS),
    **{s: frozenset() for s in _FINALS},
}


class IllegalTransition(RuntimeError):
    """A task or pilot asked to move where its table has no arrow: a bug in the client."""


def check(kind: str, uid: str, table: dict[str, frozenset[str]], old: str, to: str) -> None:
    """Raise IllegalTransition unless old -> to is in the table."""
    if to not in table.get(old, ()):
        raise IllegalTransition(
            f"{kind} {uid}: {old} -> {to} is not a move the client makes "
            f"(client/_transitions.py {kind.upper()}_LEGAL)"
        )
