"""The root of a pilot with sub-agents: the client's agent, and its sub-agents' client.

A pilot of several partitions whose agent work would be too much for one process (subagent.py
says when) runs this small process instead of the agent, as the agent (`python -m
pilotfish.agent`, under its keeper): it discovers the pilot's nodes, starts one sub-agent per
partition (root_subs.py: the agent over that partition alone) and speaks the client<->agent
wire both ways -- as the agent to the client, as the client to its sub-agents:

- Submit batches are routed whole (or cut in a few whole slices when larger than the freest
  sub-agent's free cores) by counts alone (routing.py): the root never places a task; a batch
  that goes whole is sent on as the frame it came in. A task no live partition can hold is
  refused (FAILED, why).
- Updates frames from the sub-agents go up as they are, only their (uid, state) heads read (to
  count each sub-agent's load and know what it still runs); the frames of one round are
  merged into one. The root never decides a task that a live sub-agent holds.
- Cancel and Explain go to the sub-agents that hold the tasks (answers merged in the asked
  order); a service group lives on the sub-agent its GroupStart went to. Grow and Shrink are
  refused (a pilot with sub-agents does not change its nodes). Resync (a resumed client) goes
  to every sub-agent; a task is missing when every one says so.
- Shutdown, SIGTERM, the client's silence: every sub-agent is told (a signal as a signal),
  their drains go up, then the root's bye.

A sub-agent that dies (its process ends, or it falls silent for the client timeout and is
killed) costs its partition, never the pilot: what it left is killed (root_subs.py), its
journal says which of its tasks ended (their finals go up) and which it started: those FAIL
naming it ("sub-agent p1 (n3, n4) died (killed by SIGKILL) while the task ran there"), or run
again elsewhere with retries (a `retry` the client sees, one retry spent); those it never
started go to the other sub-agents as new. The pilot stays ACTIVE while one sub-agent lives;
when none does it FAILS, naming why.

`pilotfish explain` (a request file in the pilot's sandbox) is answered by the sub-agents
that hold the tasks, awaited a moment by the root.

The root keeps no journal: the sub-agents' journals and events are in sub/p<i>/, and every
reader of a pilot's agent files (report, analytics, dashboard, logs, explain, resume) lists
them through _agent_files.py. Not here (yet): sub-agents run on the root's node, not each on
a node of its own partition.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
from typing import Union

import msgspec
import zmq

from .. import _events as E
from .. import _explain as X
from .. import _wire
from .. import states as S
from .._events import EventWriter
from .._sockets import client_link
from .._util import hostname, raise_nofile_limit, run_profiled
from .._shapes import misfit, partition_layout
from .containment import become_subreaper
from .explain import MAX_UIDS, POLL_S, requests
from .routing import Routing, Share
from .root_subs import SubAgent, Zap, reap_children

log = logging.getLogger("pilotfish.agent")

START_S = 120.0  # a sub-agent that has not said hello by then is given up
STOP_S = 30.0  # sub-agents told to stop that still run after this are killed
REAP_S = 1.0  # orphans (a dead sub-agent's) are reaped this often
EXPLAIN_WAIT_S = 2.0  # `pilotfish explain` waits this long for the sub-agents' answers
SUMMARY_S = 10.0  # refusals at the sub-agents' ports: one event an interval at most


class Head(msgspec.Struct, array_like=True):
    """The first two fields of an Update: all the root reads of one."""

    uid: str
    state: str


class Heads(msgspec.Struct, tag="updates", array_like=True):
    items: list[Head]


class RawUpdates(msgspec.Struct, tag="updates", array_like=True):
    items: list[msgspec.Raw]


FromSub = Union[
    Heads,
    _wire.Hello,
    _wire.Bye,
    _wire.Heartbeat,
    _wire.Missing,
    _wire.GroupView,
    _wire.MemberNews,
    _wire.GroupAck,
    _wire.Resized,
    _wire.Explained,
]
_from_sub = msgspec.msgpack.Decoder(FromSub).decode
_raw_updates = msgspec.msgpack.Decoder(RawUpdates).decode


class Root:
    def __init__(self, config: _wire.AgentConfig) -> None:
        desc = config.description
        self.config = config
        self.uid = config.pilot_uid
        self.sandbox = config.sandbox
        self.events = events = EventWriter(
            os.path.join(self.sandbox, "agent.events"), enabled=config.profile
        )
        events.record(self.uid, E.BOOTSTRAP_START, None)
        raise_nofile_limit()
        become_subreaper()  # a dead sub-agent's orphans are ours to kill and reap
        from ..launch import default_launcher
        from .resources import discover

        self.resources = discover(
            desc["resource"],
            desc["nodes"],
            desc.get("cores_per_node"),
            desc.get("gpus_per_node"),
            desc.get("mem_per_node"),
        )
        nodes = self.resources.nodes
        self.launcher = desc.get("launcher") or default_launcher(desc["resource"], self.resources)
        events.record(
            self.uid,
            E.RESOURCES_OK,
            f"{len(nodes)} nodes, {sum(n.cores for n in nodes)} cores, "
            f"{sum(n.gpus for n in nodes)} gpus ({self.resources.source})",
        )
        shares = []
        for i, (first, n, launcher) in enumerate(
            partition_layout(len(nodes), desc.get("partitions"), self.launcher)
        ):
            shares.append(Share(i, nodes[first : first + n]))
            events.record(
                self.uid,
                E.PARTITION,
                json.dumps(
                    {"index": i, "nodes": shares[-1].names, "launcher": launcher or self.launcher}
                ),
            )
        self.routing = Routing(shares)
        tasks_dir = os.path.join(self.sandbox, "tasks")
        os.makedirs(tasks_dir, exist_ok=True)
        self.subs = [SubAgent(s, os.path.join(self.sandbox, "sub", f"p{s.index}")) for s in shares]
        for sub in self.subs:  # (before the context: see SubAgent.start)
            sub.start(config, tasks_dir)
        self.ctx = zmq.Context()
        self.zap = Zap(self.ctx)
        self.poller = zmq.Poller()
        self.poller.register(self.zap.sock, zmq.POLLIN)
        self.by_pid: dict[int, SubAgent] = {}
        self.by_sock: dict[zmq.Socket, SubAgent] = {}
        self.by_fd: dict[int, SubAgent] = {}
        for sub in self.subs:
            sub.bind(self.ctx, self.zap)
            assert sub.proc is not None  # (started)
            self.by_pid[sub.proc.pid] = sub
            self.by_sock[sub.sock] = sub
            self.by_fd[sub.pidfd] = sub
            self.poller.register(sub.sock, zmq.POLLIN)
            self.poller.register(sub.pidfd, zmq.POLLIN)
        self.up = client_link(self.ctx, self.uid, config.address, config.curve)
        self.heartbeat_s = config.heartbeat_s
        self.client_timeout = config.client_timeout
        self.stopping: tuple[str, str] | None = None
        self.stop_deadline = 0.0
        self.signalled = False
        self.pending: list[tuple[bool, bytes]] = []  # (an Updates frame, payload) to go up
        self.own: list[_wire.Update] = []  # the root's own updates (refused, decided)
        self.explains: dict[str, tuple[str, SubAgent]] = {}  # sub token -> (client's, sub)
        self.answers: dict[str, list] = {}  # token -> [uids, parts left, {uid: item}, here]
        self.groups: dict[str, SubAgent] = {}  # service group -> the sub-agent it lives on
        self.resync: list | None = None  # [sub-agents yet to answer, missing everywhere]
        self.last_heard = self.last_sent = time.monotonic()
        self.last_reap = 0.0
        self.said_hello = False
        self.last_asked = 0.0
        self.told: dict[str, list] = {}  # answers the root asked for itself (_explain_file)
        self.next_said = 0.0

    # -- start ------------------------------------------------------------------------------
    def _start(self) -> None:
        """Wait for every sub-agent's hello (or its end); then the root's own hello."""
        deadline = time.monotonic() + START_S
        while any(not (s.up or s.ended) for s in self.subs):
            left = deadline - time.monotonic()
            if left <= 0 or self.signalled:
                for s in self.subs:
                    if not (s.up or s.ended):
                        s.silent = (
                            "terminated by signal"
                            if self.signalled
                            else f"no hello in {START_S:g}s"
                        )
                        s.kill()
                if self.signalled:
                    break
                deadline = time.monotonic() + STOP_S
            self._round(min(left, 0.5) if left > 0 else 0.2)
        self.events.record(self.uid, S.ACTIVE)
        self._hello()
        self.said_hello = True
        self.events.flush()

    def _hello(self) -> None:
        self.up.send(
            _wire.encode(
                _wire.Hello(
                    self.uid,
                    self.resources.nodes,
                    self.launcher,
                    time.time(),
                    os.getpid(),
                    hostname(),
                )
            )
        )
        self.last_sent = time.monotonic()

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        self._start()
        self.poller.register(self.up, zmq.POLLIN)
        if all(s.ended for s in self.subs) and self.stopping is None:
            self._stop(S.FAILED, "no sub-agent started: " + self._whys(), signal_subs=False)
        while not (self.stopping is not None and all(s.ended for s in self.subs)):
            self._round(self._timeout())
        return self._end()

    def _timeout(self) -> float:
        now = time.monotonic()
        due = min(
            [self.last_sent + self.heartbeat_s, self.last_reap + REAP_S]
            + [s.last_sent + self.heartbeat_s for s in self.subs if not s.ended]
        )
        return max(0.0, min(1.0, due - now))

    def _round(self, timeout: float) -> None:
        ready = dict(self.poller.poll(int(timeout * 1000) + 1))
        if self.zap.sock in ready:
            self.zap.answer()
        if self.up in ready:
            self._from_client()
        for sock, sub in self.by_sock.items():
            if sock in ready and not sub.ended:
                for payload in sub.recv():
                    self._on_sub(sub, payload)
        now = time.monotonic()
        if any(fd in ready for fd in self.by_fd) or now - self.last_reap >= REAP_S:
            self.last_reap = now
            reap_children(self.by_pid)
            for sub in self.subs:
                if sub.status is not None and not sub.ended:
                    self._gone(sub)
        if self.signalled and self.stopping is None:
            self._stop(S.CANCELED, "terminated by signal", signal_subs=True)
        self._timers(now)
        self._flush()
        self.events.maybe_flush()

    def _timers(self, now: float) -> None:
        if not self.said_hello:  # (nothing goes up before the hello, nor is awaited)
            self.last_heard = self.last_sent = now
        if self.stopping is None and now - self.last_heard > self.client_timeout:
            self._stop(
                S.CANCELED,
                f"client silent for {now - self.last_heard:.0f}s (bound {self.client_timeout:g}s)",
            )
        if now - self.last_sent >= self.heartbeat_s:
            self.up.send(_wire.encode(_wire.Heartbeat(time.time())))
            self.last_sent = now
        for sub in self.subs:
            if sub.ended or sub.status is not None:
                continue
            if now - sub.last_sent >= self.heartbeat_s:
                sub.post(_wire.encode(_wire.Heartbeat(time.time())))
            if sub.silent is None and now - sub.last_heard > self.client_timeout:
                sub.silent = f"silent for {now - sub.last_heard:.0f}s"
                sub.kill()
        if now >= self.next_said and (self.zap.refused or any(s.dropped for s in self.subs)):
            self.next_said = now + SUMMARY_S  # (at most one summary an interval)
            said = (
                f"sub-agents' ports: {self.zap.refused} connections refused (a key not the "
                f"sub-agent's of that port), "
                f"{sum(s.dropped for s in self.subs)} frames dropped (another sender)"
            )
            self.zap.refused = 0
            for s in self.subs:
                s.dropped = 0
            log.warning("%s", said)
            self.events.record(self.uid, E.REFUSED, said)
        if self.stopping is None and self.said_hello and now - self.last_asked >= POLL_S:
            self.last_asked = now  # (`pilotfish explain` asks through files)
            requests(self.sandbox, self._explain_file)
        if self.stopping is not None and now > self.stop_deadline:
            for sub in self.subs:
                if not sub.ended and sub.silent is None:
                    sub.silent = f"still running {STOP_S:g}s after it was told to stop"
                    sub.kill()

    # -- from the client ------------------------------------------------------------------------
    def _from_client(self) -> None:
        while True:
            try:
                frame = self.up.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.last_heard = time.monotonic()
            if self.stopping is not None:
                continue  # (as the agent: nothing more is taken once it stops)
            try:
                self._on_client(frame)
            except Exception:  # a bug must not cost the pilot: log it, keep serving
                log.exception("handling a frame from the client failed")

    def _on_client(self, frame: bytes) -> None:
        try:
            msg = _wire.decode_to_agent(frame)
        except Exception as e:  # noqa: BLE001 -- salvaged task by task, or dropped
            salvaged = _wire.salvage_submit(frame)
            if salvaged is None:
                log.warning("dropped an undecodable frame (%d bytes): %s", len(frame), e)
                self.events.record(self.uid, E.BAD_FRAME, str(e)[:200])
                return
            specs, bad = salvaged
            now = time.time()
            for uid, why in bad:
                self.events.record(uid, S.FAILED, why, now)
                self.own.append(_wire.Update(uid, S.FAILED, now, reason=why))
            self._route(specs, None)
            return
        if isinstance(msg, _wire.Submit):
            self._route(msg.tasks, frame)
        elif isinstance(msg, _wire.Cancel):
            for sub, uids in self._owners(msg.uids, unowned=False).items():
                sub.post(_wire.encode(_wire.Cancel(uids)))
        elif isinstance(msg, _wire.Shutdown):
            self._stop(S.DONE, msg.reason)
        elif isinstance(msg, _wire.Explain):
            self._explain(msg)
        elif isinstance(msg, _wire.Resync):
            self._resync(msg.uids)
        elif isinstance(msg, (_wire.Grow, _wire.Shrink)):
            units = [msg.unit] if isinstance(msg, _wire.Grow) else msg.units
            for unit in units:
                self.pending.append(
                    (
                        False,
                        _wire.encode(
                            _wire.Resized(
                                unit,
                                self.resources.nodes,
                                time.time(),
                                "a pilot with sub-agents does not grow or shrink",
                            )
                        ),
                    )
                )
        elif isinstance(msg, _wire.GroupStart):
            home = self._group_home(msg.spec.template)
            self.groups[msg.spec.name] = home
            home.post(frame)
        elif isinstance(msg, (_wire.GroupResize, _wire.GroupHold, _wire.GroupRelease)):
            held = self.groups.get(msg.name) or self._any()
            if held is not None:
                held.post(frame)
        # (Heartbeat: heard; Waiting: a simulated pilot's, never a root's)

    def _route(self, specs: list[_wire.TaskSpec], frame: bytes | None) -> None:
        slices, refused, whole = self.routing.route(specs)
        if refused:
            now = time.time()
            for uid, why in refused:
                self.events.record(uid, S.FAILED, why, now)
                self.own.append(_wire.Update(uid, S.FAILED, now, reason=why))
        for share, ts in slices:
            self.subs[share.index].submit(ts, frame if whole else None)

    def _owners(self, uids: list[str], unowned: bool) -> dict[SubAgent, list[str]]:
        """{sub-agent: the uids of these tasks it holds}; unowned: those no live one holds
        go to any live one (which says what it knows of them), else nowhere."""
        parts: dict[SubAgent, list[str]] = {}
        owner, anyone = self.routing.owner, self._any()
        for uid in uids:
            share = owner(uid)
            sub = self.subs[share.index] if share is not None else (anyone if unowned else None)
            if sub is not None:
                parts.setdefault(sub, []).append(uid)
        return parts

    def _any(self) -> SubAgent | None:
        return next((s for s in self.subs if not s.ended and s.share.alive), None)

    def _group_home(self, template: _wire.TaskSpec) -> SubAgent:
        key = (
            template.ranks,
            template.cores_per_rank,
            template.gpus_per_rank,
            template.mem_per_rank,
        )
        live = [s for s in self.subs if s.share.alive and not s.ended]
        fit = [s for s in live if misfit(*key, s.share.shape) is None] or live or self.subs
        return max(fit, key=lambda s: (s.share.cores - s.share.load, -s.index))

    def _explain(self, msg: _wire.Explain, here: bool = False) -> None:
        """Ask the sub-agents that hold these tasks (here: the answer is the root's own to
        take, from `told`, not the client's)."""
        uids = list(msg.uids)
        parts = self._owners(uids, unowned=True)
        self.answers[msg.token] = [uids, len(parts), {}, here]
        for sub, its in parts.items():
            token = secrets.token_hex(8)
            self.explains[token] = (msg.token, sub)
            sub.post(_wire.encode(_wire.Explain(token, its)))
        self._explained(msg.token)

    def _explained(self, token: str) -> None:
        ans = self.answers.get(token)
        if ans is not None and ans[1] <= 0:
            del self.answers[token]
            items = [ans[2][u] for u in ans[0] if u in ans[2]]
            if ans[3]:
                self.told[token] = items
            else:
                self.pending.append((False, _wire.encode(_wire.Explained(token, items))))

    def _explain_file(self, uids: list[str]) -> list[dict]:
        """`pilotfish explain`'s request file (agent/explain.py): the sub-agents that hold
        the tasks are asked, and their answers awaited here -- EXPLAIN_WAIT_S at most, the
        sub-agents served meanwhile (the client's frames wait)."""
        token = "file." + secrets.token_hex(8)
        self._explain(_wire.Explain(token, uids[:MAX_UIDS]), here=True)
        deadline = time.monotonic() + EXPLAIN_WAIT_S
        while token not in self.told and time.monotonic() < deadline:
            self._flush()
            ready = dict(self.poller.poll(50))
            for sock, sub in self.by_sock.items():
                if sock in ready and not sub.ended:
                    for payload in sub.recv():
                        self._on_sub(sub, payload)
        self.answers.pop(token, None)
        return self.told.pop(token, [])

    def _resync(self, uids: list[str]) -> None:
        self.events.record(self.uid, E.CLIENT_REATTACH, f"{len(uids)} tasks asked")
        self._flush()
        self._hello()
        live = [s for s in self.subs if not s.ended]
        self.resync = [set(live), set(uids)]
        for sub in live:
            sub.post(_wire.encode(_wire.Resync(uids)))
        self._resynced()

    def _resynced(self) -> None:
        if self.resync is not None and not self.resync[0]:
            missing = sorted(self.resync[1])
            self.resync = None
            self._flush()
            self.pending.append((False, _wire.encode(_wire.Missing(missing))))

    # -- from the sub-agents ----------------------------------------------------------------
    def _on_sub(self, sub: SubAgent, payload: bytes) -> None:
        try:
            msg = _from_sub(payload)
        except Exception as e:  # noqa: BLE001 -- a sub-agent's bug: logged, dropped
            log.warning("dropped an undecodable frame from %s: %s", sub.share.label, e)
            return
        if isinstance(msg, Heads):
            seen = self.routing.seen
            for h in msg.items:
                seen(h.uid, h.state)
            self.pending.append((True, payload))
        elif isinstance(msg, (_wire.GroupView, _wire.MemberNews, _wire.GroupAck)):
            self.pending.append((False, payload))
        elif isinstance(msg, _wire.Hello):
            if not sub.up:
                sub.up = True
                self.events.record(
                    self.uid, E.SUBAGENT_UP, f"p{sub.index} {msg.pid} {','.join(sub.share.names)}"
                )
        elif isinstance(msg, _wire.Bye):
            sub.bye = msg
        elif isinstance(msg, _wire.Explained):
            asked = self.explains.pop(msg.token, None)
            if asked is not None and asked[0] in self.answers:
                ans = self.answers[asked[0]]
                ans[1] -= 1
                for item in msg.items:
                    ans[2].setdefault(item.get(X.UID), item)
                self._explained(asked[0])
        elif isinstance(msg, _wire.Missing):
            if self.resync is not None and sub in self.resync[0]:
                self.resync[0].discard(sub)
                self.resync[1] &= set(msg.uids)
                self._resynced()

    def _gone(self, sub: SubAgent) -> None:
        """Its process ended: its partition is lost (see the module docstring)."""
        why = sub.silent or sub.exited() or "ended"
        if sub.bye is not None and sub.silent is None:
            why = f"ended: {sub.bye.reason}"
        sub.ended = why
        for thing in (sub.sock, sub.pidfd):
            try:
                self.poller.unregister(thing)
            except KeyError:
                pass
        for payload in sub.recv():  # what it sent before it ended
            self._on_sub(sub, payload)
        left = sub.leftovers()
        share = sub.share
        if self.stopping is None:
            log.error("%s %s (%d processes it left killed)", share.label, why, left)
            self.events.record(self.uid, E.SUBAGENT_LOST, f"p{sub.index} {why}"[:500])
        unfinished = self.routing.lost(share, why)
        for token, (_, s) in list(self.explains.items()):
            if s is sub:
                client_token = self.explains.pop(token)[0]
                if client_token in self.answers:
                    self.answers[client_token][1] -= 1
                    self._explained(client_token)
        if self.resync is not None and sub in self.resync[0]:
            self.resync[0].discard(sub)
            self._resynced()
        if unfinished:
            self._decide(sub, unfinished, why)
        if self.stopping is None and not any(s.share.alive for s in self.subs):
            bye = next((s.bye for s in self.subs if s.bye is not None), None)
            if bye is not None and all(s.bye is not None for s in self.subs):
                self._stop(bye.state, bye.reason)
            else:
                self._stop(S.FAILED, "every sub-agent ended: " + self._whys())

    def _decide(self, sub: SubAgent, unfinished: list, why: str) -> None:
        """A gone sub-agent's unfinished tasks: journaled finals go up; started ones FAIL
        naming it (or run again elsewhere with retries); the others go elsewhere as new."""
        finals, spawned = sub.journal()
        now = time.time()
        again: list[_wire.TaskSpec] = []
        label = sub.share.label
        for spec, started in unfinished:
            uid = spec.uid
            rec = finals.get(uid)
            if rec is not None:
                _, _, state, code, sig, reason, t = rec
                self.own.append(
                    _wire.Update(uid, state, t, exit_code=code, signal=sig, reason=reason)
                )
                continue
            if self.stopping is not None:
                reason = f"pilot stopped: {self.stopping[1]}"
                self.own.append(_wire.Update(uid, S.CANCELED, now, reason=reason))
                continue
            if not (started or uid in spawned):
                again.append(spec)
                continue
            text = f"{label} died ({why}) while the task ran there"[:500]
            if spec.retries > 0:
                again.append(msgspec.structs.replace(spec, retries=spec.retries - 1))
                self.events.record(uid, E.RETRY, text, now)
                self.own.append(
                    _wire.Update(uid, E.RETRY, now, reason=f"runs again elsewhere: {text}")
                )
            else:
                self.events.record(uid, S.FAILED, text, now)
                self.own.append(_wire.Update(uid, S.FAILED, now, reason=text))
        if again:
            self._route(again, None)

    def _whys(self) -> str:
        return "; ".join(f"p{s.index}: {s.ended or s.silent or 'running'}" for s in self.subs)[
            :1000
        ]

    # -- to the client ------------------------------------------------------------------------
    def _flush(self) -> None:
        for sub in self.subs:
            if sub.outbox and sub.flush():
                log.warning("%s unreachable: tasks sent to it wait for its end", sub.share.label)
        if self.own:
            self.pending.append((True, _wire.encode(_wire.Updates(self.own))))
            self.own = []
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        run: list[bytes] = []
        for is_updates, payload in pending:
            if is_updates:
                run.append(payload)
                continue
            self._send_updates(run)
            run = []
            self.up.send(payload)
        self._send_updates(run)
        self.last_sent = time.monotonic()

    def _send_updates(self, run: list[bytes]) -> None:
        if len(run) == 1:
            self.up.send(run[0])
        elif run:  # one frame of them all: their items as they are
            items: list[msgspec.Raw] = []
            for payload in run:
                items += _raw_updates(payload).items
            self.up.send(_wire.encode(RawUpdates(items)))

    # -- the end ------------------------------------------------------------------------------
    def _stop(self, state: str, reason: str, signal_subs: bool = False) -> None:
        if self.stopping is not None:
            return
        self.stopping = (state, reason)
        self.stop_deadline = time.monotonic() + STOP_S
        self.events.record(self.uid, E.DRAIN_START, reason)
        for sub in self.subs:
            if sub.ended or sub.status is not None:
                continue
            if signal_subs:
                sub.kill(signal.SIGTERM)
            else:
                sub.post(_wire.encode(_wire.Shutdown(reason)))

    def _end(self) -> int:
        state, reason = self.stopping  # type: ignore[misc]  # set before the loop ends
        for sub in self.subs:
            sub.leftovers()
        self._flush()
        self.events.record(self.uid, E.DRAIN_STOP)
        self.events.record(self.uid, E.AGENT_STOP, reason)
        self.up.send(_wire.encode(_wire.Bye(self.uid, state, reason, time.time())))
        self.events.close()
        for sub in self.subs:
            sub.close()
        self.zap.close()
        self.up.close()  # lingers until the bye is out (LINGER)
        self.ctx.term()
        return 0


def run_root(config: _wire.AgentConfig) -> int:
    """The root's life (the agent's main() calls it instead of running the agent)."""
    root = Root(config)

    def on_term(*_: object) -> None:
        root.signalled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    return run_profiled(root.run, "PILOTFISH_ROOT_CPROFILE")  # where the root's time goes
