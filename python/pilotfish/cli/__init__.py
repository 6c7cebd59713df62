"""The `pilotfish` command (`main`, the entry point `pilotfish.cli:main`).

One module per command: validate.py, run.py, simulate.py, logs.py, explain.py, report.py,
dashboard.py; _common.py holds what they share (BadInput: exit 2, the path type, the
workload loader, the session-directory check). A command module is thin -- its options, a
library call, the output -- and imports what only it needs inside the command, so that
`pilotfish --help` and the light commands start fast. What a session directory says (its
tasks' outputs and ends, their histories, explanations) is read by the library
(pilotfish.client.reading), not here.

`validate`, `run` and `simulate` read a workload file through one loader
(pilotfish.workload.load_workload, with its limits); bad input of any kind -- a workload file,
a launch model, an option -- is one short message and exit 2, never a traceback.
"""

from __future__ import annotations

import click

from .._version import __version__
from . import dashboard, explain, logs, report, run, simulate, validate


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pilotfish")
def main() -> None:
    """pilotfish: a pilot-job runtime for HPC.

    Acquire an allocation once (a pilot), then stream many heterogeneous tasks through it:
    single-core and multi-node MPI, CPU and GPU, seconds to hours.

    \b
    Typical use:
      pilotfish run workload.yaml          run a workload file on a pilot, with live progress
      pilotfish validate workload.yaml     check a workload file without running it
      pilotfish logs SESSION_DIR [TASK]    what the tasks printed, and why they ended
      pilotfish report SESSION_DIR         where every core-second went (HTML, PNG, JSON)

    From Python: `import pilotfish as pf` (Session, PilotManager, TaskManager, descriptions).
    Every run writes a session directory (events of every state change) under
    ./pilotfish-sessions or $PILOTFISH_SESSIONS.
    """


for _command in (
    validate.validate,
    run.run,
    simulate.simulate,
    logs.logs,
    dashboard.dashboard,
    explain.explain,
    report.report,
):
    main.add_command(_command)
