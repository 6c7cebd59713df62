"""Small helpers shared by every layer."""

from __future__ import annotations

import os
import re
import socket
import time

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
                raise ValueError("not a duration; use seconds or e.g. '90s', '30m', '2h', 'HH:MM:SS'")
            # float(), not int(): int() of more than 4300 digits raises; float() gives inf
            days, a, b, c = (float(g) if g is not None else None for g in m.groups())
            if c is None:  # MM:SS
                seconds = a * 60 + b
            else:  # HH:MM:SS
                seconds = a * 3600 + b * 60 + c
            seconds += (days or 0.0) * 86400
    else:
        raise ValueError(f"expected seconds or a duration string, got {type(value).__name__}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError("must be finite")
    return seconds


def write_private(path: str, data: bytes) -> None:
    """Write a file only its owner can read (0600), atomically (keys, agent configuration)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def now() -> float:
    return time.time()


def hostname() -> str:
    return socket.gethostname()


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
