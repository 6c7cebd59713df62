"""`pilotfish validate WORKLOAD`: the workload checked as `run` would check it, nothing
started; and the workload file's format (WORKLOAD_EXAMPLE, WORKLOAD_LIMITS: `run --help`)."""

from __future__ import annotations

import click

from ..workload import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    MAX_SCALAR,
    MAX_TASKS,
    MAX_TEXT,
    declared_shape,
)
from ._common import PathArg, load_workload, short

WORKLOAD_EXAMPLE = """\
  # workload.yaml
  pilot:                      # one allocation (a PilotDescription)
    resource: local           # local | slurm | pbs | lsf | flux
    nodes: 4
    cores_per_node: 16        # larger than this machine = an emulated machine
    gpus_per_node: 2
    runtime: 30m
  tasks:                      # groups of identical tasks (TaskDescription fields + count)
    - name: hello
      count: 1000
      executable: /bin/echo
      arguments: ["task {i}"] # {i}: the task's index in its group
      # stdout: hello.{i}.out   # a file ({i} too); by default captured: `pilotfish logs`
    - name: mpi
      count: 10
      ranks: 4
      cores_per_rank: 2
      executable: python3
      arguments: ["-c", "import os; print(os.environ['PILOTFISH_RANK'])"]
  # autoalloc:                # instead of one pilot, pilots like it requested while tasks
  #   max_pilots: 3           # wait and ended once idle (PilotManager.autoalloc's settings:
  #   idle_timeout: 30s       # max_queued, max_nodes, min_nodes, parallelism, max_failures...)
"""
WORKLOAD_LIMITS = (
    f"Limits: a file of at most {MAX_FILE_BYTES >> 20} MiB, nested at most {MAX_DEPTH} levels, "
    f"{MAX_NODES:,} values and {MAX_TEXT >> 20} MiB of text (YAML aliases expanded), strings of "
    f"at most {MAX_SCALAR:,} characters, {MAX_TASKS:,} tasks (all groups together)."
)


@click.command()
@click.argument("workload", type=PathArg(exists=True, dir_okay=False))
def validate(workload: str) -> None:
    """Check WORKLOAD (YAML) as `run` would, without starting anything, and print what it
    would run (the tasks are counted, not built). Exits 0 if it is fine, 2 if not."""
    w = load_workload(workload)
    d = w.pilot
    click.echo(
        f"pilot: {d.resource}, {d.nodes} nodes x {d.cores_per_node or 'auto'} cores / "
        f"{d.gpus_per_node if d.gpus_per_node is not None else 'auto'} GPUs, runtime {d.runtime:g}s"
    )
    for g in w.groups:
        t = g.template
        click.echo(
            f"  {short(g.name)}: {g.count} x {t.ranks} ranks x ({t.cores_per_rank} cores, "
            f"{t.gpus_per_rank} GPUs)  {short(t.executable)}"
        )
    if declared_shape(d) is None:
        click.echo(
            "  (cores_per_node not given: whether the tasks fit the nodes is checked when "
            "the pilot starts)"
        )
    click.echo(f"{w.task_count} tasks: OK")
