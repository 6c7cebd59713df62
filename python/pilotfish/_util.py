"""Small helpers shared by every layer.

Private files and directories (`private_dir`, `open_private`, `read_private`,
`write_private`): what pilotfish keeps in a session directory (journals, events, keys, agent
configuration) is opened without following a symbolic link (O_NOFOLLOW), closed on exec
(O_CLOEXEC), created 0600 in a 0700 directory of the user's own; a directory or file another
user made, or could have changed, is refused with a SessionError naming the path and why.
`private_tree` takes group and others' bits off what another tool made inside such a
directory with modes of its own.
"""

from __future__ import annotations

import errno as _errno
import gc
import os
import re
import secrets
import socket
import stat as _stat
import time
from contextlib import contextmanager

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_S = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_HMS = re.compile(r"^\s*(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?\s*$")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string: 90, "90s", "30m", "2h", "1.5h", "01:30:00", "1-00:00:00".

    Always a finite float. Raises ValueError with the reason (never OverflowError for a huge
    int); callers add the field name and their own bounds.
    """
    if isinstance(value, bool):
        raise ValueError("expected seconds or a duration string such as '90s', '30m', '2h'")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range
            raise ValueError("too large") from None
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
        else:
            m = _HMS.match(value)
            if not m:
                raise ValueError(
                    "not a duration; use seconds or e.g. '90s', '30m', '2h', 'HH:MM:SS'"
                )
            # float(), not int(): int() of more than 4300 digits raises; float() gives inf
            days, hm, ms, s = m.groups()  # hm and ms always match; days and s may not
            a, b = float(hm), float(ms)
            if s is None:  # MM:SS
                seconds = a * 60 + b
            else:  # HH:MM:SS
                seconds = a * 3600 + b * 60 + float(s)
            seconds += (float(days) if days is not None else 0.0) * 86400
    else:
        raise ValueError(f"expected seconds or a duration string, got {type(value).__name__}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError("must be finite")
    return seconds


def write_private(path: str, data: bytes) -> None:
    """Write a file only its owner can read (0600), atomically (keys, agent configuration).

    The data goes to a temporary of a name no one can guess (`path.<random>.tmp`, created
    exclusively: never through a link someone planted), then replaces `path` (a link at `path`
    itself is replaced, not written through). Raises the OSError (ENOSPC, EROFS, ...) with
    nothing left behind."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = f"{path}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:  # (48 random bits: only ever someone's planted name)
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def user_name(uid: int) -> str:
    """'uid 65534 (nobody)': a uid as an error message names it."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _refuse(path: str, why: str, code: int | None = None):
    from ._errors import SessionError

    return SessionError(f"{path} {why}", path, code)


def open_private(path: str, flags: int, mode: int = 0o600, own: bool = True) -> int:
    """os.open() of one of pilotfish's own files: never through a symbolic link (O_NOFOLLOW),
    closed on exec (O_CLOEXEC), created `mode` (0600); an existing file must be a regular file
    and (own=True) this user's, with one name (no hard link elsewhere). Raises SessionError
    for a link or a file that is not ours, naming the path; OSError as os.open raises it
    otherwise."""
    try:  # (O_NONBLOCK: a FIFO in its place must not hang the open; cleared below)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise _refuse(
                path,
                "is a symbolic link: pilotfish never follows one to its own files "
                "(another user may have planted it); remove it, or use another "
                "path",
                e.errno,
            ) from e
        raise
    try:
        st = os.fstat(fd)
        why = None
        if not _stat.S_ISREG(st.st_mode):
            why = "is not a regular file"
        elif not own:
            pass
        elif st.st_uid != os.geteuid():
            why = f"is owned by {user_name(st.st_uid)}, not by you"
        elif st.st_nlink > 1:
            why = f"has {st.st_nlink} names (hard links): what is written there goes to all of them"
        if why is not None:
            raise _refuse(
                path,
                why + "; pilotfish uses only files it made itself: remove it, or use another path",
            )
        if own and flags & (os.O_WRONLY | os.O_RDWR) and _stat.S_IMODE(st.st_mode) & ~mode:
            os.fchmod(fd, mode)  # one made by an older pilotfish (0644): ours alone from now
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(path: str) -> bytes:
    """The bytes of one of pilotfish's own files (see open_private); FileNotFoundError if
    there is none."""
    fd = open_private(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def private_dir(path: str) -> bool:
    """Make `path` a directory only this user can use (0700), or take an existing one of this
    user's that no one else could have written to. Returns whether it was made here (an
    exclusive mkdir: of two processes making the same path, one gets True).

    Refused (SessionError naming the path, why, and what to do): a directory another user
    owns or may write to (group or others: they could have planted files or links in it),
    a symbolic link another user owns (as the directory or its parent), and a parent
    directory in which someone else could swap the directory for theirs (owned by another
    user, or writable by every user without the sticky bit). Only the parent is looked at,
    not the ancestors above it. OSErrors (read-only or full file system, ...) are raised as
    they are.
    """
    path = os.path.abspath(path)
    me = os.geteuid()
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    st = os.lstat(parent)
    if _stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
        raise _refuse(
            parent,
            f"is a symbolic link owned by {user_name(st.st_uid)}, who can "
            f"point it elsewhere at any time; use a directory of your own",
        )
    st = os.stat(parent)
    if st.st_uid not in (me, 0):
        raise _refuse(
            parent,
            f"is owned by {user_name(st.st_uid)}, who could replace "
            f"{os.path.basename(path)!r} in it with a directory of theirs; "
            f"put it in a directory of your own",
        )
    if st.st_mode & _stat.S_IWOTH and not st.st_mode & _stat.S_ISVTX:
        raise _refuse(
            parent,
            f"is writable by every user and has no sticky bit (mode "
            f"{_stat.S_IMODE(st.st_mode):04o}): anyone could replace "
            f"{os.path.basename(path)!r} in it; chmod +t {parent}, or use a "
            f"directory of your own",
        )
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    st = os.lstat(path)
    if _stat.S_ISLNK(st.st_mode):
        if st.st_uid != me:
            raise _refuse(
                path,
                f"is a symbolic link owned by {user_name(st.st_uid)}: it may "
                f"point anywhere they like; use another path",
            )
        st = os.stat(path)
    if not _stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "exists and is not a directory; use another path", _errno.ENOTDIR)
    if st.st_uid != me:
        raise _refuse(
            path,
            f"is owned by {user_name(st.st_uid)}, not by you: another user made "
            f"it beforehand, and anything in it may be theirs; use another path "
            f"(or have it removed)",
        )
    mode = _stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}[mode & 0o022]
        raise _refuse(
            path,
            f"is writable by {who} (mode {mode:04o}): they may have planted files "
            f"or links in it; if it holds only your files, chmod 700 {path}, "
            f"else use another path",
        )
    if mode != 0o700:
        os.chmod(path, 0o700)
    return made


def private_tree(path: str) -> int:
    """Take group and others' bits off everything of this user's under `path` (a directory
    0700, a file 0600 or stricter): for what a tool made there with its own modes (PSI/J
    copies its launcher scripts 0644 from site-packages, whatever the umask). Never through a
    symbolic link (each entry is opened O_NOFOLLOW and changed by its descriptor); entries
    that are not ours, or cannot be opened (a socket), are left as they are. Returns how many
    were changed. OSErrors other than a vanished entry are raised."""
    changed = 0
    me = os.geteuid()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    stack = [path]
    while stack:
        top = stack.pop()
        try:
            fd = os.open(top, flags)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno in (_errno.ELOOP, _errno.ENXIO, _errno.EOPNOTSUPP):
                continue  # a link (never followed), a socket
            raise
        try:
            st = os.fstat(fd)
            if st.st_uid == me and _stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, _stat.S_IMODE(st.st_mode) & ~0o077)
                changed += 1
            if _stat.S_ISDIR(st.st_mode) and st.st_uid == me:
                with os.scandir(fd) as it:
                    stack.extend(os.path.join(top, e.name) for e in it)
        finally:
            os.close(fd)
    return changed


def now() -> float:
    return time.time()


def hostname() -> str:
    return socket.gethostname()


def proc_stats():
    """(pid, the fields of /proc/PID/stat after the command name) of every process now:
    fields[0] is the state, [1] the parent, [3] the session. (The agent's keeper has its own
    copy: it imports nothing of the package while the agent lives.)"""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(entry), fields


def pid_scope() -> str:
    """Where a pid means this process's pids: the host and its pid namespace (a batch
    system's daemons may run jobs in a namespace of their own on the same host)."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}/{ns}"


def raise_nofile_limit() -> int:
    """Raise RLIMIT_NOFILE to the hard limit (the seeds hit 4096 at ~967 tasks)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def machine_shape() -> tuple[int, int, int]:
    """(cores, gpus, mem_mib) of this machine; GPUs from CUDA_VISIBLE_DEVICES or /dev/nvidia*."""
    cores = len(os.sched_getaffinity(0))
    gpus = 0
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        gpus = len([g for g in cvd.split(",") if g.strip() != ""])
    else:
        try:
            gpus = len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)])
        except OSError:
            gpus = 0
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) // 1024
                    break
    except OSError:
        pass
    return cores, gpus, mem


@contextmanager
def gc_paused():
    """Cyclic GC off while many objects that do not form cycles are built (a bulk submit's
    tasks and wire specs, an event file's columns): otherwise each collection rescans every
    object the program holds, and a submit of 20,000 tasks into a session that already has
    100,000 pays for all of them again (2-3x slower). Process-wide: restored only if it was
    on (nested and concurrent uses leave it as they found it, or on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# a long-running loop's young-generation threshold (Python's default, 700, collects every few
# tasks' worth of allocations; settle_gc)
GC_YOUNG = 10_000


def settle_gc() -> None:
    """A long-running process's loop is about to start (the agent's, the root's): what start-up
    made (modules, the pilot's nodes and launchers) leaves the cyclic collector's view for
    good (gc.freeze, after one collection), and the young generation is collected every
    GC_YOUNG allocations. Measured (a sub-agent of 1,024 emulated nodes, one task per frame,
    ~2,000 tasks): a full collection rescanned its ~30,000 start-up objects for 15 ms now and
    then, and the young collections took 5-7 ms; frozen and at GC_YOUNG, one 1.5 ms
    collection. Cycles are still collected (what the loop makes), only later."""
    gc.collect()
    gc.freeze()
    young, mid, old = gc.get_threshold()
    if young:  # (0: collection turned off -- left so)
        gc.set_threshold(max(young, GC_YOUNG), mid, old)


def run_profiled(run, env_var: str) -> int:
    """run() -- a process's main loop, the collector settled first (settle_gc) -- under
    cProfile when the environment names a file in env_var (where a process's time goes: the
    agent's PILOTFISH_AGENT_CPROFILE, the root's PILOTFISH_ROOT_CPROFILE)."""
    settle_gc()
    prof_path = os.environ.get(env_var)
    if not prof_path:
        return run()
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(run)
    finally:
        prof.dump_stats(prof_path)
