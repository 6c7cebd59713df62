"""A resumed client re-attaches to a live agent: what became of each task it asks about --
running, waiting, or ended (from the agent's journal: its final record and the output
journaled with it) -- and which it never sent (it submits those again)."""

from __future__ import annotations

from typing import Any

from .. import _wire
from .. import states as S
from .._journal import read_journal
from .tasks import RUNNING


def resync(
    tasks: dict, calls: Any, journal_path: str, uids: list[str], now: float
) -> tuple[list[_wire.Update], list[str]]:
    """(updates, missing uids) for the uids a re-attached client asks about. tasks: the
    table's live tasks; calls: the function pool's live calls (or empty)."""
    done, outputs = _finals_and_outputs(journal_path, set(uids)) if uids else ({}, {})
    ups, missing = [], []
    for uid in uids:
        t = tasks.get(uid)
        if t is not None:
            if t.state is RUNNING:
                ups.append(
                    _wire.Update(uid, S.EXECUTING, now, slots=t.slots, partition=t.partition.index)
                )
            else:  # waiting, held for its launcher, or in its retry backoff
                ups.append(_wire.Update(uid, S.AGENT_SCHEDULING, now))
            continue
        if uid in calls:  # a function call, live
            ups.append(_wire.Update(uid, S.AGENT_SCHEDULING, now))
            continue
        r = done.get(uid)
        if r is None:
            missing.append(uid)
            continue
        _, _, state, code, sig, reason, t_final = r
        out, err = outputs.get(uid, ("", ""))
        ups.append(
            _wire.Update(
                uid,
                state,
                t_final,
                exit_code=code,
                signal=sig,
                reason=reason,
                stdout=out,
                stderr=err,
            )
        )
    return ups, missing


def _finals_and_outputs(path: str, uids: set[str]) -> tuple[dict[str, list], dict[str, tuple]]:
    """The final records, and the captured (stdout, stderr) journaled with them, of these
    tasks in an agent journal."""
    done: dict[str, list] = {}
    outputs: dict[str, tuple] = {}
    for r in read_journal(path):
        if r and len(r) > 1 and r[1] in uids:
            if r[0] == "final":
                done[r[1]] = r
            elif r[0] == "out" and len(r) >= 4:
                outputs[r[1]] = (r[2], r[3])
    return done, outputs
