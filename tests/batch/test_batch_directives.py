"""Golden checks of what a pilot's batch script asks beyond PSI/J's attributes: that a node
failure neither kills nor requeues the job, and that the job's files are its owner's alone
(each batch system's record: node_failure_directives; batch/psij_job.py: SCRIPT_UMASK).

The scripts are rendered through PSI/J's own executors (no batch system needed), and checked
against each system's documented syntax:
  Slurm   sbatch(1): -k, --no-kill[=off] ("Do not automatically terminate a job if one of the
          nodes it has been allocated fails"); --no-requeue ("the batch job should never be
          requeued under any circumstances")
  PBS Pro qsub: -r y|n (rerunnable); -W tolerate_node_failures=all|job_start|none
  LSF     bsub: -rn (the job is not rerunnable)
and all of them read directives only before the first command of the script. On the
project's Slurm, `sbatch --test-only` parses the Slurm script as sbatch would submit it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

psij = pytest.importorskip("psij")

from pilotfish.batch import batch_system
from pilotfish.batch.psij_job import SCRIPT_UMASK, PsijBatchJob, harden_script
from pilotfish.descriptions import PilotDescription

PREFIX = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB"}
GOLDEN = {  # the directives' arguments, as each batch system reads them
    "slurm": ["--no-kill", "--no-requeue"],
    "pbs": ["-r n", "-W tolerate_node_failures=all"],
    "lsf": ["-rn"],
}


def render(tmp_path, resource, **fields):
    fields = {"nodes": 4, "runtime": "90m", **fields}
    d = PilotDescription(resource=resource, **fields)
    job = PsijBatchJob("pilot.0007", d, str(tmp_path / resource / "sandbox"),
                       ["/usr/bin/python3", "-m", "pilotfish.agent", "agent.json"])
    return job.render_script()


def directives(script, prefix):
    """Directive arguments in order, as the batch system reads them: those before the first
    command line only."""
    out = []
    for line in script.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith(prefix + " "):
            out.append(s[len(prefix) + 1:].strip())
        elif not s.startswith("#"):
            break
    return out


def commands(script):
    return [ln.strip() for ln in script.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


@pytest.mark.parametrize("resource", ["slurm", "pbs", "lsf"])
def test_node_failure_directives_are_rendered_and_read(tmp_path, resource):
    """Each system's script asks neither kill nor requeue on a node failure, in directives the
    batch system reads (before any command), once each."""
    script = render(tmp_path, resource, environment={"A": "1"})
    d = directives(script, PREFIX[resource])
    for want in GOLDEN[resource]:
        assert d.count(want) == 1, (want, d)
    assert tuple(f"{PREFIX[resource]} {x}" for x in GOLDEN[resource]) == \
        batch_system(resource).node_failure_directives
    # PSI/J's own directives are all still read too (none pushed after a command)
    every = [ln for ln in script.splitlines() if ln.strip().startswith(PREFIX[resource] + " ")]
    assert len(every) == len(d)
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                       timeout=30, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("resource", ["slurm", "pbs", "lsf"])
def test_umask_is_the_first_command(tmp_path, resource):
    """`umask 077` runs before the script creates anything (PSI/J's node file, its .out and
    .ec files, the agent's agent.out/agent.err): they are 0600."""
    script = render(tmp_path, resource, environment={"A": "1"})
    first = commands(script)[0]
    assert first.split("#")[0].split() == SCRIPT_UMASK.split() == ["umask", "077"], first
    assert sum(c.startswith("umask") for c in commands(script)) == 1


def test_the_script_runs_under_the_umask(tmp_path):
    """The rendered script's umask is in force for what it creates (bash runs it; the launch
    line is cut off)."""
    script = render(tmp_path, "slurm")
    head = script.split("_PSIJ_NC=", 1)[0]  # the directives and the umask, nothing of PSI/J's
    out = subprocess.run(["bash", "-c", head + "\numask\ntouch f; stat -c %a f"], text=True,
                         capture_output=True, cwd=tmp_path, check=True).stdout.split()
    assert out == ["0077", "600"], out


def test_harden_script_without_a_shebang_or_commands():
    assert harden_script("slurm", "#SBATCH --nodes=1\n") == \
        "#SBATCH --no-kill\n#SBATCH --no-requeue\n#SBATCH --nodes=1\n" \
        f"{SCRIPT_UMASK}  # pilotfish: the job's files are its owner's alone\n"
    out = harden_script("flux", "#!/bin/sh\necho hi\n")  # (no directives known: umask only)
    assert out.splitlines()[:3] == ["#!/bin/sh", f"{SCRIPT_UMASK}  # pilotfish: the job's "
                                                 "files are its owner's alone", "echo hi"]


@pytest.mark.slurm
def test_sbatch_parses_the_directives(slurm, tmp_path):
    """sbatch --test-only reads the script as a submission would (and rejects an option it
    does not know, or one written as PSI/J writes custom attributes: --no-requeue="x")."""
    script = tmp_path / "pilot.sh"
    script.write_text(render(tmp_path, "slurm", nodes=1, runtime="5m"))
    r = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                       timeout=60, env=os.environ)
    assert r.returncode == 0, r.stderr
    assert "to start at" in r.stderr, r.stderr
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/bin/bash\n#SBATCH --no-requeue="1"\ntrue\n')
    r = subprocess.run(["sbatch", "--test-only", str(bad)], capture_output=True, text=True,
                       timeout=60, env=os.environ)
    assert r.returncode != 0, "sbatch took --no-requeue=\"1\": the check proves nothing"
