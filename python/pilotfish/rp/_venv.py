"""RP 1.60's prepare_env 'path': an existing venv that each task of the environment activates
(RP's create-static-ve, which installs nothing): a shell environment whose first pre_exec line
sources the venv's bin/activate, as the pilot's user.

So the venv must be as trusted as the pilot's own sandbox (the checks of
_util.private_dir): refused at the call, naming the path and why, is

- a path that is not absolute, not a directory, not a venv (no bin/python, bin/activate);
- a path the activation cannot carry as written: venv writes its path into bin/activate in
  double quotes, and a task's pre_exec line is shell text -- only letters, digits, space and
  `/._+-,@%=` (no quote, `$`, backquote, backslash, newline or other control, `:` (PATH's
  separator), `;`...);
- a venv whose parts a task runs are not the pilot's user's (or root's) alone: the venv, its
  bin/ and every entry there (bin/ is put first on PATH; a link's target too), pyvenv.cfg,
  lib/, lib/python*/, site-packages and every entry there (a .pth file runs at Python's
  start) -- owned by another user, or writable by the group or others; files deeper down
  (a package's modules) are not looked at;
- a venv in a directory another user could swap it out of: each directory above it owned by
  another user, or writable by others without the sticky bit; a symbolic link on the way that
  another user owns.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat as _stat

from .._util import user_name

log = logging.getLogger("pilotfish.rp")
_CARRIED = set("/._+-,@%= ")  # with letters and digits: what the activation carries as written


def existing_venv(env_name: str, path: object, spec: dict) -> dict:
    """The shell environment that activates the venv at `path` before each task's pre_exec;
    ValueError naming the path when it cannot be used (see the module)."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r} must be an absolute path to an existing venv"
        )
    if spec.get("type", "venv") != "venv":
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r} is for type 'venv' (not {spec.get('type')!r})"
        )
    path = path.rstrip("/") or "/"
    bad = sorted({c for c in path if not (c.isalnum() or c in _CARRIED)})
    if bad:
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r}: the activation line cannot carry "
            f"{', '.join(repr(c) for c in bad)} (venv writes the path into bin/activate in "
            "double quotes, and each task sources it): use a path of letters, digits, space "
            "and /._+-,@%="
        )
    if not os.path.isdir(path):
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r} does not exist: pilotfish.rp uses an "
            f"existing venv there (make it first: python3 -m venv {path}), or leave 'path' "
            "out to have one made on the pilot"
        )
    python = os.path.join(path, "bin", "python")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)) or not os.path.isfile(
        os.path.join(path, "bin", "activate")
    ):
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r} is not a venv (no executable "
            "bin/python and bin/activate in it)"
        )
    why = _untrusted(path)
    if why is not None:
        raise ValueError(
            f"prepare_env {env_name!r}: path {path!r}: {why}: its bin/activate would run in "
            f"every task as you ({user_name(os.geteuid())}); use a venv of your own that only "
            f"you can write to (if it is yours: chmod -R go-w {shlex.quote(path)})"
        )
    if spec.get("setup") or spec.get("packages"):
        log.info(
            "prepare_env %r: %s exists: used as it is, its 'setup' not installed (as RP)",
            env_name,
            path,
        )
    activate = f". {shlex.quote(os.path.join(path, 'bin', 'activate'))}"
    return {"type": "shell", "pre_exec": [activate, *list(spec.get("pre_exec") or [])]}


def _untrusted(path: str) -> str | None:
    """Why the venv at `path` is not the pilot's user's alone (see the module), or None."""
    me = os.geteuid()
    ours = (me, 0)
    # the way there: a link another user owns may be pointed elsewhere at any time
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        p = "/".join(parts[:i])
        st = os.lstat(p)
        if _stat.S_ISLNK(st.st_mode) and st.st_uid not in ours:
            return f"{p} is a symbolic link owned by {user_name(st.st_uid)}"
    real = os.path.realpath(path)
    # the directories above it: their owner, or anyone (no sticky bit), may swap it out
    up = os.path.dirname(real)
    while True:
        st = os.stat(up)
        if st.st_uid not in ours:
            return f"{up} is owned by {user_name(st.st_uid)}, who could put another venv there"
        if st.st_mode & _stat.S_IWOTH and not st.st_mode & _stat.S_ISVTX:
            return (
                f"{up} is writable by every user and has no sticky bit (mode "
                f"{_stat.S_IMODE(st.st_mode):04o}): anyone could put another venv there"
            )
        if up == "/":
            break
        up = os.path.dirname(up)
    # what a task runs from it
    parts_run = [real, os.path.join(real, "pyvenv.cfg"), os.path.join(real, "lib64")]
    for sub in ("bin", "lib"):
        d = os.path.join(real, sub)
        parts_run.append(d)
        if os.path.isdir(d) and not os.path.islink(d):
            for e in sorted(os.listdir(d)):
                parts_run.append(os.path.join(d, e))
                site = os.path.join(d, e, "site-packages")
                if sub == "lib" and os.path.isdir(site):
                    parts_run.append(site)
                    parts_run.extend(os.path.join(site, x) for x in sorted(os.listdir(site)))
    for p in parts_run:
        why = _not_ours(p, ours)
        if why is not None:
            return why
    return None


def _not_ours(p: str, ours: tuple[int, int]) -> str | None:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None  # (pyvenv.cfg of an older venv)
    if _stat.S_ISLNK(st.st_mode):
        if st.st_uid not in ours:
            return f"{p} is a symbolic link owned by {user_name(st.st_uid)}"
        try:
            st = os.stat(p)  # what it points to
        except FileNotFoundError:
            return None  # (a dangling link runs nothing)
        p = f"{p} (-> {os.path.realpath(p)})"
    if st.st_uid not in ours:
        return f"{p} is owned by {user_name(st.st_uid)}"
    mode = _stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}[mode & 0o022]
        return f"{p} is writable by {who} (mode {mode:04o})"
    return None
