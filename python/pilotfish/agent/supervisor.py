"""Launch supervision: bounded retries, hung launches, wedged or dead daemons, recycling.

Only launch methods that ask for it are watched (LaunchMethod.launch_retries > 0, or a
SupervisedLaunchMethod); a pilot that launches only with `direct` never creates a Supervisor,
so the hot path pays nothing for it. Every decision keeps the rule "never lose a task": each
launch ends
in exactly one of final (DONE/FAILED/CANCELED with a reason) or relaunched on the same slots
(bounded by the method's launch_retries; an event `launch_retry` says why).

Evidence, strongest first:
  rank notes (supervised methods, launch/rank_notes.py): which ranks started and ended, with
      their exit codes. A launch none of whose ranks started did not run: safe to repeat.
  the launcher's own words: `retryable(exit_code, stderr tail)` (e.g. "failed to initialize",
      srun's "Unable to create step"), when stderr was captured.
  the daemon's process: its exit is reaped by the executor like any child.

Failure modes of PRRTE (shared/notes/substrates.md) and what is done:
  prterun fails before the task ran     -> relaunch (a strike against its DVM)
  prterun outlives all its ranks        -> every rank noted its end and prterun is still there
      (missed job-end event)               after `hang_grace`: SIGKILL it; the task ends with
                                           the ranks' exit code (event launch_hung; a strike)
  `max_strikes` strikes in a row        -> the DVM may be wedging: a fresh DVM takes the new
                                           launches; the old one finishes what runs on it and
                                           stops when its last launch is reaped
  a DVM started no rank for             -> stuck: its launches that waited longer than that
      `launch_timeout` while launches      never ran: SIGKILL them and relaunch them on a fresh
      waited for their first rank          DVM (event launcher_restart)
  a DVM died                            -> a fresh DVM; its launches are SIGKILLed and judged:
                                             no rank started  -> relaunch
                                             every rank ended -> final, the ranks' exit code
                                             otherwise        -> FAILED "the DVM ... was lost
                                               while the task ran" (not safe to run twice);
                                               its surviving local ranks are killed
  a DVM served `recycle_after` launches -> a fresh DVM takes new launches, the old one stops
                                           when its last launch is reaped (launcher_recycle)
Cancels and timeouts signal the ranks themselves (prterun ignores SIGTERM, its SIGKILL leaves
the ranks running, and the signals it forwards reach every job of the DVM): SIGTERM to the
process group of each rank that noted its start -- on this host directly, on other nodes
through the launcher (`signal_remote`: a one-off srun step) -- then after the grace period
SIGKILL to them and to the launcher.

Relaunches use the same slots (they stay held) and count against launch_retries; a task out
of retries fails with every reason it was retried for in the last one.
"""

from __future__ import annotations

import heapq
import logging
import os
import signal as _signal
import socket
from typing import Any

from .. import _events as E
from .. import states as S
from ..launch.base import LaunchError, SupervisedLaunchMethod
from ..launch.rank_notes import kill_group, process_matches
from .clock import REAL

log = logging.getLogger("pilotfish.agent")

STDERR_PEEK = 4096  # bytes of a failed launch's stderr shown to retryable()


class LaunchRecord:
    """What the supervisor knows about one task's current launch."""

    __slots__ = ("attempt", "handle", "spawned", "started", "ended", "hung")

    def __init__(self):
        self.attempt = 0  # launches made so far (new_attempt() counts them)
        self.new_attempt(None)
        self.attempt = 0

    def new_attempt(self, handle: Any, now_mono: float | None = None) -> None:
        self.attempt += 1
        self.handle = handle  # the launcher's handle (a LaunchHandle), or None
        self.spawned = REAL.mono() if now_mono is None else now_mono
        self.started: dict[int, tuple[str, int]] = {}  # rank -> (host, pid) from its note
        self.ended: dict[int, int] = {}  # rank -> exit code from its note
        self.hung = False  # we killed the launcher after all its ranks ended

    def noted_exit(self) -> int:
        """The task's exit code from its ranks' notes: the first non-zero one that a rank
        exited with itself (< 128), else the first non-zero one (a signal: 128 + N), else 0.
        When one rank fails, PRRTE aborts the others (SIGPIPE, SIGTERM): the rank that
        failed on its own is the task's cause, not the ones the abort killed."""
        codes = [rc for _, rc in sorted(self.ended.items()) if rc]
        return next((rc for rc in codes if rc < 128), codes[0] if codes else 0)


class Supervisor:
    """Decides, for watched launches, between final, relaunch and kill (see module docstring).

    host: the task table (ports.Host: events, clock, signal(), relaunch(), launchers).
    """

    def __init__(self, host: Any, partition: Any = None):
        self.agent = host
        self.partition = partition  # the Partition whose launchers it watches
        self.clock = getattr(host, "clock", REAL)
        self.events = host.events
        self.launchers: list[Any] = []  # supervised launch methods (those with daemons)
        self.by_key: dict[str, Any] = {}  # launch key -> task (launches not yet reaped)
        self.unstarted: dict[Any, dict[str, Any]] = {}  # daemon -> {key: task}, spawn order
        self._hang_checks: list[tuple[float, int, str, Any]] = []
        # multi-rank launches one of whose ranks started: all must have, launch_timeout later
        self._start_checks: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self.tick_every = 1.0
        self.due = self.clock.mono() + self.tick_every
        host = socket.gethostname()
        self.here = {host, host.split(".", 1)[0], "localhost"}

    def watch(self, lm: Any) -> None:
        if isinstance(lm, SupervisedLaunchMethod) and lm not in self.launchers:
            self.launchers.append(lm)

    # -- launches ------------------------------------------------------------------------------
    def launched(self, tasks: list) -> None:
        """Tasks just spawned (any launcher): register the supervised ones' launches."""
        for t in tasks:
            rec = t.launch
            if rec is None or rec.handle is None or not t.procs:
                continue
            h = rec.handle
            d = h.daemon
            d.running += 1
            d.launches += 1
            self.by_key[h.key] = t
            self.unstarted.setdefault(d, {})[h.key] = t
        for lm in self.launchers:
            d = lm.daemons[-1] if lm.daemons else None
            if d is not None and d.state == "live" and d.launches >= lm.recycle_after:
                self._replace(lm, d, retire=True, why=f"recycled after {d.launches} launches")

    def read_notes(self, lm: Any) -> None:
        notes = lm.notes.read() if lm.notes is not None else ()
        if not notes:
            return
        now = self.clock.mono()
        by_key = self.by_key
        for n in notes:
            t = by_key.get(n.key)
            if t is None:
                continue  # a launch already judged (or of an earlier attempt)
            rec = t.launch
            d = rec.handle.daemon
            if n.kind == "S":
                if not rec.started:  # the payload runs: the end of the launcher's part
                    self.events.record(
                        t.spec.uid, E.LAUNCH_OK, n.host, n.t if n.t > 0 else self.clock.now()
                    )
                    if t.spec.ranks > 1:
                        self._seq += 1
                        when = now + t.lm.launch_timeout
                        heapq.heappush(self._start_checks, (when, self._seq, n.key, t))
                        self.due = min(self.due, when)
                rec.started[n.rank] = (n.host, n.value)
                d.last_start = now
                d.strikes = 0
                waiting = self.unstarted.get(d)
                if waiting:
                    waiting.pop(n.key, None)
            else:
                rec.ended[n.rank] = n.value
                if len(rec.ended) == t.spec.ranks and t.running:
                    self._seq += 1
                    heapq.heappush(self._hang_checks, (now + t.lm.hang_grace, self._seq, n.key, t))
                    self.due = min(self.due, now + t.lm.hang_grace)

    def exited(self, tasks: list) -> list:
        """Launches that ended (the agent reaped every process of these tasks). Returns the
        tasks to finalize; the others were relaunched (or will be, on a fresh daemon)."""
        for lm in self.launchers:  # notes sent before these exits are in the socket by now
            self.read_notes(lm)
        final = []
        again = []
        for t in tasks:
            rec = t.launch
            if rec is None:
                final.append(t)
                continue
            why = self._judge(t, rec)
            if why is None:
                final.append(t)
            else:
                again.append((t, why))
        if again:
            self._relaunch(again)
        return final

    def _judge(self, t: Any, rec: LaunchRecord) -> str | None:
        """None: the launch is over (t.exit_code/signal/reason set for the final report);
        else why the task is launched again."""
        h = rec.handle
        d = h.daemon if h is not None else None
        if h is not None:
            self.by_key.pop(h.key, None)
            h.daemon.running -= 1
            waiting = self.unstarted.get(d)
            if waiting:
                waiting.pop(h.key, None)
        if t.kill_reason is not None:
            return None  # canceled, timed out, pilot stopping: as asked
        if rec.hung or (rec.ended and len(rec.ended) == t.spec.ranks):
            # every rank reported its end: that is the task's result, whatever the launcher
            # says (a prterun we killed, a lost DVM, PRRTE's "PMIx_Spawn failed" after a rank
            # exited early)
            t.signal = None
            t.exit_code = rec.noted_exit()
            if d is not None and not t.exit_code:
                d.strikes = 0
            return None
        if not t.signal and t.exit_code == 0:
            if d is not None:
                d.strikes = 0
            return None
        lm = t.lm
        if d is not None and d.state != "dead" and not lm.alive(d):
            # its clients can be reaped before the DVM itself: judge them as the DVM's
            self._replace(lm, d, retire=False, why="it died")
        notes_on = d is not None and lm.notes is not None
        why = None
        if notes_on and not rec.started:
            assert d is not None  # (notes_on)
            why = f"the launch ended ({_status(t)}) before any rank started" + (
                f" (PRRTE DVM {d.number} was replaced)" if d.state == "dead" else ""
            )
        elif not rec.started and not t.signal and lm.retryable(t.exit_code, _tail(t)):
            why = f"the launcher failed before the task ran ({_status(t)})"
        if why is None:
            if d is not None and d.state == "dead":
                t.signal = None
                t.reason = (
                    f"the PRRTE DVM {d.number} was lost while the task ran "
                    f"({len(rec.started)} of {t.spec.ranks} ranks started, "
                    f"{len(rec.ended)} ended)"
                )
                self.kill_orphans(t)
            elif rec.noted_exit():  # a rank failed: its exit code, not the launcher's
                t.signal = None
                t.exit_code = rec.noted_exit()
            return None
        if d is not None:
            self._strike(lm, d, "failed before running")
        if rec.attempt > lm.launch_retries:
            t.reason = f"{why}; gave up after {rec.attempt} launches"
            return None
        return why

    def _relaunch(self, again: list) -> None:
        now = self.clock.now()
        self.events.record_many(
            [
                (now, t.spec.uid, E.LAUNCH_RETRY, f"attempt {t.launch.attempt + 1}: {why}")
                for t, why in again
            ]
        )
        self.agent.relaunch([t for t, _ in again])

    # -- now and then --------------------------------------------------------------------------
    def tick(self, now_mono: float | None = None) -> None:
        now = self.clock.mono() if now_mono is None else now_mono
        self.due = now + self.tick_every
        checks = self._hang_checks
        while checks and checks[0][0] <= now:
            _, _, key, t = heapq.heappop(checks)
            rec = t.launch
            if (
                rec is None
                or rec.handle is None
                or rec.handle.key != key
                or not t.running
                or t.kill_reason is not None
            ):
                continue
            rec.hung = True
            d = rec.handle.daemon
            self.events.record(
                t.spec.uid,
                E.LAUNCH_HUNG,
                f"all {t.spec.ranks} ranks ended {t.lm.hang_grace:g}s ago; "
                f"killing the launcher (PRRTE DVM {d.number})",
            )
            self.agent.signal([t], _signal.SIGKILL)
            self._strike(t.lm, d, "hung or failed before running")
        if checks:
            self.due = min(self.due, checks[0][0])
        self._check_partial(now)
        for lm in self.launchers:
            self._check_stuck(lm, now)
            lm.reap_daemons()
            kept = set(lm.daemons)
            for d in [d for d, waiting in self.unstarted.items() if not waiting and d not in kept]:
                del self.unstarted[d]  # a DVM that is gone

    def _check_partial(self, now: float) -> None:
        """A launch some of whose ranks started and the others did not within the launch
        timeout (across hosts, a PRRTE rank that never starts leaves the others waiting in
        MPI_Init, holding their nodes until the task's timeout, or for ever): stopped; the
        task fails with which ranks never started (its retries run it again)."""
        checks = self._start_checks
        while checks and checks[0][0] <= now:
            _, _, key, t = heapq.heappop(checks)
            rec = t.launch
            if (
                rec is None
                or rec.handle is None
                or rec.handle.key != key
                or not t.running
                or t.kill_reason is not None
                or len(rec.started) >= t.spec.ranks
            ):
                continue
            missing = [r for r in range(t.spec.ranks) if r not in rec.started]
            where = sorted({t.slots[r].node for r in missing if t.slots and r < len(t.slots)})
            why = (
                f"launch failed: rank{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing[:8]))}{' ...' if len(missing) > 8 else ''} of "
                f"{t.spec.ranks} never started ({', '.join(where[:4])}) within "
                f"{t.lm.launch_timeout:g}s of the first ({t.lm.name})"
            )
            self.events.record(t.spec.uid, E.LAUNCH_PARTIAL, why)
            self.agent.cancel([t.spec.uid], why, running_state=S.FAILED)
        if checks:
            self.due = min(self.due, checks[0][0])

    def _strike(self, lm: Any, d: Any, what: str) -> None:
        d.strikes += 1
        if d.strikes >= lm.max_strikes and d.state == "live":
            self._replace(lm, d, retire=True, why=f"{d.strikes} launches in a row {what}")

    def _check_stuck(self, lm: Any, now: float) -> None:
        """A DVM that starts nothing: launches wait longer than launch_timeout for their first
        rank and no rank of that DVM started since the oldest of them was made."""
        if lm.notes is None:
            return
        for d in list(lm.daemons):
            waiting = self.unstarted.get(d)
            if d.state == "dead" or not waiting:
                continue
            spawned = next(iter(waiting.values())).launch.spawned
            if now - spawned <= lm.launch_timeout or d.last_start >= spawned:
                continue
            stuck = [
                t
                for t in waiting.values()
                if now - t.launch.spawned > lm.launch_timeout and t.running
            ]
            for t in stuck:
                waiting.pop(t.launch.handle.key, None)
            why = f"{len(stuck)} launches waited over {lm.launch_timeout:g}s and no rank started"
            if d.state == "live":
                self._replace(lm, d, retire=True, why=why)
            else:
                self.events.record(
                    self.agent.uid, E.LAUNCHER_STUCK, f"{lm.name} DVM {d.number}: {why}"
                )
            self.agent.signal(stuck, _signal.SIGKILL)  # never ran: judged, relaunched when reaped

    def daemon_exited(self, pid: int, code: int, sig: int) -> None:
        """A launcher daemon (a DVM) ended: if it was not asked to, replace it."""
        for lm in self.launchers:
            d = lm.daemon_of_pid(pid)
            if d is None:
                continue
            if d.state != "dead":
                how = f"killed by signal {sig}" if sig else f"exit code {code}"
                self._replace(lm, d, retire=False, why=f"it died ({how})")
            return

    # -- daemons -------------------------------------------------------------------------------
    def _replace(self, lm: Any, d: Any, retire: bool, why: str) -> None:
        """A fresh daemon in place of d (see LaunchMethod `replace`)."""
        name = E.LAUNCHER_RECYCLE if why.startswith("recycled") else E.LAUNCHER_RESTART
        self.events.record(self.agent.uid, name, f"{lm.name} DVM {d.number}: {why}")
        log.warning("%s: %s DVM %s: %s", name, lm.name, d.number, why)
        try:
            new = lm.replace(d, retire=retire)
            launchers = getattr(self.agent, "launchers", None)  # (None: a unit test's host)
            if launchers is not None and not new.ready:  # launches wait for the new one
                launchers.degraded(lm)
        except LaunchError as e:  # launches then fail at build, each with this reason
            log.error("%s: no new DVM: %s", lm.name, e)
            self.events.record(self.agent.uid, E.LAUNCHER_FAILED, str(e))
        if retire:
            return
        doomed = [t for t in self.by_key.values() if t.launch.handle.daemon is d and t.running]
        if doomed:  # SIGKILL to prterun and to the ranks it leaves; judged when reaped
            self.agent.signal(doomed, _signal.SIGKILL)
        self.unstarted.pop(d, None)

    def signal_ranks(self, t: Any, sig: int) -> None:
        """Signal the process groups of this launch's ranks that started and did not end (a
        cancel, a timeout; with SIGKILL also what a lost DVM or a killed prterun left)."""
        rec = t.launch
        if rec is None or rec.handle is None:
            return
        key = rec.handle.key
        remote: dict[str, list[int]] = {}
        for rank, (host, pid) in rec.started.items():
            if rank in rec.ended or pid <= 1:
                continue
            if host.split(".", 1)[0] in self.here:
                if process_matches(pid, key):  # still that rank (pids wrap)
                    kill_group(pid, sig)
            else:
                remote.setdefault(host, []).append(pid)
        for host, pids in remote.items():
            if not t.lm.signal_remote(host, pids, sig):
                log.warning("%s: cannot signal its ranks on %s", t.spec.uid, host)

    def kill_orphans(self, t: Any) -> None:
        self.signal_ranks(t, _signal.SIGKILL)


def _status(t: Any) -> str:
    return f"signal {t.signal}" if t.signal else f"exit code {t.exit_code}"


def _tail(t: Any) -> str | None:
    """The end of a failed launch's captured stderr (the launcher's own messages are there)."""
    path = t.out_paths[1] if t.out_paths else None
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - STDERR_PEEK))
            return f.read().decode(errors="replace")
    except OSError:
        return None
