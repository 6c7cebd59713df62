"""Input and output staging on the filesystems the agent sees: copy, link or move."""

from __future__ import annotations

import os
import shutil


def stage(directives: list[dict[str, str]], cwd: str, outbound: bool = False) -> None:
    """Run staging directives. Inbound: source -> cwd/target; outbound: cwd/source -> target.

    Relative paths are relative to the task's working directory. Raises OSError naming the
    path that failed.
    """
    for d in directives:
        src, dst, action = d["source"], d["target"], d.get("action", "copy")
        if outbound:
            src = src if os.path.isabs(src) else os.path.join(cwd, src)
        else:
            dst = dst if os.path.isabs(dst) else os.path.join(cwd, dst)
        parent = os.path.dirname(dst)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if action == "link":
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(os.path.abspath(src), dst)
        elif action == "move":
            shutil.move(src, dst)
        elif os.path.isdir(src):
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
