"""A batch system and a launch method added by registration alone, end to end on the
project's Slurm (issue 49: "a registry-only change makes a new one usable").

The plug-in module below is the whole change: a copy of Slurm's record under another name
(its default launcher the copy of srun) and a copy of srun under another name, one line of
registration each. $PILOTFISH_PLUGINS names it and PYTHONPATH finds it, in this process and
in the pilot's agent (its batch job exports the client's environment): a pilot on
resource="slurm_copy" runs a 2-node task with launcher="srun_copy".

Run inside the substrate namespace:
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/batch/test_plugin_registry.py
"""

from __future__ import annotations

import os

import pytest

import pilotfish as pf
from pilotfish.batch import SYSTEMS
from pilotfish.launch import LAUNCHERS

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

PLUGIN = '''"""A copy of Slurm and of srun under other names."""
import dataclasses

from pilotfish import batch, launch
from pilotfish.batch.slurm import SLURM
from pilotfish.launch.srun import Srun

batch.register(dataclasses.replace(SLURM, name="slurm_copy", default_launcher="srun_copy"))
launch.register(type("SrunCopy", (Srun,), {"name": "srun_copy"}))
'''
# where each rank ran, as srun's step says (SLURMD_NODENAME) and as pilotfish placed it
WHERE = 'echo "$PILOTFISH_RANK $SLURMD_NODENAME $PILOTFISH_NODE"'


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plug-in module on PYTHONPATH and named by $PILOTFISH_PLUGINS; the registries as
    they were afterwards."""
    systems, launchers = dict(SYSTEMS), dict(LAUNCHERS)
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "pf_copy_plugin.py").write_text(PLUGIN)
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(folder) + (os.pathsep + path if path else ""))
    monkeypatch.setenv("PILOTFISH_PLUGINS", "pf_copy_plugin")
    monkeypatch.syspath_prepend(str(folder))
    yield
    SYSTEMS.clear()
    SYSTEMS.update(systems)
    LAUNCHERS.clear()
    LAUNCHERS.update(launchers)


def test_a_copied_batch_system_runs_a_copied_launcher(slurm, plugin, tmp_path):
    assert "slurm_copy" not in SYSTEMS and "srun_copy" not in LAUNCHERS  # not before the look
    with pf.Session(path=tmp_path / "session") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(
            pf.PilotDescription(resource="slurm_copy", nodes=2, runtime="10m")
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        names = [n.name for n in pilot.nodes]  # found as Slurm's are: its job's nodes
        assert len(names) == 2 and all(n.startswith("n") for n in names), names
        if os.environ.get("PILOTFISH_CLUSTER") == "hosts":  # (other hosts: its own launcher)
            assert pilot.launcher == "srun_copy"
        task = tmgr.submit_tasks(
            pf.TaskDescription(
                executable="/bin/sh",
                arguments=["-c", WHERE],
                ranks=2,
                cores_per_rank=pilot.nodes[0].cores,  # one rank fills a node: both nodes
                launcher="srun_copy",
            )
        )
        assert task.wait(timeout=120) == pf.DONE, (task.state, task.reason, task.stderr)
        assert task.launcher == "srun_copy"
        rows = sorted(line.split() for line in task.stdout.splitlines() if line.strip())
        assert rows == [["0", names[0], names[0]], ["1", names[1], names[1]]], task.stdout
    assert pilot.state == pf.DONE, (pilot.state, pilot.reason)
