"""RP's staging directives, and their translation into pilotfish's: RP's actions and flags
(every name RP exports), `staging` (RP's directive forms as pilotfish's directives) and
`downloads` (rp.DOWNLOAD, done by the task itself on the pilot's side). Used by the task and
pilot descriptions (_describe.py), pilot.stage_in/out (_pilot.py) and a task's
output_files (_task.py).
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

from .._errors import show

# staging actions and flags: every name RP exports (radical.pilot.constants), RP's values
COPY, LINK, MOVE, DOWNLOAD, TRANSFER, TARBALL = (
    "Copy",
    "Link",
    "Move",
    "Download",
    "Transfer",
    "Tarball",
)
RECURSIVE, CREATE_PARENTS, NON_FATAL = 1, 2, 4
SKIP_FAILED = NON_FATAL  # (an older name)
DEFAULT_ACTION = TRANSFER
DEFAULT_PRIORITY = 0
DEFAULT_FLAGS = CREATE_PARENTS
STAGING_ACTIONS = (COPY, LINK, MOVE, DOWNLOAD, TRANSFER, TARBALL)
_ACTIONS = {
    COPY: "copy",
    LINK: "link",
    MOVE: "move",
    TRANSFER: "transfer",
    TARBALL: "tarball",
    DOWNLOAD: "download",
}  # (download: done on the pilot's side, see downloads)


def downloads(directives: list[dict]) -> list[str]:
    """rp.DOWNLOAD directives as shell lines run in the task's sandbox on the pilot's side:
    the source (a URL urllib opens: http(s)://, ftp://, file://; a plain path is a file on
    the pilot's side) into the target (default: the source's base name), parents created."""
    lines = []
    for d in directives:
        src = d["source"]
        if "://" not in src:
            src = "file://" + os.path.abspath(src)
        tgt = d.get("target") or os.path.basename(src.rstrip("/").split("://", 1)[1])
        if tgt.startswith("task://"):
            tgt = tgt[len("task://") :].lstrip("/")
        lines.append(
            " ".join(
                shlex.quote(x)
                for x in (
                    sys.executable,
                    "-c",
                    "import os, sys, urllib.request as u; "
                    "os.makedirs(os.path.dirname(sys.argv[2]) or '.', exist_ok=True); "
                    "u.urlretrieve(sys.argv[1], sys.argv[2])",
                    src,
                    tgt,
                )
            )
        )
    return lines


def staging(directives: Any, field: str, fail) -> list[dict]:
    """RP's directive forms as pilotfish's: a string "src > tgt" (or "tgt < src"), a plain
    path (same name on both sides), a dict {source, target, action, flags}, or a list of
    them; RP actions (rp.TRANSFER, rp.COPY, ...) and the default action (TRANSFER)."""
    if isinstance(directives, (str, dict)):
        directives = [directives]
    out = []
    for d in directives:
        if isinstance(d, str):
            if ">" in d:
                src, _, tgt = d.partition(">")
                tgt = tgt.lstrip(">")
            elif "<" in d:
                tgt, _, src = d.partition("<")
                src = src.lstrip("<")
            else:
                src, tgt = d, None
            item: dict[str, Any] = {"source": src.strip()}
            if tgt is not None and tgt.strip():
                item["target"] = tgt.strip()
            out.append({**item, "action": "transfer"})
            continue
        if not isinstance(d, dict):
            raise fail(field, f"directive {show(d, 60)} must be a string or a dict")
        unknown = sorted(
            set(d) - {"source", "target", "action", "flags", "priority", "uid", "prof_id"}
        )
        if unknown:
            raise fail(field, f"directive {show(d, 60)} has unknown keys {unknown}")
        action = d.get("action", TRANSFER)
        if action not in _ACTIONS:
            raise fail(
                field,
                f"action {show(action, 30)} must be one of rp.COPY, rp.LINK, "
                f"rp.MOVE, rp.TRANSFER, rp.TARBALL",
            )
        item = {"source": d.get("source"), "action": _ACTIONS[action]}
        if d.get("target"):
            item["target"] = d["target"]
        out.append(item)
    return out
