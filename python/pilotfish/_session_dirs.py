"""Is this directory a session? -- and if not, which sessions are under it.

`pilotfish report`, `logs`, `explain` and `dashboard` take a SESSION_DIR; given the directory
that holds sessions (./pilotfish-sessions) or any other, each refuses it with one message
that lists the sessions under it (issue 41, papercut 3). No pandas here: `logs` stays light.
"""

from __future__ import annotations

import os

MARKERS = ("session.json", "client.events")  # what every session (run, Python, simulated) has
SHOWN = 10  # the newest this many are listed


def is_session(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, m)) for m in MARKERS)


def sessions_under(path: str, depth: int = 2) -> list[str]:
    """The session directories under path (to depth levels down), oldest first."""
    found: list[tuple[float, str]] = []
    level = [path]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    entries = [e for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in entries:
                if is_session(e.path):
                    try:
                        found.append((e.stat().st_mtime, e.path))
                    except OSError:
                        pass
                else:
                    nxt.append(e.path)
        level = nxt
    return [p for _, p in sorted(found)]


def not_a_session(path: str) -> str | None:
    """None if path is a session directory; else why not, and the sessions under it."""
    if is_session(path):
        return None
    head = f"{path}: not a pilotfish session directory (it has no {' or '.join(MARKERS)})"
    found = sessions_under(path)
    if not found:
        return head + "; there is no pilotfish session under it either"
    newest = found[-SHOWN:][::-1]
    more = f" (and {len(found) - len(newest)} older)" if len(found) > len(newest) else ""
    lines = "\n".join(f"  {p}" for p in newest)
    return f"{head}; the sessions under it, newest first{more}:\n{lines}"
