"""Golden checks of the batch scripts PSI/J writes for a pilot (Slurm, PBS Pro, LSF).

No batch system is needed: PsijBatchJob.render_script() asks the PSI/J executor for the submit
script it would hand to sbatch / qsub / bsub. The directives are checked against each system's
documented syntax:
  Slurm   sbatch(1): --nodes=<n>, --time= "minutes", "minutes:seconds", "hours:minutes:seconds",
          "days-hours[:minutes[:seconds]]", --partition=, --account=, --reservation=,
          --exclusive, --job-name=, --chdir=
  PBS Pro Reference Guide (qsub): -l select=<n>:<chunk resources>, -l place=scatter:exclhost,
          -l walltime=[[hours:]minutes:]seconds, -A <account>, -q <queue>, -N <name>
  LSF     bsub: -nnodes <n> (CSM), -W [hour:]minute, -q <queue>, -P <project>, -U <reservation>,
          -J <name>
and all three only read directives before the first command of the script.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from datetime import timedelta

import pytest

psij = pytest.importorskip("psij")

from pilotfish.batch.psij_job import PsijBatchJob
from pilotfish.descriptions import PilotDescription

PREFIX = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB"}


def render(tmp_path, resource, sandbox_name="sandbox dir", **fields):
    fields = {"nodes": 4, "runtime": "90m", "queue": "debug", "project": "ABC123",
              "reservation": "resv1", **fields}
    d = PilotDescription(resource=resource, **fields)
    sandbox = tmp_path / resource / sandbox_name
    argv = ["/opt/py env/bin/python", "-m", "pilotfish.agent", str(sandbox / "agent.json")]
    job = PsijBatchJob("pilot.0007", d, str(sandbox), argv)
    return job, job.render_script(), argv


def directives(script, prefix):
    """Directive argument strings, in order, as the batch system reads them: only those before
    the first command line count."""
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


def all_directive_lines(script, prefix):
    return [line for line in script.splitlines() if line.strip().startswith(prefix + " ")]


def launch_argv(script, sandbox_out):
    """The command the script runs (PSI/J's single launcher + our agent argv)."""
    for line in script.splitlines():
        if "single_launch.sh" in line:
            return shlex.split(line)
    raise AssertionError("no launch line in:\n" + script)


def slurm_minutes(value):
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{1,2}):(\d{1,2})", value)
    assert m, f"not an sbatch --time format: {value!r}"
    days, h, mi, s = (int(x or 0) for x in m.groups())
    return (days * 86400 + h * 3600 + mi * 60 + s) / 60


@pytest.mark.parametrize("resource", ["slurm", "pbs", "lsf"])
def test_script_is_valid_bash_and_directives_come_first(tmp_path, resource):
    job, script, argv = render(tmp_path, resource)
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=30,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert script.startswith("#!/bin/bash")
    # every directive precedes the first command (later ones would be silently ignored)
    assert len(directives(script, PREFIX[resource])) == len(all_directive_lines(script, PREFIX[resource]))
    # the agent runs once, with its argv intact (quoting of spaces), output to the sandbox
    cmd = launch_argv(script, job.stdout_path)
    assert cmd[-len(argv):] == argv
    assert job.stdout_path in cmd and job.stderr_path in cmd
    assert job.stdout_path.endswith("/agent.out") and job.stderr_path.endswith("/agent.err")


def test_slurm_directives(tmp_path):
    _, script, _ = render(tmp_path, "slurm", cores_per_node=16)
    d = directives(script, "#SBATCH")
    assert "--nodes=4" in d
    assert "--exclusive" in d
    # --cpus-per-task would be inherited by every srun step of the agent (SLURM_CPUS_PER_TASK)
    assert not any(x.startswith("--cpus-per-task") for x in d), d
    times = [x.split("=", 1)[1] for x in d if x.startswith("--time=")]
    assert len(times) == 1 and slurm_minutes(times[0]) == 90
    assert '--partition="debug"' in d or "--partition=debug" in d or "-p debug" in d
    assert '--account="ABC123"' in d or "--account=ABC123" in d
    assert '--reservation="resv1"' in d or "--reservation=resv1" in d
    assert any(re.fullmatch(r'--job-name="?pilot\.0007"?', x) for x in d), d
    assert any(x.startswith("--chdir=") for x in d)
    assert "--export=ALL" in d  # the agent needs the client's environment (SLURM_CONF, venv)


def test_slurm_runtime_rounds_up_to_minutes(tmp_path):
    _, script, _ = render(tmp_path, "slurm", runtime=90)
    t = [x.split("=", 1)[1] for x in directives(script, "#SBATCH") if x.startswith("--time=")]
    assert slurm_minutes(t[0]) == 2
    _, script, _ = render(tmp_path, "slurm", runtime="2d")
    t = [x.split("=", 1)[1] for x in directives(script, "#SBATCH") if x.startswith("--time=")]
    assert t[0].startswith("2-") and slurm_minutes(t[0]) == 2 * 24 * 60


def test_slurm_gpus_and_memory(tmp_path):
    _, script, _ = render(tmp_path, "slurm", gpus_per_node=4, mem_per_node=2048)
    d = directives(script, "#SBATCH")
    assert any(re.fullmatch(r'--gpus-per-node="?4"?', x) for x in d), d
    assert not any(x.startswith("--gpus-per-task") for x in d), "steps would inherit it"
    assert "--mem=2097152K" in d               # per node, as Slurm reads --mem


def test_slurm_optional_fields_absent(tmp_path):
    d = PilotDescription(resource="slurm", nodes=2, runtime="10m")
    script = PsijBatchJob("pilot.0001", d, str(tmp_path / "s"), ["agent"]).render_script()
    lines = directives(script, "#SBATCH")
    assert not any(x.startswith(("--partition", "--account", "--reservation", "-p ", "-A "))
                   for x in lines), lines


def test_pbs_directives(tmp_path):
    _, script, _ = render(tmp_path, "pbs")
    d = directives(script, "#PBS")
    select = [x for x in d if x.startswith("-l select=")]
    assert len(select) == 1 and re.fullmatch(r"-l select=4(:\w+=[\w.]+)*", select[0]), select
    assert "-l place=scatter:exclhost" in d
    walltime = [x.split("=", 1)[1] for x in d if x.startswith("-l walltime=")]
    assert len(walltime) == 1
    m = re.fullmatch(r"(?:(?:(\d+):)?(\d+):)?(\d+)", walltime[0])
    assert m, f"not a PBS walltime: {walltime[0]!r}"
    h, mi, s = (int(x or 0) for x in m.groups())
    assert h * 3600 + mi * 60 + s == 90 * 60
    assert "-A ABC123" in d
    # PBS reservations are queues: PSI/J sends the job to the reservation's queue (the last -q
    # wins), so the reservation must come after the queue
    qs = [x for x in d if x.startswith("-q ")]
    assert qs[-1] == "-q resv1" and "-q debug" in qs
    assert any(re.fullmatch(r'-N "?pilot\.0007"?', x) for x in d), d
    assert not any(x.startswith("-N=") for x in d), "qsub -N takes a separate argument"


def test_lsf_directives(tmp_path):
    _, script, _ = render(tmp_path, "lsf")
    d = directives(script, "#BSUB")
    assert "-nnodes 4" in d
    walltime = [x.split(" ", 1)[1] for x in d if x.startswith("-W ")]
    assert len(walltime) == 1
    m = re.fullmatch(r"(?:(\d+):)?(\d+)", walltime[0])
    assert m, f"not an LSF -W value: {walltime[0]!r}"
    assert int(m.group(1) or 0) * 60 + int(m.group(2)) == 90
    assert any(re.fullmatch(r'-q "?debug"?', x) for x in d), d
    assert any(re.fullmatch(r'-P "?ABC123"?', x) for x in d), d
    assert not any(x.startswith("-G ") for x in d), "-G is a fair-share group, not the project"
    assert any(re.fullmatch(r'-U "?resv1"?', x) for x in d), d
    assert any(re.fullmatch(r'-J "?pilot\.0007"?', x) for x in d), d


def test_lsf_gpus(tmp_path):
    _, script, _ = render(tmp_path, "lsf", gpus_per_node=2)
    assert "-gpu num=2/task" in directives(script, "#BSUB")  # one task per node


def test_lsf_runtime_rounds_up_to_minutes(tmp_path):
    _, script, _ = render(tmp_path, "lsf", runtime=61)
    walltime = [x.split(" ", 1)[1] for x in directives(script, "#BSUB") if x.startswith("-W ")]
    assert walltime == ["0:2"]


def test_psij_job_fields(tmp_path):
    job, _, argv = render(tmp_path, "slurm", environment={"A": "1"})
    j = job.make_job()
    assert j.spec.executable == argv[0] and j.spec.arguments == argv[1:]
    assert j.spec.resources.node_count == 4 and j.spec.resources.exclusive_node_use
    assert j.spec.resources.cpu_cores_per_process is None
    assert j.spec.attributes.duration == timedelta(minutes=90)
    assert j.spec.attributes.queue_name == "debug"
    assert j.spec.attributes.reservation_id == "resv1"
    assert j.spec.environment == {"A": "1"}


def test_unknown_resource_is_refused(tmp_path):
    d = PilotDescription(resource="local")
    with pytest.raises(ValueError, match="no PSI/J executor"):
        PsijBatchJob("pilot.0000", d, str(tmp_path), ["agent"])
