"""resource="local": the agent runs as a child process of the client on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from .._util import open_private
from .base import BatchJob, JobState
from .registry import BatchSystem, register

LOCAL = register(BatchSystem(name="local", runs_here=True))


class LocalJob(BatchJob):
    """A forked agent in its own session; walltime enforced here like a batch system would."""

    kill_grace = 5.0  # seconds between SIGTERM and SIGKILL, and past the walltime

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._proc: subprocess.Popen | None = None
        self._started = 0.0
        self._canceled = False

    def submit(self) -> None:
        os.makedirs(self.sandbox, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC  # 0600, never through a planted link
        out = open_private(os.path.join(self.sandbox, "agent.out"), flags)
        try:
            err = open_private(os.path.join(self.sandbox, "agent.err"), flags)
        except BaseException:
            os.close(out)
            raise
        try:
            self._proc = subprocess.Popen(
                self.agent_argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=self.sandbox,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(out)
            os.close(err)
        self._started = time.monotonic()

    def poll(self) -> tuple[JobState, str | None]:
        if self._proc is None:
            return "QUEUED", None
        rc = self._proc.poll()
        if rc is None:
            if time.monotonic() - self._started > self.description.runtime + self.kill_grace:
                self._signal(signal.SIGKILL)  # past the walltime: what a batch system does
                return "FAILED", "walltime exceeded: agent killed"
            ended = self.agent_ended()
            if ended is not None:
                return "FAILED", ended
            return "RUNNING", None
        self._kill_leftovers()
        if self._canceled:
            return "CANCELED", None
        if rc == 0:
            return "DONE", None
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        tail = self.stderr_tail()
        return "FAILED", f"agent process ended with {how}" + (f": {tail}" if tail else "")

    def cancel(self) -> None:
        self._canceled = True
        self._signal(signal.SIGTERM)
        if self._proc is not None:
            try:
                self._proc.wait(self.kill_grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._proc.wait()

    def wait(self, timeout: float | None = None) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _kill_leftovers(self) -> None:
        """Kill what the agent left running (it was killed itself, say): every process of
        the session the agent led. A batch system does this at job end; so do we."""
        if self._proc is None or getattr(self, "_cleaned", False):
            return
        self._cleaned = True
        for pid in session_members(self._proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                pass


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is sid, from /proc."""
    from .._util import proc_stats

    # stat fields 3 (state) and 6 (session)
    return [pid for pid, fields in proc_stats() if int(fields[3]) == sid and fields[0] != "Z"]
