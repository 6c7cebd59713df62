"""The contract every batch adapter meets (see docs/internals.md, "Batch adapters")."""

from __future__ import annotations

import os
from typing import Literal

JobState = Literal["QUEUED", "RUNNING", "DONE", "FAILED", "CANCELED"]


class BatchJob:
    """One pilot's batch job. Its script runs `agent_argv` (the agent bootstrap)."""

    def __init__(self, pilot_uid: str, description, sandbox: str, agent_argv: list[str]):
        self.pilot_uid = pilot_uid
        self.description = description
        self.sandbox = sandbox
        self.agent_argv = list(agent_argv)

    def submit(self) -> None:
        raise NotImplementedError

    def poll(self) -> tuple[JobState, str | None]:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    def agent_ended(self) -> str | None:
        """Why the agent ended while its job still runs: its keeper (agent/keeper.py) outlives
        it to see the tasks it was running end, and says so in keeper.json. None otherwise."""
        from .._journal import keeper_state

        state = keeper_state(self.sandbox)
        if state is None:
            return None
        n = len(state.get("adopted") or ())
        return f"agent process ended with {state.get('agent_status')}" + (
            f"; its keeper saw {n} running task(s) through to their end" if n else ""
        )

    def stderr_tail(self, nbytes: int = 2048) -> str:
        """The end of the agent's stderr, for failure messages."""
        return file_tail(os.path.join(self.sandbox, "agent.err"), nbytes)


def file_tail(path: str, nbytes: int = 2048) -> str:
    """The last nbytes of a file as text ("" if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""
