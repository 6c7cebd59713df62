"""Launching a pilot's agent, and following the batch jobs the agents run in.

agent_config: what a pilot's agent is told (_wire.AgentConfig: where the session is, its
own CURVE key pair, heartbeats, the pilot's description). start_agent: the pilot's sandbox
made (0700, ours), agent.json written 0600 (it holds the agent's secret key), the batch job
that runs the agent under its keeper submitted. JobWatcher: the thread that follows the
pilots' batch jobs and their agents' silence, and tells the pilots' manager what it saw
(WatchHost's finish and lost); the manager decides what state that makes
(client/pilot.py's PilotManager, the one writer of a pilot's state).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from .. import _wire
from .. import states as S
from .._journal import keeper_state
from .._keeper_argv import keeper_argv
from .._util import private_dir, write_private
from ..batch import BatchJob, make_batch_job
from ..descriptions import PilotDescription

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("pilotfish.client")


def agent_config(
    session: "Session", uid: str, d: PilotDescription, sandbox: str
) -> tuple[_wire.AgentConfig, bytes | None]:
    """(the configuration of pilot `uid`'s agent, the agent's CURVE public key -- None when
    the session is not secure). A secure session gives each agent a key pair of its own:
    only it can be this pilot."""
    bridge = session.plane.bridge
    public = curve = None
    if bridge.public_key is not None:
        import zmq

        public, secret = zmq.curve_keypair()
        curve = _wire.Curve(bridge.public_key.decode(), public.decode(), secret.decode())
    config = _wire.AgentConfig(
        pilot_uid=uid,
        session_uid=session.uid,
        session_path=session.path,
        sandbox=sandbox,
        # an agent on another host (a batch pilot) reaches the session over TCP
        address=session.address
        if d.resource in ("local", "simulated")
        else session.reachable_address(),
        description=d.as_dict(),
        profile=session.profile,
        heartbeat_s=session.heartbeat_s,
        client_timeout=session.client_timeout,
        journal=session.journal.enabled,
        curve=curve,
    )
    return config, public


def start_agent(config: _wire.AgentConfig, d: PilotDescription) -> BatchJob:
    """Make the pilot's sandbox (0700, ours: one another user made or may write is
    refused), write its agent.json (0600: it holds the agent's secret key) and submit the
    batch job that runs the agent under a keeper that outlives it. Raises what the file
    system or the batch system says."""
    private_dir(config.sandbox)
    cfg_path = os.path.join(config.sandbox, "agent.json")
    write_private(cfg_path, _wire.encode_agent_config(config))
    job = make_batch_job(config.pilot_uid, d, config.sandbox, keeper_argv(cfg_path))
    job.submit()
    return job


class Followed(NamedTuple):
    """A pilot as the job watcher sees it, at one look (WatchHost.view)."""

    uid: str
    state: str
    sandbox: str
    job: BatchJob | None
    """Its batch job; None for a re-attached pilot (only its agent is known)."""
    bye: bool
    """Its agent said bye (it has ended)."""
    wanted: bool
    """An end was asked for (cancel, close): the agent was told to stop."""


class WatchHost(NamedTuple):
    """The pilots' manager (pilot.PilotManager) as its JobWatcher uses it: what it hands
    over at the watcher's making. The pilots themselves are opaque here: the watcher hands
    them back."""

    pilots: Callable[[], list[Any]]
    """The manager's pilots, now."""
    view: Callable[[Any], Followed]
    """A pilot as the watcher needs it, now."""
    finish: Callable[[Any, str, "str | None"], None]
    """(pilot, job state, the batch system's message): its job (or re-attached agent)
    ended."""
    lost: Callable[[Any, str], None]
    """(pilot, why): its agent fell silent for longer than agent_timeout."""
    last_seen: Callable[[], dict[str, float]]
    """pilot uid -> monotonic time of its agent's last frame (the session's bridge)."""
    agent_timeout: float
    """Seconds an ACTIVE pilot's agent may be silent."""
    intervals: Callable[[], tuple[float, float]]
    """(seconds between looks while a pilot starts or stops, while all are ACTIVE)."""


class JobWatcher:
    """The thread that follows the pilots' batch jobs (`pilotfish-pilots`): a job that ends
    without the agent's bye fails the pilot; a batch system that cannot be asked ends
    nothing (the agent's silence or bye still does)."""

    def __init__(self, host: WatchHost) -> None:
        self.host = host
        self._stop = threading.Event()
        self._poke = threading.Event()  # wakes it early
        self._thread = threading.Thread(target=self._run, name="pilotfish-pilots", daemon=True)
        self._started = False

    def start(self) -> None:
        """Start following (once; later calls do nothing)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def poke(self) -> None:
        """Look again now (a bye came, an end was asked for)."""
        self._poke.set()

    def stop(self, join: float = 2.0) -> None:
        """Stop following; wait up to `join` seconds for the thread."""
        self._stop.set()
        self._poke.set()
        if self._started:
            self._thread.join(join)

    def _run(self) -> None:
        host = self.host
        while not self._stop.is_set():
            last_seen = host.last_seen()
            now = time.monotonic()
            for pilot in host.pilots():
                f = host.view(pilot)
                if f.state == S.ACTIVE and not f.wanted:
                    silent = now - last_seen.get(f.uid, now)
                    if silent > host.agent_timeout:  # heartbeats stopped: agent gone
                        host.lost(
                            pilot,
                            f"agent silent for {silent:.0f}s (bound {host.agent_timeout:g}s)",
                        )
                        continue
                if f.state in S.FINAL:
                    continue
                if f.job is None:  # re-attached: no batch job object, only its agent
                    if f.bye:
                        host.finish(pilot, "DONE", None)
                    else:
                        kept = keeper_state(f.sandbox)  # the agent died under its keeper
                        if kept is not None:
                            status = kept.get("agent_status")
                            host.finish(pilot, "FAILED", f"agent process ended with {status}")
                    continue
                try:
                    job_state, message = f.job.poll()
                except Exception as e:  # noqa: BLE001 -- a poll that fails counts as still running
                    job_state, message = "RUNNING", None
                    log.warning("poll of %s failed: %s", f.uid, e)
                if job_state in ("QUEUED", "RUNNING"):
                    # A failed queue poll is retried, never the pilot's end (psij_job.py): the
                    # state is the last one known. An agent that said bye has ended, though:
                    # its word ends the pilot when the batch system cannot be asked.
                    trouble = getattr(f.job, "poll_trouble", None)
                    if host.view(pilot).bye and trouble is not None and trouble():
                        host.finish(pilot, "DONE", None)
                    continue
                host.finish(pilot, job_state, message)
            # Every wake-up costs CPU the tasks could use (~0.2 ms on this kind of VM): poll
            # fast only while a pilot is starting or stopping; a bye or a shutdown pokes.
            busy = False
            for pilot in host.pilots():
                f = host.view(pilot)
                if f.state not in S.FINAL and (f.state in (S.NEW, S.LAUNCHING) or f.wanted):
                    busy = True
                    break
            fast, idle = host.intervals()
            self._poke.wait(fast if busy else idle)
            self._poke.clear()
