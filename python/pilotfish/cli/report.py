"""`pilotfish report SESSION_DIR`: the session's HTML report (analytics/report.py)."""

from __future__ import annotations

import sys

import click

from ._common import PathArg


@click.command()
@click.argument("session_dir", type=PathArg(exists=True, file_okay=False))
@click.option(
    "--out",
    "out_dir",
    type=PathArg(file_okay=False),
    default=None,
    help="Where to write report.html and the PNGs (default: SESSION_DIR/report).",
)
@click.option("--json", "as_json", is_flag=True, help="Also write metrics.json (and print it).")
def report(session_dir: str, out_dir: str | None, as_json: bool) -> None:
    """Write a self-contained HTML report of SESSION_DIR: TTX, utilization by phase, plots."""
    from ..analytics.report import report_main

    sys.exit(report_main(session_dir, out_dir, as_json))
