"""`pilotfish dashboard`: the live web dashboard's own command (analytics/dashboard), its
options its own."""

from __future__ import annotations

import click


@click.command(
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.pass_context
def dashboard(ctx) -> None:
    """Serve a live web dashboard of SESSION_DIR (127.0.0.1, a token in the URL it prints);
    `pilotfish dashboard --help` for its options."""
    from ..analytics.dashboard import dashboard as command  # (numpy, pandas: only here)

    command.main(ctx.args, prog_name="pilotfish dashboard")
