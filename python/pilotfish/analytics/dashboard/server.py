"""The dashboard's web server: the page and its JSON, behind a token.

Python's own ThreadingHTTPServer: the dashboard serves one user (through `ssh -L`) a page that
polls a few small JSON documents once a second, which needs no web framework -- nothing to
install on a login node, no dependency for the base package. Every request -- the page, its
JSON, any other path -- needs the token printed with the URL (`?token=...`, compared in
constant time): without it the answer is 403 and nothing else. The server binds 127.0.0.1 by
default; the page sends no request off this server (a Content-Security-Policy forbids it) and
its URL (with the token) is not sent on as a Referer.

One SessionWatch holds the aggregates; a request refreshes it (reads what was appended to
the session's files) when the last refresh is older than REFRESH_S, under one lock, so
several open pages cost no more reading than one.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from pilotfish.analytics.dashboard.page import PAGE
from pilotfish.analytics.dashboard.state import SessionWatch

REFRESH_S = 0.5
_CSP = ("default-src 'none'; connect-src 'self'; img-src 'self' data:; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'")
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
            "Content-Security-Policy": _CSP}


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
            "summary": self.watch.summary, "timeline": self.watch.timeline,
            "nodes": self.watch.nodes_json, "queue": self.watch.queue_json,
            "failed": self.watch.failed_json, "pilots": self.watch.pilots_json,
            "services": self.watch.services_json, "pools": self.watch.pools_json,
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


def _plain(x):
    if isinstance(x, (set, tuple)):
        return list(x)
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(type(x).__name__)


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard   # set on the class made per server
    server_version = "pilotfish-dashboard"
    sys_version = ""

    def log_message(self, fmt, *args):
        """Quiet: a line per poll would flood the terminal."""
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in _HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        """The page or a JSON endpoint with the token; 403 for anything without it."""
        url = urlsplit(self.path)
        token = (parse_qs(url.query).get("token") or [None])[0]
        if not self.dashboard.allowed(token):
            self._send(403, b"403 forbidden: open the URL the dashboard printed (with its token)\n",
                       "text/plain; charset=utf-8")
            return
        if url.path in ("/", "/index.html"):
            self._send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif url.path.startswith("/api/") and url.path[5:] in self.dashboard.api:
            try:
                body = self.dashboard.answer(url.path[5:])
            except Exception as e:  # the page shows it; the server keeps serving
                body = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
                self._send(500, body, "application/json")
                return
            self._send(200, body, "application/json")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET

    def do_POST(self):
        """Nothing is written through the dashboard: 403 without the token, 405 with it."""
        self._send(403 if not self.dashboard.allowed(
            (parse_qs(urlsplit(self.path).query).get("token") or [None])[0]) else 405,
            b"read only\n", "text/plain; charset=utf-8")

    do_PUT = do_DELETE = do_PATCH = do_POST


def make_server(session_dir: str, host: str = "127.0.0.1", port: int = 0,
                token: str | None = None) -> tuple[ThreadingHTTPServer, Dashboard]:
    """A server (not yet serving) for the session; its URL is url(server, dashboard)."""
    dash = Dashboard(session_dir, token)
    handler = type("Handler", (_Handler,), {"dashboard": dash})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server, dash


def url(server: ThreadingHTTPServer, dash: Dashboard) -> str:
    """The URL to open: the server's address and the token."""
    host, port = server.server_address[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/?token={dash.token}"
