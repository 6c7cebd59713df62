"""Input and output staging on the filesystems the agent sees: copy, link or move.

Confined: the sandbox side of a directive (an input's target, an output's source) stays inside
the task's working directory; the other side may be any absolute path except the pilot's own
files (its event log, journal, keys, configuration). The client checked this at submit; the
agent checks again, after resolving symlinks, because the wire is an API too.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence


def stage(
    directives: Sequence[dict[str, str]],
    cwd: str,
    outbound: bool = False,
    sandbox: str | None = None,
) -> None:
    """Run staging directives. Inbound: source -> cwd/target; outbound: cwd/source -> target.

    Sandbox-side paths are relative to the task's working directory `cwd` and may not leave
    it; outer paths that are relative are taken relative to `cwd` too (the client makes the
    user's relative paths absolute). Raises OSError naming the path that failed, ValueError
    for a path that escapes or names the pilot's own files (`sandbox`: the pilot sandbox).
    """
    from ._paths import confined, resolve

    pilot = sandbox if sandbox is not None else cwd
    for d in directives:
        src, dst, action = d["source"], d["target"], d.get("action", "copy")
        if not isinstance(src, str) or not isinstance(dst, str):
            raise ValueError(f"staging paths must be strings: {src!r} -> {dst!r}")
        if outbound:  # the sandbox side is relative; the other may be absolute
            src, dst = resolve(cwd, confined(cwd, src), pilot), resolve(cwd, dst, pilot)
        else:
            src, dst = resolve(cwd, src, pilot), resolve(cwd, confined(cwd, dst), pilot)
        parent = os.path.dirname(dst)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if action == "link":
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(os.path.abspath(src), dst)
        elif action == "move":
            shutil.move(src, dst)
        elif action in ("copy", "transfer"):  # transfer: a copy between the two sides
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dst)
        elif action == "tarball":
            _tarball(src, dst)
        else:
            raise ValueError(f"unknown staging action {action!r}")


def _tarball(src: str, dst: str) -> None:
    """src (a file or a tree) packed into one archive next to dst, and unpacked as dst: what
    crosses between the two sides is one file. Unpacking uses tarfile's 'data' filter: no
    member may leave dst, be a device, or be a link that points out of it."""
    fd, archive = tempfile.mkstemp(prefix=".stage.", suffix=".tar", dir=os.path.dirname(dst) or ".")
    os.close(fd)
    try:
        with tarfile.open(archive, "w") as tar:
            tar.add(src, arcname=os.path.basename(dst))
        with tarfile.open(archive) as tar:
            tar.extractall(os.path.dirname(dst) or ".", filter="data")
    finally:
        os.unlink(archive)
