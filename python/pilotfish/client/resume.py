"""Resuming a session: what its journal says (Resumed), and its pilots' agents from before.

A resumed session (Session(resume=True)) reads its journal once, here: the pilots it started
(in order, a replaced one in its predecessor's slot), the tasks it sent and where, the finals
it and every agent journaled (a pilot's sub-agents' too), the tasks a dead agent's keeper
still runs. Its managers match what is submitted again against that: TaskManager the tasks
(by order), PilotManager the pilots (Resumed.match_pilot: the next journaled one, the
description it runs with, its agent's key), then asks local_agent whether that agent may
still live; one that cannot is stopped here (stop_stale_agent) so that nothing runs on it
and on its replacement at once.
The wiring of a re-attaching pilot (its listener, its resync) is the PilotManager's.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import NamedTuple

from .. import _json, _wire
from .._errors import PilotfishError
from .._agent_files import pilot_finals
from .._journal import keeper_adopted, keeper_state, read_journal
from .._util import hostname, read_private
from ..descriptions import PilotDescription

log = logging.getLogger("pilotfish.client")


class PilotMatch(NamedTuple):
    """A journaled pilot that a description submitted again matches (Resumed.match_pilot)."""

    uid: str
    description: PilotDescription
    """What it runs with if its agent still lives: as it was submitted (a resume may change
    the description; that applies to the pilots the resume starts)."""
    sandbox: str
    changed: str | None
    """The fields the resume changed ("runtime: 4.0 -> 600.0, ..."), None if none."""
    public_key: bytes | None
    """Its agent's CURVE public key (None: the session is not secure)."""


class Resumed:
    """What the journal of a session being resumed says."""

    def __init__(self) -> None:
        self.pilots: list[tuple[str, dict, str]] = []  # (uid, description, sandbox), in order
        self.tasks: list[tuple[str, str, dict]] = []  # (uid, pilot uid, values), submit order
        self.pilot_of: dict[str, str] = {}  # task uid -> the pilot it was last sent to
        self.finals: dict[str, list] = {}  # task uid -> ["final", uid, state, code, sig, reason, t]
        self.answers: dict[str, object] = {}  # task uid -> latest agent update (re-attach)
        self.adopted: dict[str, str] = {}  # task uid -> sandbox whose agent's keeper runs it
        self.next_task = 0
        self.next_pilot = 0
        self.pilots_used = 0  # how many journaled pilots submit_pilots has matched
        self.tasks_used = 0  # how many journaled tasks submit_tasks has matched

    def pilot_keys(self) -> dict[str, bytes]:
        """{uid: agent public key} of the journaled pilots (from their agent.json)."""
        out = {}
        for uid, _, sandbox in self.pilots:
            try:
                curve = _json.loads(read_private(os.path.join(sandbox, "agent.json"))).get("curve")
            except (OSError, ValueError, AttributeError):
                continue
            if curve:
                out[uid] = curve["public"].encode()
        return out

    def match_pilot(self, d: PilotDescription) -> tuple[PilotMatch | None, str | None]:
        """The next journaled pilot, for a description submitted again: (its match, None);
        (None, its uid) if its agent's configuration is unreadable (a new pilot replaces it);
        (None, None) once every journaled pilot was matched (a new pilot, replacing none)."""
        if self.pilots_used >= len(self.pilots):
            return None, None
        uid, old_desc, sandbox = self.pilots[self.pilots_used]
        self.pilots_used += 1
        # The pilot's description is not the tasks' identity: a resume may change it (a
        # walltime too short is fixed by resuming with a longer one). A pilot whose agent
        # is gone is replaced by one of the new description; one still alive is re-attached
        # as it was submitted (stopping it would lose what it runs), and that is said.
        new = d.as_dict()
        changed = changed_fields(old_desc, new) if old_desc != new else None
        try:  # (never through a link: it holds the agent's secret key)
            cfg_path = os.path.join(sandbox, "agent.json")
            curve = _wire.decode_agent_config(read_private(cfg_path), cfg_path).curve
        except (OSError, ValueError) as e:
            log.warning("resume: pilot %s is replaced: %s", uid, e)
            return None, uid
        described = as_submitted(old_desc, d) if changed is not None else d
        public = curve.public.encode() if curve else None
        return PilotMatch(uid, described, sandbox, changed, public), None

    def unfinished_on(self, pilot_uid: str) -> list[str]:
        """The tasks last sent to this pilot that no final says ended (to ask its agent)."""
        return [
            t
            for t, _, _ in self.tasks
            if self.pilot_of.get(t) == pilot_uid and t not in self.finals
        ]

    def learn(self, sandbox: str, strict: bool = False) -> None:
        """What a pilot's agents journaled they finished (its own, its sub-agents' in
        sub/p<i>/: _agent_files.pilot_finals), and what its keeper still runs (its agent
        died): known whatever happens to the pilot next (an agent journals before it sends).
        A final the session's journal has already is kept."""
        for uid, rec in pilot_finals(sandbox, strict=strict).items():
            self.finals.setdefault(uid, rec)
        for uid in keeper_adopted(sandbox):  # its agent died; its keeper still runs these
            if uid not in self.finals:
                self.adopted[uid] = sandbox

    @classmethod
    def load(cls, path: str) -> "Resumed":
        """Read the session's journal, and its pilots' agent and keeper journals. A journal
        damaged anywhere but in a last record cut short by a kill, or holding records of the
        wrong shape, is refused (JournalError: the file, the byte offset, what to do) --
        never read up to the damage and taken for all there was."""
        r = cls()
        seen = set()
        sandboxes: list[str] = []
        for rec in read_journal(os.path.join(path, "journal"), strict=True):
            kind = rec[0]
            if kind == "task":
                uid = rec[1]
                if uid not in seen:
                    seen.add(uid)
                    r.tasks.append((uid, rec[2], rec[3]))
                r.pilot_of[uid] = rec[2]
                r.next_task = max(r.next_task, int(uid.rsplit(".", 1)[1]) + 1)
            elif kind == "final":
                r.finals[rec[1]] = rec
            elif kind == "pilot":  # [pilot, uid, description, sandbox, replaced uid | None]
                sandboxes.append(rec[3])
                replaced = rec[4] if len(rec) > 4 else None
                slot = next((i for i, p in enumerate(r.pilots) if p[0] == replaced), None)
                if replaced is not None and slot is not None:
                    r.pilots[slot] = (rec[1], rec[2], rec[3])  # the pilot a resume started instead
                else:
                    r.pilots.append((rec[1], rec[2], rec[3]))
                r.next_pilot = max(r.next_pilot, int(rec[1].rsplit(".", 1)[1]) + 1)
        # every agent the session ever had journaled what it finished -- also those that a
        # resume replaced, which may have run on until they were stopped
        for sandbox in sandboxes:
            r.learn(sandbox, strict=True)
        # a pilot uid is never given twice, even when the journal is gone (moved away, or
        # never kept): its sandbox still holds the old agent's journals
        try:
            names = os.listdir(path)
        except OSError:
            names = []
        for name in names:
            m = _PILOT_DIR.fullmatch(name)
            if m:
                r.next_pilot = max(r.next_pilot, int(m.group(1)) + 1)
        return r


_PILOT_DIR = re.compile(r"pilot\.(\d+)")


def changed_fields(old: dict, new: dict) -> str:
    """The fields a resume changed, as "runtime: 4.0 -> 600.0, ..." (for its warning)."""
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)


def as_submitted(old: dict, new: PilotDescription) -> PilotDescription:
    """The description a journaled pilot was submitted with (its record holds runtime in
    seconds, a bare number a description refuses), or the new one if it no longer parses."""
    fields = dict(old)
    if isinstance(fields.get("runtime"), (int, float)):
        fields["runtime"] = f"{fields['runtime']}s"
    try:
        return PilotDescription(fields)
    except PilotfishError:
        return new


def local_agent(sandbox: str) -> tuple[int, bool]:
    """(the pid of the pilot's agent if it ran on this host, else 0; whether it may still
    live). One that ran here is alive only while its pid runs our agent.json; one that ran
    elsewhere, or never said hello (still queued?), may live: ask it."""
    try:
        with open(os.path.join(sandbox, "pilot.json")) as f:
            info = _json.load(f)
    except (OSError, ValueError):
        return 0, True
    pid = int(info.get("agent_pid") or 0)
    if not pid or info.get("agent_host") != hostname():
        return 0, True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return pid, os.path.join(sandbox, "agent.json").encode() in f.read()
    except OSError:
        return pid, False


def stop_stale_agent(pid: int, sandbox: str, grace: float = 5.0) -> None:
    """Stop an agent on this host that did not answer or died, so that nothing runs on it
    and on its replacement at once. Under a keeper (agent/keeper.py) only the agent is
    killed: the tasks it was running are the keeper's now, which sees them to their end and
    records it, so they are neither lost nor run twice. An agent without a keeper led its own
    session: that whole session goes, as the local batch adapter does at job end."""
    import signal

    from ..batch.local import session_members

    members = session_members(pid)
    if members:
        for member in members:
            try:
                os.kill(member, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    else:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                ours = os.path.join(sandbox, "agent.json").encode() in f.read()
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{ppid}/cmdline", "rb") as f:
                kept = b"keeper" in f.read()
        except (OSError, ValueError, IndexError):
            ours = kept = False
        if ours:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if kept:  # its keeper says what it holds before we go on
                deadline = time.monotonic() + grace
                while (
                    keeper_state(sandbox) is None
                    and os.path.exists(f"/proc/{ppid}")
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.02)
    deadline = time.monotonic() + grace
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
