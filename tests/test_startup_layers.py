"""Layers at start-up (issue 49 item 7): an agent, a sub-agent and a node executor run
`pilotfish/__init__.py` first; it imports the user's API (client, descriptions) only when a
name of it is used, so those processes load nothing of the client layer. The user's
`import pilotfish as pf; pf.Session` is unchanged."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = (
    "import importlib, sys; importlib.import_module({m!r}); "
    "print(sorted(k for k in sys.modules if k.startswith(('pilotfish.client', "
    "'pilotfish.descriptions', 'pilotfish.rp', 'pilotfish.cli'))))"
)


@pytest.mark.parametrize(
    "module",
    [
        "pilotfish.agent.node_executor",
        "pilotfish.agent.node_emulated",
        "pilotfish.agent._main",
        "pilotfish.agent.worker",
    ],
)
def test_the_agent_side_imports_nothing_of_the_client(module):
    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(m=module)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_the_users_names_are_still_there():
    code = (
        "import pilotfish as pf\n"
        "from pilotfish import TaskManager, ServiceGroup, ServiceError, PilotDescription\n"
        "assert pf.Session.__module__ == 'pilotfish.client.session'\n"
        "assert pf.TaskDescription(executable='/bin/true').executable == '/bin/true'\n"
        "assert set(pf.__all__) <= set(dir(pf))\n"
        "try:\n    pf.NoSuchName\nexcept AttributeError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "module 'pilotfish' has no attribute 'NoSuchName'", r.stdout
