"""`pilotfish dashboard SESSION_DIR`: a live web dashboard of a session, running or finished.

    pilotfish dashboard pilotfish-sessions/pf.2026... [--port 8765] [--host 127.0.0.1]

prints a URL with a token (http://127.0.0.1:PORT/?token=...); from a laptop, forward the port
(`ssh -L PORT:127.0.0.1:PORT login-node`) and open that URL. Without the token every path
answers 403. The page polls /api/summary (JSON: `states`, a count per task state, ...) and
its siblings /api/timeline, /api/nodes, /api/queue, /api/failed, /api/pilots,
/api/services, /api/pools once a second; each refresh reads only what was appended to the
session's files since the last one (tail.py) into running aggregates: ingest.py folds it
into the columnar store (store.py), views.py answers the JSON from it (SessionWatch is the
three); server.py serves them, page.py is the page. docs/dashboard.md says more.
"""

from __future__ import annotations

import ipaddress
import sys

import click

from pilotfish.analytics.dashboard.server import Dashboard, make_server, url
from pilotfish.analytics.dashboard.views import SessionWatch
from pilotfish.analytics.dashboard.tail import FrameTail

__all__ = ["Dashboard", "SessionWatch", "FrameTail", "dashboard", "make_server", "url"]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@click.command()
@click.argument("session_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port to listen on (0: any free port; the URL printed says which).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Keep the default and use `ssh -L`: another address "
    "exposes the dashboard (token-protected, unencrypted) to the network.",
)
def dashboard(session_dir: str, port: int, host: str) -> None:
    """Serve a live web dashboard of SESSION_DIR (running or finished) on 127.0.0.1: tasks
    by state over time, core and GPU use per node, the queue by shape and why it waits,
    pilots and partitions, service groups, function pools, failed tasks and their reasons.
    Prints the URL to open (with its access token); Ctrl-C stops it."""
    from pilotfish._session_dirs import not_a_session

    why = not_a_session(session_dir)  # (a parent of sessions, /tmp: say which are there)
    if why:
        raise click.UsageError(why)
    try:
        server, dash = make_server(session_dir, host, port)
    except OSError as e:
        raise click.ClickException(
            f"--host {host} --port {port}: cannot listen there: {e.strerror or e}"
        ) from None
    dash.refresh(force=True)
    link = url(server, dash)
    p = server.server_address[1]
    click.echo(f"pilotfish dashboard of {dash.watch.path}")
    click.echo(f"  open: {link}")
    if _loopback(host):
        click.echo(
            f"  from another machine: ssh -L {p}:127.0.0.1:{p} <this host>, then open "
            "the URL above there"
        )
    else:
        click.echo(
            f"  warning: listening on {host}, not loopback: anyone who can reach it and "
            "sees the URL can read this session (plain HTTP)",
            err=True,
        )
    click.echo("  Ctrl-C to stop")
    sys.stdout.flush()
    server.report = lambda line: click.echo(line, err=True)  # idle connections closed
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()
