"""A pilot's agent files: its own agent's, then its sub-agents', in one list.

A pilot with sub-agents (agent/root.py, subagent.py) has a root in its sandbox -- its
agent.events tells the pilot's life (bootstrap, ACTIVE, partitions, sub-agents, stop) -- and
one agent per partition, each with its own files in <sandbox>/sub/p<i>/ (0700): agent.events
(its tasks' agent-side events, its launchers'), agent.journal (their finals and what they
printed), agent.exits, nodes/. Every reader of a pilot's agent files takes them from here --
`pilotfish report` and analytics (session.py, partitions.py, plans.py, launch_model.py,
outcomes.py), the dashboard (ingest.py: a tail per file), `pilotfish logs` / `explain`
(client/reading.py) and a resumed session (client/resume.py) -- so that a pilot with
sub-agents reads as one agent's.

`agent_dirs`: the sandbox, then sub/p<i> in partition order. Never through a link: a `sub`
or `p<i>` that is a symbolic link, not a directory, another owner's than the sandbox's, or
writable by its group or others (anyone could have put files there) is left out, as is a file
that is a link or not a regular file (`agent_files`). The readers open what is listed as they
open the pilot's own files (journals: _util.open_private, O_NOFOLLOW; events: O_NOFOLLOW too).

A sub-agent writes the pilot's life events as well (its own start, ACTIVE, drain, stop, under
the pilot's uid): SUB_LIFE. They are the sub-agent's, not the pilot's -- its ACTIVE comes
before the root's, one sub-agent's agent_stop before another's tasks end -- so the readers
take the pilot's life from the root's file alone (`is_sub`: a path in a sub-agent's folder).
"""

from __future__ import annotations

import os
import re
import stat

from . import _events as E

SUB_DIR = "sub"  # <sandbox>/sub/p<i>: sub-agent i's folder (agent/root.py)
_PART = re.compile(r"p(\d{1,9})")
SUB_LIFE = frozenset(
    (
        E.BOOTSTRAP_START,
        E.RESOURCES_OK,
        "ACTIVE",
        E.DRAIN_START,
        E.DRAIN_STOP,
        E.AGENT_STOP,
        "DONE",
        "FAILED",
        "CANCELED",
    )
)  # under the pilot's uid in a sub-agent's file: the sub-agent's life, not the pilot's


def _private_dir(path: str, owner: int | None) -> os.stat_result | None:
    """lstat of path if it is a directory (not a link) of `owner` (any, if None) that no one
    but its owner may write to; else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o022:
        return None
    if owner is not None and st.st_uid != owner:
        return None
    return st


def sub_dirs(sandbox: str) -> list[str]:
    """The sub-agents' folders of a pilot, sub/p<i> by i (none for a pilot of one agent)."""
    try:
        owner = os.lstat(sandbox).st_uid
    except OSError:
        return []
    top = os.path.join(sandbox, SUB_DIR)
    if _private_dir(top, owner) is None:
        return []
    found = []
    try:
        with os.scandir(top) as it:
            for e in it:
                m = _PART.fullmatch(e.name)
                if m and _private_dir(e.path, owner) is not None:
                    found.append((int(m.group(1)), e.path))
    except OSError:
        return []
    return [p for _, p in sorted(found)]


def agent_dirs(sandbox: str) -> list[str]:
    """The folders of a pilot's agents: its sandbox (the agent, or the root), then its
    sub-agents' (sub_dirs)."""
    return [sandbox, *sub_dirs(sandbox)]


def agent_files(sandbox: str, name: str) -> list[str]:
    """The files `name` (agent.events, agent.journal, ...) of a pilot's agents that are
    there, in agent_dirs order: regular files, never a link."""
    out = []
    for d in agent_dirs(sandbox):
        path = os.path.join(d, name)
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append(path)
        except OSError:
            continue
    return out


def is_sub(path: str) -> bool:
    """Whether a file listed by agent_files is a sub-agent's (in <sandbox>/sub/p<i>/)."""
    d = os.path.dirname(os.path.normpath(path))
    return bool(_PART.fullmatch(os.path.basename(d))) and (
        os.path.basename(os.path.dirname(d)) == SUB_DIR
    )


def pilot_finals(sandbox: str, strict: bool = False) -> dict[str, list]:
    """uid -> final record of every task a pilot's agents journaled it finished (or their
    exit logs prove; _journal.agent_finals of each agent's folder), the first agent's first."""
    from ._journal import agent_finals

    out: dict[str, list] = {}
    for d in agent_dirs(sandbox):
        for uid, rec in agent_finals(d, strict=strict).items():
            out.setdefault(uid, rec)
    return out
