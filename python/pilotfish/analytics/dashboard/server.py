"""The dashboard's web server: the page and its JSON, behind a token.

The dashboard serves one user (through `ssh -L`) a page that polls a few small JSON
documents once a second, which needs no web framework: HTTP/1.1 is parsed and written by
h11 (a sans-I/O library: bytes in, events out, explicit states and bounded buffers), the
bytes moved by this module's own selector loop. Every request -- the page, its JSON, any
other path -- needs the token printed with the URL (`?token=...`, compared in constant time): without it
the answer is 403 and nothing else. The server binds 127.0.0.1 by default; the page sends no
request off this server (a Content-Security-Policy forbids it) and its URL (with the token)
is not sent on as a Referer.

Anyone on the login node can connect to that port, token or not, so the server holds under
idle connections (issue 42): one thread and a selector (DashboardServer), not a thread per
connection -- an idle connection costs a descriptor and a few bytes, never a thread or CPU.
A request's head must arrive within HEAD_TIMEOUT_S of its connection (a slowloris trickle
gains nothing) and within MAX_HEAD bytes; at most `cap` connections are held (a share of the
descriptor limit, so the server never runs out of descriptors -- and never spins on accept()
when it would: a spare descriptor is given up to take the connection and close it). At the
cap a new connection makes room by closing the oldest one whose request has not arrived:
the owner's connection brings its whole request at once, so it is answered however many idle
ones others open and reopen. Each closing is counted (DashboardServer.counts) and reported
one line per REPORT_S at most. A head past MAX_HEAD bytes or MAX_HEADERS lines is answered
431, one h11 cannot parse 400. One connection, one request (`Connection: close`): the answer
is written without blocking, then the connection closes. Dashboard.respond decides the answer
(status, type, body) from the method and target alone; no I/O there.

One SessionWatch holds the aggregates; a request refreshes it (reads what was appended to
the session's files) when the last refresh is older than REFRESH_S, under one lock, so
several open pages cost no more reading than one.
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import resource
import secrets
import selectors
import socket
import threading
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import h11

from pilotfish.analytics.dashboard.page import PAGE
from pilotfish.analytics.dashboard.views import SessionWatch

REFRESH_S = 0.5
HEAD_TIMEOUT_S = 5.0  # a request's head arrives within this of its connection, or it closes
WRITE_TIMEOUT_S = 30.0  # an answer is taken within this, or its connection closes
MAX_HEAD = 16 * 1024  # bytes of a request's head at most (431 past them)
MAX_HEADERS = 99  # header lines of a request at most (431 past them; http.client's bound)
MAX_CONNECTIONS = 256  # connections held at once at most (a page makes 8 a second)
FD_RESERVE = 64  # descriptors left to the rest (the session's files, stdio, ...)
BACKLOG = 128  # connections the kernel queues before accept
REPORT_S = 60.0  # closed connections are reported one line per this at most
_CSP = (
    "default-src 'none'; connect-src 'self'; img-src 'self' data:; "
    "style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
_SERVER = "pilotfish-dashboard"
_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"}
_TEXT = "text/plain; charset=utf-8"
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": _CSP,
}


class Dashboard:
    """A SessionWatch and what is answered from it."""

    def __init__(self, session_dir: str, token: str | None = None):
        self.watch = SessionWatch(session_dir)
        self.token = token or secrets.token_urlsafe(24)
        self._lock = threading.Lock()
        self._last = -1e9
        self._cache: dict[str, bytes] = {}
        self._generation = -1
        self.api = {
            "summary": self.watch.summary,
            "timeline": self.watch.timeline,
            "nodes": self.watch.nodes_json,
            "queue": self.watch.queue_json,
            "failed": self.watch.failed_json,
            "pilots": self.watch.pilots_json,
            "services": self.watch.services_json,
            "pools": self.watch.pools_json,
        }

    def refresh(self, force: bool = False) -> None:
        """Read what was appended, at most every REFRESH_S (force: now; a big session is
        read in steps, one per summary the page asks for)."""
        with self._lock:
            if force or time.monotonic() - self._last >= REFRESH_S:
                self.watch.refresh()
                self._last = time.monotonic()

    def catch_up(self) -> None:
        """Refresh until everything there is has been read."""
        self.refresh(force=True)
        while self.watch.behind:
            self.refresh(force=True)

    def answer(self, what: str) -> bytes:
        """The JSON of one endpoint, made once per refresh."""
        self.refresh(force=what == "summary" and self.watch.behind)
        with self._lock:
            if self._generation != self.watch.generation:
                self._cache.clear()
                self._generation = self.watch.generation
            body = self._cache.get(what)
            if body is None:
                body = self._cache[what] = json.dumps(self.api[what](), default=_plain).encode()
            return body

    def allowed(self, token: str | None) -> bool:
        """Whether `token` is this dashboard's (compared in constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.token.encode())

    def respond(self, method: str, target: str) -> tuple[int, str, bytes]:
        """The answer to one request: (status, Content-Type, body). The page or a JSON
        endpoint with the token; 403 for anything without it; nothing is written through
        the dashboard (405 with the token)."""
        if method not in _METHODS:
            return 501, _TEXT, f"unsupported method {method[:32]!r}\n".encode()
        url = urlsplit(target)
        tokens = parse_qs(url.query).get("token")
        if not self.allowed(tokens[0] if tokens else None):
            if method in ("GET", "HEAD"):
                return (
                    403,
                    _TEXT,
                    b"403 forbidden: open the URL the dashboard printed (with its token)\n",
                )
            return 403, _TEXT, b"read only\n"
        if method not in ("GET", "HEAD"):
            return 405, _TEXT, b"read only\n"
        if url.path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", PAGE.encode()
        if url.path.startswith("/api/") and url.path[5:] in self.api:
            try:
                return 200, "application/json", self.answer(url.path[5:])
            except Exception as e:  # the page shows it; the server keeps serving
                return (
                    500,
                    "application/json",
                    json.dumps({"error": f"{type(e).__name__}: {e}"}).encode(),
                )
        return 404, _TEXT, b"not found\n"


def _plain(x):
    if isinstance(x, (set, tuple)):
        return list(x)
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(type(x).__name__)


class _Conn:
    __slots__ = ("sock", "address", "deadline", "http", "received", "out", "closed")

    def __init__(self, sock: socket.socket, address, deadline: float):
        self.sock, self.address, self.deadline = sock, address, deadline
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.received = 0  # bytes
        self.out: memoryview | None = None
        self.closed = False


class DashboardServer:
    """One thread, one selector: connections read until their request's head is whole (or
    HEAD_TIMEOUT_S passed, or MAX_HEAD bytes came), answered by `respond(method, target)`
    (status, Content-Type, body), written without blocking, closed. At most `cap` held: a new one closes the oldest still reading its head.
    The interface of socketserver's servers that the dashboard uses: server_address,
    serve_forever, shutdown, server_close."""

    def __init__(
        self,
        address: tuple[str, int],
        respond: Callable[[str, str], tuple[int, str, bytes]],
        cap: int | None = None,
    ):
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.respond = respond
        self.cap = cap if cap is not None else default_cap()
        self.counts = {
            "accepted": 0,
            "answered": 0,
            "timed_out": 0,
            "evicted": 0,
            "turned_away": 0,
            "too_large": 0,
        }
        self.report: Callable[[str], None] | None = None  # a line per REPORT_S at most
        # reading: accept order is deadline order (one HEAD_TIMEOUT_S each), so the oldest --
        # the first to expire, the first to make room -- is first; writing likewise
        self._reading: dict[int, _Conn] = {}
        self._writing: dict[int, _Conn] = {}
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.socket, selectors.EVENT_READ, None)
        self._spare = _spare()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._reported = dict(self.counts)
        self._last_report = time.monotonic()

    @property
    def open(self) -> int:
        """Connections held now."""
        return len(self._reading) + len(self._writing)

    # -- the loop ---------------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until shutdown() (looked at every poll_interval at least)."""
        self._stop.clear()
        self._done.clear()
        try:
            while not self._stop.is_set():
                timeout = poll_interval
                nxt = self._next_deadline()
                if nxt is not None:
                    timeout = max(0.0, min(timeout, nxt - time.monotonic()))
                for key, mask in self._sel.select(timeout):
                    conn = key.data
                    if conn is None:
                        self._accept()
                    elif conn.closed:  # (closed earlier in this round: made room)
                        continue
                    elif mask & selectors.EVENT_READ and conn.out is None:
                        self._read(conn)
                    elif mask & selectors.EVENT_WRITE:
                        self._write(conn)
                self._expire(time.monotonic())
                self._report()
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop serve_forever (from another thread) and wait for it."""
        self._stop.set()
        self._done.wait()

    def server_close(self) -> None:
        """Close every connection and the listening socket."""
        for conn in [*self._reading.values(), *self._writing.values()]:
            self._close(conn)
        try:
            self._sel.unregister(self.socket)
        except (KeyError, ValueError):
            pass
        self._sel.close()
        self.socket.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    # -- connections ------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(64):  # a batch: then the connections already held get their turn
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._out_of_descriptors():
                        continue
                    time.sleep(0.05)  # nothing to give up: never spin on a readable socket
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that one is gone; the next
                return
            self.counts["accepted"] += 1
            if self.open >= self.cap and not self._evict():
                self.counts["turned_away"] += 1
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, address, time.monotonic() + HEAD_TIMEOUT_S)
            self._reading[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _out_of_descriptors(self) -> bool:
        """accept() found no descriptor (something else holds them): close the oldest idle
        connection, or take the waiting connection on the spare descriptor and close it.
        Whether one was freed."""
        if self._evict():
            return True
        if self._spare is None:
            return False
        os.close(self._spare)
        self._spare = None
        try:
            sock, _ = self.socket.accept()
            sock.close()
            self.counts["turned_away"] += 1
        except OSError:
            pass
        self._spare = _spare()
        return False

    def _evict(self) -> bool:
        """Close the oldest connection still reading its head (room for a new one)."""
        for conn in self._reading.values():
            self.counts["evicted"] += 1
            self._close(conn)
            return True
        return False

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(8192)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.received += len(data)
        conn.http.receive_data(data)
        try:
            event = conn.http.next_event()
        except h11.RemoteProtocolError as e:  # (h11's bound on a head: MAX_HEAD, as ours)
            if e.error_status_hint == 431:
                self.counts["too_large"] += 1
                self._answer(conn, _TOO_LARGE)
            else:
                self._answer(conn, self._error(conn, 400, b"bad request\n"))
            return
        if event is h11.NEED_DATA:
            return
        if not isinstance(event, h11.Request):  # (a server's first event is a request)
            self._close(conn)
            return
        # a whole head arrived at once is bound as one that trickles in
        head = conn.received - len(conn.http.trailing_data[0])
        if head > MAX_HEAD or len(event.headers) > MAX_HEADERS:
            self.counts["too_large"] += 1
            self._answer(conn, _TOO_LARGE)
            return
        self._answer(conn, self._handle(conn, event))

    def _handle(self, conn: _Conn, request: h11.Request) -> bytes:
        """The answer's bytes (none: the connection closes unanswered)."""
        method = request.method.decode("ascii", "replace")
        try:
            code, ctype, body = self.respond(method, request.target.decode("ascii", "replace"))
            headers = [("Content-Type", ctype), *_HEADERS.items()]
            return self._response(conn, code, headers, b"" if method == "HEAD" else body, len(body))
        except Exception:  # noqa: BLE001 -- that request's problem; the server serves on
            return b""

    def _error(self, conn: _Conn, code: int, body: bytes) -> bytes:
        try:
            return self._response(conn, code, [("Content-Type", _TEXT)], body, len(body))
        except h11.LocalProtocolError:
            return b""

    @staticmethod
    def _response(conn: _Conn, code: int, headers: list, body: bytes, length: int) -> bytes:
        head = [
            ("Server", _SERVER),
            ("Date", formatdate(usegmt=True)),
            *headers,
            ("Content-Length", str(length)),
            ("Connection", "close"),
        ]
        out = [conn.http.send(h11.Response(status_code=code, headers=head, reason=_reason(code)))]
        if body:
            out.append(conn.http.send(h11.Data(data=body)))
        out.append(conn.http.send(h11.EndOfMessage()))
        return b"".join(x for x in out if x)

    def _answer(self, conn: _Conn, data: bytes) -> None:
        fd = conn.sock.fileno()
        del self._reading[fd]
        if not data:
            conn.closed = True
            self._unregister(conn)
            conn.sock.close()
            return
        conn.out = memoryview(data)
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self._writing[fd] = conn
        self._write(conn)
        if not conn.closed:
            self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)

    def _write(self, conn: _Conn) -> None:
        if conn.out is None:  # (never: a connection writes once it has its answer)
            return
        try:
            n = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[n:]
        if not conn.out:
            self.counts["answered"] += 1
            self._close(conn, drain=True)

    def _close(self, conn: _Conn, drain: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        fd = conn.sock.fileno()
        self._reading.pop(fd, None)
        self._writing.pop(fd, None)
        self._unregister(conn)
        if drain:  # what the client sent past its head, read: a close then sends no reset
            try:  # that could cut the answer short on its side
                conn.sock.shutdown(socket.SHUT_WR)
                for _ in range(8):
                    if not conn.sock.recv(65536):
                        break
            except OSError:
                pass
        conn.sock.close()

    def _unregister(self, conn: _Conn) -> None:
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _next_deadline(self) -> float | None:
        out = None
        for held in (self._reading, self._writing):
            for conn in held.values():
                out = conn.deadline if out is None else min(out, conn.deadline)
                break
        return out

    def _expire(self, now: float) -> None:
        for held in (self._reading, self._writing):
            while held:
                conn = next(iter(held.values()))
                if conn.deadline > now:
                    break
                self.counts["timed_out"] += 1
                self._close(conn)

    def _report(self) -> None:
        """A line per REPORT_S at most when connections were closed unanswered."""
        now = time.monotonic()
        if self.report is None or now - self._last_report < REPORT_S:
            return
        new = {
            k: self.counts[k] - self._reported[k]
            for k in ("timed_out", "evicted", "turned_away", "too_large")
        }
        self._last_report = now
        if not any(new.values()):
            return
        self._reported = dict(self.counts)
        self.report(
            f"dashboard: {sum(new.values())} connections closed unanswered in the last "
            f"{REPORT_S:g} s ({new['timed_out']} sent no request within "
            f"{HEAD_TIMEOUT_S:g} s, {new['evicted']} idle made room at the cap of "
            f"{self.cap}, {new['turned_away']} refused, {new['too_large']} too large); "
            f"{self.counts['answered']} answered in all"
        )


# (written here, not by h11: the bound is checked before, or without, a parsed request)
_TOO_LARGE = (
    b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 23\r\nConnection: close\r\n\r\nrequest head too large\n"
)


def _reason(code: int) -> bytes:
    try:
        return HTTPStatus(code).phrase.encode()
    except ValueError:
        return b""


def _spare() -> int | None:
    """A descriptor held to be given up when accept() finds none."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def default_cap() -> int:
    """Connections held at most: MAX_CONNECTIONS, or fewer where the descriptor limit is low
    (half of what is left past FD_RESERVE)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, (soft - FD_RESERVE) // 2))


def make_server(
    session_dir: str,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    cap: int | None = None,
) -> tuple[DashboardServer, Dashboard]:
    """A server (not yet serving) for the session; its URL is url(server, dash). cap:
    connections held at most (default_cap())."""
    dash = Dashboard(session_dir, token)
    return DashboardServer((host, port), dash.respond, cap), dash


def url(server: DashboardServer, dash: Dashboard) -> str:
    """The URL to open: the server's address and the token."""
    host, port = server.server_address[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/?token={dash.token}"
