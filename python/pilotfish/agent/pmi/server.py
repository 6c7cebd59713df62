"""The PMI server of one node (PmiServer): the protocol engine (engine.py) on real
descriptors. Each local rank gets one socketpair (nothing listens on a port, so nothing but
the rank can speak to it): the server keeps its end, non-blocking, in one epoll descriptor;
the rank's end is job.rank_fds[rank] until it is spawned (job.close_rank_fds).

Event-loop friendly, no thread: `fileno()` becomes readable when any rank's connection needs
attention; register it once in the owner's poller (the node executor's zmq.Poller,
agent/node_executor.py) and call `poll()` when it is readable. (Per descriptor, `fds()` /
`on_readable(fd)` / `on_writable(fd)` do the same work.) A connection is read at most
_READS_PER_WAKE times per wake (one rank cannot starve the others); an answer the rank does
not take waits in its outbuf, written when the socket is writable -- past max_out bytes
waiting, the rank does not read its answers and its job fails (engine.fail).
"""

from __future__ import annotations

import logging
import select
import socket
from typing import Any

from .engine import Engine
from .job import Conn, PmiJob
from .parse import show

log = logging.getLogger("pilotfish.pmi")

_READ = 65536
_READS_PER_WAKE = 8  # one connection cannot starve the others


class PmiServer(Engine):
    """The PMI server of one node: any number of jobs, one epoll descriptor."""

    def __init__(self, **settings: Any) -> None:
        """Engine's settings (callbacks and limits, by keyword)."""
        super().__init__(**settings)
        self._ep = select.epoll()
        self._conns: dict[int, Conn] = {}

    def open_conn(self, job: PmiJob, rank: int) -> Conn:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine.setblocking(False)
        c = Conn(job, rank)
        c.sock, c.fd = mine, mine.fileno()
        job.conns[rank] = c  # (before registering: a failure below closes it with the job)
        job.hold_rank_end(rank, theirs)
        self._conns[c.fd] = c
        self._ep.register(c.fd, select.EPOLLIN)
        return c

    def settle(self, c: Conn) -> None:
        """Serve what a rank sent that is not read yet (its process ended: what it said
        before decides), at most 32 reads' worth."""
        ready = select.poll()
        ready.register(c.fd, select.POLLIN)
        for _ in range(32):
            if c.closed or not ready.poll(0):
                return
            self.on_readable(c.fd)

    # -- the loop -----------------------------------------------------------------------------
    def fileno(self) -> int:
        """Readable when some connection needs attention: then call poll()."""
        return self._ep.fileno()

    def poll(self, timeout: float = 0) -> int:
        """Serve what is ready (waiting up to `timeout` seconds; -1 = until something is).
        Returns the number of events handled."""
        try:
            events = self._ep.poll(timeout)
        except InterruptedError:
            return 0
        for fd, ev in events:
            if ev & select.EPOLLOUT:
                self.on_writable(fd)
            if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                self.on_readable(fd)
        return len(events)

    def fds(self) -> list[int]:
        """Every open connection (for an owner that polls them one by one)."""
        return list(self._conns)

    def want_write(self) -> list[int]:
        """Connections with answers the rank has not taken yet (poll them for writing)."""
        return [fd for fd, c in self._conns.items() if c.outbuf]

    def on_readable(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is None:
            return
        for _ in range(_READS_PER_WAKE):
            try:
                data = c.sock.recv(_READ)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self.eof(c)
                return
            self.feed(c, data)
            if c.closed:
                return
            if len(data) < _READ:
                return

    def on_writable(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is not None and c.outbuf:
            self._flush(c)

    def close(self) -> None:
        for job in self.jobs():
            job.close()
        self._ep.close()

    # -- writing ------------------------------------------------------------------------------
    def send(self, c: Conn, data: bytes) -> None:
        if c.closed:
            return
        if self._trace:
            log.debug("%s rank %d <- %s", c.job.kvsname, c.rank, show(data))
        if c.outbuf:
            c.outbuf += data
        else:
            try:
                n = c.sock.send(data, socket.MSG_NOSIGNAL)
            except BlockingIOError:
                n = 0
            except OSError:
                return  # the rank is gone: its EOF comes through on_readable
            if n == len(data):
                return
            c.outbuf += data[n:]
            self._ep.modify(c.fd, select.EPOLLIN | select.EPOLLOUT)
        if len(c.outbuf) > self.max_out:
            self.fail(
                c.job,
                c.rank,
                f"does not read its PMI answers ({len(c.outbuf)} "
                f"bytes waiting, max_out={self.max_out})",
            )

    def _flush(self, c: Conn) -> None:
        try:
            n = c.sock.send(c.outbuf, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return
        except OSError:
            c.outbuf.clear()
        else:
            del c.outbuf[:n]
        if not c.outbuf and not c.closed:
            self._ep.modify(c.fd, select.EPOLLIN)

    # -- ends ---------------------------------------------------------------------------------
    def close_conn(self, c: Conn) -> None:
        if c.closed:
            return
        c.closed = True
        self._conns.pop(c.fd, None)
        try:
            self._ep.unregister(c.fd)
        except (OSError, ValueError):
            pass
        c.sock.close()
        c.inbuf.clear()
        c.outbuf.clear()
