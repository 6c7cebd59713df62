"""A local spawner for the PMI server (pilotfish.agent.pmi): what a node executor does, with
subprocess, for tests and benches (tests/agent/test_pmi.py, bench/bench_pmi_local.py).

    procs = spawn_local(job, argv, env, stdout=...)   # every local rank, its PMI_FD inherited
    ok = wait_local([server], procs.values(), 60)     # serve until all exited (or kill them)
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pilotfish.agent.pmi import PmiJob, PmiServer, rank_environment


def spawn_local(
    job: PmiJob, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any
) -> dict[int, subprocess.Popen]:
    """Start every local rank of `job` as `argv`, each holding its PMI descriptor, and close
    this process's copies. Popen keywords (cwd, stdout, stderr...) pass through; a callable
    keyword value is called with the rank (e.g. stdout=lambda r: files[r])."""
    base = os.environ if env is None else env
    procs: dict[int, subprocess.Popen] = {}
    try:
        for r in job.ranks:
            kw = {k: (v(r) if callable(v) else v) for k, v in popen.items()}
            procs[r] = subprocess.Popen(
                list(argv), env=rank_environment(base, job, r), pass_fds=(job.rank_fds[r],), **kw
            )
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        raise
    finally:
        job.close_rank_fds()
    return procs


def wait_local(
    servers: Sequence[PmiServer],
    procs: Iterable[subprocess.Popen],
    timeout: float,
    on_exit: Callable[[subprocess.Popen], None] | None = None,
) -> bool:
    """Serve `servers` until every process in `procs` has exited (True) or `timeout` seconds
    passed (False: what still runs is killed and reaped). on_exit(proc) as each is reaped."""
    waiting: dict[int, subprocess.Popen] = {}
    sel = select.epoll()
    try:
        for s in servers:
            sel.register(s.fileno(), select.EPOLLIN)
        for p in procs:
            pfd = os.pidfd_open(p.pid)
            waiting[pfd] = p
            sel.register(pfd, select.EPOLLIN)
        end = time.monotonic() + timeout
        by_server: dict[int, PmiServer] = {s.fileno(): s for s in servers}
        while waiting:
            left = end - time.monotonic()
            if left <= 0:
                for p in waiting.values():
                    _kill(p)
                return False
            for fd, _ in sel.poll(min(left, 1.0)):
                srv = by_server.get(fd)
                if srv is not None:
                    srv.poll(0)
                    continue
                if fd not in waiting:
                    continue
                p = waiting.pop(fd)
                sel.unregister(fd)
                os.close(fd)
                p.wait()
                if on_exit is not None:
                    on_exit(p)
            for s in servers:  # answers that were queued while a process exited
                s.poll(0)
        return True
    finally:
        for fd in waiting:
            os.close(fd)
        sel.close()


def _kill(p: subprocess.Popen) -> None:
    try:
        p.send_signal(signal.SIGKILL)
    except OSError as e:  # already reaped
        if e.errno != errno.ESRCH:
            raise
    p.wait()
