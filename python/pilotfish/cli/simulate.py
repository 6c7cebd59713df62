"""`pilotfish simulate WORKLOAD`: the workload on a simulated pilot (the real agent's
scheduler on a virtual clock); `--autoalloc`: its allocation policy on a model of the batch
queue; `--fit SESSION_DIR`: a launch model fitted from a real session's events."""

from __future__ import annotations

import os
import sys
import time

import click

from ._common import BadInput, PathArg, load_workload


@click.command()
@click.argument("workload", type=PathArg(exists=True, dir_okay=False), required=False)
@click.option("--nodes", type=int, default=None, help="Nodes of the simulated pilot.")
@click.option("--cores-per-node", type=int, default=None)
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--partitions", type=int, default=None, help="Partitions (launcher instances).")
@click.option("--launcher", default=None, help="Default launch method (its model applies).")
@click.option(
    "--launch-model",
    type=PathArg(exists=True, dir_okay=False),
    default=None,
    help="JSON launch model (default: the one fitted on this machine).",
)
@click.option("--runtime", default=None, help="Walltime of the simulated pilot (virtual).")
@click.option(
    "--subagents",
    is_flag=True,
    help="Each partition's agent work on a CPU of its own (a sub-agent under a root).",
)
@click.option(
    "--cpu-scale",
    type=click.FloatRange(min=0, max=1e6),
    default=None,
    help="The agent's CPU costs times this (a faster core: < 1; 0: its work costs no time).",
)
@click.option(
    "--sessions",
    type=PathArg(file_okay=False),
    default=None,
    help="Where the session directory goes (default: ./pilotfish-sessions).",
)
@click.option("--report", "make_report", is_flag=True, help="Write the HTML report after it.")
@click.option(
    "--autoalloc",
    "autoalloc_model",
    is_flag=True,
    help="Instead: run the workload's allocation policy (its autoalloc: settings, pilot: the "
    "template) against a model of the batch queue, to choose limits before spending.",
)
@click.option("--queue-wait", default="60s", help="With --autoalloc: each job's queue wait.")
@click.option(
    "--cluster-nodes", type=int, default=None, help="With --autoalloc: the nodes the queue has."
)
@click.option(
    "--fit",
    "fit_dir",
    type=PathArg(exists=True, file_okay=False),
    default=None,
    help="Instead: fit a launch model from the events of a real session directory.",
)
@click.option(
    "--out",
    "out_file",
    type=PathArg(dir_okay=False),
    default=None,
    help="With --fit: where the model goes (default: print it).",
)
def simulate(
    workload: str | None,
    nodes,
    cores_per_node,
    gpus_per_node,
    partitions,
    launcher,
    launch_model,
    runtime,
    subagents,
    cpu_scale,
    sessions,
    make_report,
    autoalloc_model,
    queue_wait,
    cluster_nodes,
    fit_dir,
    out_file,
) -> None:
    """Simulate WORKLOAD (YAML, as for `run`; every task needs `duration:`) on a virtual clock:
    the real agent's scheduler, partitions, launch model and CPU model (what its own work
    costs it: a saturated agent shows), no process started.

    Prints the predicted TTX and utilization; the session directory is a normal one
    (`pilotfish report` works on it). With --fit SESSION_DIR: write the launch model of a real
    session instead.
    """
    import json

    if fit_dir:
        from ..analytics.launch_model import fit_launch_model

        fitted = fit_launch_model(fit_dir)
        text = json.dumps(fitted, indent=1, sort_keys=True)
        if out_file:
            with open(out_file, "w") as f:
                f.write(text + "\n")
            click.echo(f"launch model of {fit_dir} -> {out_file}")
        else:
            click.echo(text)
        return
    if not workload:
        raise BadInput("simulate: give a WORKLOAD file (or --fit SESSION_DIR)")
    if autoalloc_model:
        _simulate_autoalloc(workload, cores_per_node, runtime, queue_wait, cluster_nodes)
        return
    from .. import states as S
    from .._errors import DescriptionError, PilotfishError
    from ..client import PilotManager, Session, TaskManager

    w = load_workload(workload, check_fit=False)
    if launch_model is not None:
        from ..analytics.launch_model import read_launch_model

        try:
            read_launch_model(launch_model)  # with a bound: the pilot reads it again, whole
        except ValueError as e:
            raise BadInput(f"--launch-model: {e}") from None
    pd = w.pilot.as_dict()
    pd["resource"] = "simulated"
    for key, value in (
        ("nodes", nodes),
        ("cores_per_node", cores_per_node),
        ("gpus_per_node", gpus_per_node),
        ("partitions", partitions),
        ("launcher", launcher),
        ("launch_model", launch_model),
        ("runtime", runtime),
    ):
        if value is not None:
            pd[key] = value
    if subagents or cpu_scale is not None:  # the CPU model's part of the launch model
        model = pd.get("launch_model")
        if isinstance(model, str):
            from .._launch_costs import read_launch_model

            try:
                model = read_launch_model(model)
            except ValueError as e:
                raise BadInput(f"launch_model: {e}") from None
        model = dict(model or {})
        cpu = model.get("cpu", {})
        if isinstance(cpu, dict):  # (else the pilot's description says why not)
            cpu = dict(cpu)
            if subagents:
                cpu["subagents"] = True
            if cpu_scale is not None:
                cpu["scale"] = cpu_scale
            model["cpu"] = cpu
        pd["launch_model"] = model
    if pd.get("runtime") == 3600.0 and runtime is None:
        pd["runtime"] = 1000 * 3600.0  # the default walltime is real-run sized: not a bound here
    if isinstance(pd.get("runtime"), float):  # checked seconds already: keep the unit
        pd["runtime"] = f"{pd['runtime']!r}s"
    from ..descriptions import PilotDescription

    try:
        pdesc = PilotDescription(pd)
    except DescriptionError as e:
        raise BadInput(f"pilot: {e}") from None
    try:
        w.check_fit(pdesc)
    except ValueError as e:
        raise BadInput(str(e)) from None
    from ..client.session import new_session_uid

    uid = new_session_uid("pf.sim")
    t0 = time.time()
    try:
        session = Session(path=os.path.join(sessions, uid), uid=uid) if sessions else Session()
    except PilotfishError as e:
        raise BadInput(str(e)) from None
    with session:
        try:
            pilot = PilotManager(session).submit_pilots(pdesc)
            tmgr = TaskManager(session)
            tmgr.add_pilots(pilot)
            tasks = tmgr.submit_tasks(w.descriptions())
        except (ValueError, PilotfishError) as e:
            raise BadInput(str(e)) from None
        tmgr.wait_tasks()
    wall = time.time() - t0
    from ..analytics import analyze

    a = analyze(session.path)
    states: dict[str, int] = {}
    for t in tasks:
        states[t.state] = states.get(t.state, 0) + 1
    click.echo(f"session {session.uid}: {session.path} (simulated)")
    click.echo(
        f"pilot: {pdesc.nodes} nodes x {pdesc.cores_per_node} cores / "
        f"{pdesc.gpus_per_node or 0} GPUs, {pdesc.partitions} partition(s), "
        f"launcher {pilot.launcher}"
    )
    click.echo(
        f"pilot {pilot.uid}: {pilot.state}"
        + (f" ({pilot.reason})" if pilot.reason else "")
        + f", walltime {pdesc.runtime:g}s (virtual)"
    )
    click.echo(f"tasks: {len(tasks)} ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))})")
    unfinished = len(tasks) - states.get(S.DONE, 0)
    shares = a.utilization["cores"].shares
    click.echo(
        f"predicted TTX {a.ttx:.1f}s, RU {shares.get('exec_cmd', 0):.3f} (payload share "
        f"of the pilot's core-seconds), idle {shares.get('idle', 0):.3f}; "
        f"simulated in {wall:.2f}s of wall time"
    )
    if unfinished:
        click.echo(
            f"{unfinished} task(s) did not finish"
            + (
                f": the pilot ended first ({pilot.reason}); give it more --runtime or --nodes"
                if pilot.reason and pilot.reason != "session closed"
                else ""
            )
        )
    if make_report:
        from ..analytics.report import report_main

        report_main(session.path, None, as_json=False)
    if unfinished:
        sys.exit(1)


def _simulate_autoalloc(workload, cores_per_node, runtime, queue_wait, cluster_nodes) -> None:
    """`simulate --autoalloc`: the workload's policy on _alloc_sim's model of the queue."""
    from .._util import parse_duration
    from ..client import _alloc_sim as sim
    from ..client.autoalloc import limits_of
    from ..descriptions import PilotDescription

    w = load_workload(workload, check_fit=False)
    d = w.pilot.as_dict()
    for key, value in (("cores_per_node", cores_per_node), ("runtime", runtime)):
        if value is not None:
            d[key] = value
    settings = dict(w.autoalloc or {})
    try:
        pilot = PilotDescription(d)
        lim = limits_of(
            pilot, settings.pop("max_pilots", 3), settings.pop("idle_timeout", "30s"), **settings
        )
        wait = parse_duration(queue_wait)
        tasks = sim.from_descriptions(w.descriptions())
    except ValueError as e:
        raise BadInput(f"simulate --autoalloc: {e}") from None
    if lim.cores_per_node is None:
        raise BadInput(
            "simulate --autoalloc: give the nodes' cores (pilot cores_per_node, or "
            "--cores-per-node)"
        )
    cluster = sim.Cluster(cluster_nodes or 1 << 20, lim.cores_per_node, wait)
    for line in sim.summary(sim.simulate(tasks, lim, cluster), lim):
        click.echo(line)
