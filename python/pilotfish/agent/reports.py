"""What the agent tells, in the order it happened: task updates for the client, journal
records (a final is journaled before it is sent: never reported and then lost), and other
messages for the client (service news, resizes) -- sent by the loop's flush, in one frame per
round where it can.
"""

from __future__ import annotations

from typing import Any

from .. import _wire
from .. import states as S
from .._inert import one_line
from .._journal import final_record, out_record


class Reports:
    def __init__(self) -> None:
        self.updates: list[_wire.Update] = []
        self.journal: list[list] = []  # records to journal before anything else is sent
        self.outbox: list = []  # messages for the client, in order

    def update(self, u: _wire.Update) -> None:
        self.updates.append(u)

    def send(self, msg: Any) -> None:
        """A message for the client, sent by this round's flush after the task updates
        gathered before it: the client sees what happened in the order it happened, and the
        finals in them are journaled first."""
        if self.updates:
            self.outbox.append(_wire.Updates(self.updates))
            self.updates = []
        self.outbox.append(msg)

    def flush(self, sock: Any, journal: Any, hold_updates: bool = False) -> bool:
        """Journal what is to be journaled, then send the messages and the updates (unless
        hold_updates: a simulated pilot gathers them across virtual jumps). True if
        anything was sent."""
        if self.journal:  # journaled before it is sent: never reported and then lost
            journal.write(self.journal)
            self.journal = []
        sent = False
        if self.outbox:
            outbox, self.outbox = self.outbox, []
            for msg in outbox:
                sock.send(_wire.encode(msg))
            sent = True
        if self.updates and not hold_updates:
            sock.send(_wire.encode(_wire.Updates(self.updates)))
            self.updates = []
            sent = True
        return sent

    def call_final(
        self,
        events: Any,
        uid: str,
        state: str,
        started: float | None,
        ended: float,
        result: bytes | None,
        reason: str | None,
        stdout: str | None = None,
        stderr: str | None = None,
    ) -> None:
        """A function call's end (functions.py): its events (events: the agent's), journal
        record and update."""
        reason = one_line(reason)  # (a worker's words: escaped, bounded)
        if started is not None:
            events.record_many([(started, uid, S.EXECUTING, None), (ended, uid, state, reason)])
        else:
            events.record(uid, state, reason, ended)
        if stdout or stderr:  # journaled with the final, as a task's outputs are
            self.journal.append(out_record(uid, stdout, stderr))
        self.journal.append(final_record(uid, state, None, None, reason, ended))
        self.update(
            _wire.Update(
                uid,
                state,
                ended,
                reason=reason,
                result=result,
                started=started,
                stdout=stdout,
                stderr=stderr,
            )
        )
