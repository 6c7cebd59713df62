"""The `pilotfish` command.

`validate`, `run` and `simulate` read a workload file through one loader
(pilotfish.workload.load_workload, with its limits); bad input of any kind -- a workload file,
a launch model, an option -- is one short message and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time

import click
import msgspec

from . import __version__, _json
from .workload import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    MAX_SCALAR,
    MAX_TASKS,
    MAX_TEXT,
    declared_shape,
    load_workload,
)

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


class BadInput(click.ClickException):
    exit_code = 2


class _Path(click.Path):
    """click.Path whose errors quote a long path cut (the message stays one line)."""

    def fail(self, message, param=None, ctx=None):
        if len(message) > 300:
            message = message[:297] + "..."
        super().fail(message, param, ctx)


def _load_workload(path: str, check_fit: bool = True):
    """The workload, checked as a submit to its pilot would check it (check_fit=False: the
    caller checks it against another pilot)."""
    try:
        w = load_workload(path)
        if check_fit:
            w.check_fit()
        return w
    except (OSError, ValueError) as e:
        raise BadInput(str(e)) from None


def _short(text: object, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@main.command()
@click.argument("workload", type=_Path(exists=True, dir_okay=False))
def validate(workload: str) -> None:
    """Check WORKLOAD (YAML) as `run` would, without starting anything, and print what it
    would run (the tasks are counted, not built). Exits 0 if it is fine, 2 if not."""
    w = _load_workload(workload)
    d = w.pilot
    click.echo(
        f"pilot: {d.resource}, {d.nodes} nodes x {d.cores_per_node or 'auto'} cores / "
        f"{d.gpus_per_node if d.gpus_per_node is not None else 'auto'} GPUs, runtime {d.runtime:g}s"
    )
    for g in w.groups:
        t = g.template
        click.echo(
            f"  {_short(g.name)}: {g.count} x {t.ranks} ranks x ({t.cores_per_rank} cores, "
            f"{t.gpus_per_rank} GPUs)  {_short(t.executable)}"
        )
    if declared_shape(d) is None:
        click.echo(
            "  (cores_per_node not given: whether the tasks fit the nodes is checked when "
            "the pilot starts)"
        )
    click.echo(f"{w.task_count} tasks: OK")


# (\b: click keeps the example's lines as they are -- it pastes into a file and parses)
@main.command(epilog="Workload file format:\n\n\b\n" + WORKLOAD_EXAMPLE + "\n" + WORKLOAD_LIMITS)
@click.argument("workload", type=_Path(exists=True, dir_okay=False))
@click.option(
    "--sessions",
    type=_Path(file_okay=False),
    default=None,
    help="Where the session directory goes (default: ./pilotfish-sessions).",
)
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, only the summary.")
@click.option("--report", "make_report", is_flag=True, help="Write the HTML report after the run.")
@click.option(
    "--resume",
    "resume",
    type=_Path(exists=True, file_okay=False),
    default=None,
    help="Continue the session in this directory: re-attach to its pilot if its agent "
    "is alive (else start a new one) and run only what did not finish.",
)
def run(
    workload: str,
    sessions: str | None,
    timeout: float | None,
    quiet: bool,
    make_report: bool,
    resume: str | None,
) -> None:
    """Run WORKLOAD (YAML): a pilot and groups of tasks.

    Exits 0 when every task is DONE, 1 when any failed or was canceled, 2 on bad input, 130
    when interrupted (Ctrl-C: the pilot is stopped, what ran is kept, and the summary says
    how to go on). A run that was interrupted, killed, or whose pilot ended (its walltime)
    goes on with --resume SESSION_DIR: what was canceled runs again, what finished does not.
    """
    from . import states as S
    from ._errors import PilotfishError
    from .client import PilotManager, Session, TaskManager
    from .client.progress import wait_with_progress
    from .client.session import new_session_uid

    w = _load_workload(workload)
    t0 = time.time()
    session = pilot = policy = None
    tasks: list = []  # the latest run of each task of the workload, in order
    interrupted = timed_out = False
    try:
        uid = new_session_uid()
        try:
            if resume:
                session = Session(path=resume, resume=True)
            elif sessions:
                session = Session(path=os.path.join(sessions, uid), uid=uid)
            else:
                session = Session()
        except PilotfishError as e:
            raise BadInput(str(e)) from None
        with session:
            try:  # (a full disk is a SessionError here: exit 2 with its path, no traceback)
                pmgr = PilotManager(session)
                tmgr = TaskManager(session)
                if w.autoalloc is not None:  # pilots of w.pilot as the tasks need them
                    policy = pmgr.autoalloc(w.pilot, **w.autoalloc)
                    tmgr.add_pilots(policy)
                else:
                    pilot = pmgr.submit_pilots(w.pilot)
                    tmgr.add_pilots(pilot)
                tasks = _submit(session, tmgr, w, bool(resume))
            except (ValueError, PilotfishError) as e:
                raise BadInput(str(e)) from None
            if quiet:
                tmgr.wait_tasks(timeout=timeout)
            else:  # (a resume's bar counts the workload's tasks, not the canceled attempts)
                wait_with_progress(_LatestRuns(tmgr, tasks), timeout=timeout)
            timed_out = any(t.state not in S.FINAL for t in tasks)  # (--timeout passed)
            if pilot is not None:
                _let_walltime_end(pilot, tasks)
    except KeyboardInterrupt:
        interrupted = True  # (the session closed on the way out: its tasks are canceled)
    ttx = time.time() - t0
    if session is None:
        click.echo("interrupted before the session started: nothing ran", err=True)
        sys.exit(130)
    if tasks:
        _keep_outputs(session.path, tmgr.get_tasks())
    counts = {s: 0 for s in (S.DONE, S.FAILED, S.CANCELED)}
    for t in tasks:
        counts[t.state] = counts.get(t.state, 0) + 1
    click.echo(f"session {session.uid}: {session.path}")
    for p in policy.pilots if policy is not None else []:
        click.echo(f"pilot {p.uid} ({p.description.nodes} nodes, {policy.uid}): {p.state}")
    if pilot is not None:
        click.echo(
            f"pilot {pilot.uid}: {pilot.state}"
            + (f" ({pilot.reason})" if pilot.reason and pilot.state != S.ACTIVE else "")
        )
    click.echo(
        f"tasks: {len(tasks)} total, {counts[S.DONE]} done, {counts[S.FAILED]} failed, "
        f"{counts[S.CANCELED]} canceled, {len(tasks) - sum(counts.values())} unfinished"
    )
    click.echo(f"TTX {ttx:.2f}s, {len(tasks) / ttx:.1f} tasks/s")
    failed = [t for t in tasks if t.state in (S.FAILED, S.CANCELED)]
    # why each ended: the failed ones, and the canceled ones unless the interrupt canceled them
    told = [t for t in failed if t.state == S.FAILED or not interrupted]
    for t in told[:5]:
        click.echo(f"  {t.uid} ({t.name}): {t.state}: {t.reason}", err=True)
    if len(told) > 5:
        click.echo(f"  ... and {len(told) - 5} more", err=True)
    ran = [t for t in failed if t.state == S.FAILED]
    if ran:
        click.echo(
            f"what they printed: pilotfish logs {shlex.quote(session.path)} "
            f"{' '.join(t.uid for t in ran[:5])}{' ...' if len(ran) > 5 else ''}",
            err=True,
        )
    if interrupted or counts[S.CANCELED] or counts[S.DONE] + counts[S.FAILED] < len(tasks):
        again = len(tasks) - counts[S.DONE] - counts[S.FAILED]
        cmd = (
            ["pilotfish", "run"]
            + (["-q"] if quiet else [])
            + (["--timeout", f"{timeout:g}"] if timeout is not None else [])
            + (["--report"] if make_report else [])
            + ["--resume", session.path, os.path.abspath(workload)]
        )
        click.echo(
            (
                "interrupted: "
                if interrupted
                else f"--timeout {timeout:g}s passed: "
                if timed_out and timeout is not None
                else ""
            )
            + f"{again} task(s) canceled or not finished; to run them (and only them), "
            f"go on with:\n  {' '.join(shlex.quote(c) for c in cmd)}"
        )
    if make_report and not interrupted:
        from .analytics.report import report_main

        report_main(session.path, None, as_json=False)
    if interrupted:
        sys.exit(130)
    if failed or counts[S.DONE] < len(tasks):
        sys.exit(1)


class _LatestRuns:
    """The task manager as the progress bar reads it (client/progress.py's TaskCounts), with
    only the latest run of each task of the workload counted: on a resume, a run that was
    canceled and is submitted again counts once (the summary's total), not twice."""

    def __init__(self, tmgr, latest: list) -> None:
        from collections import Counter

        mine = {id(t) for t in latest}
        self._tmgr = tmgr
        self._latest = latest
        # the superseded runs: ended (CANCELED) before this run submitted them again
        self._minus = Counter(t.state for t in tmgr.get_tasks() if id(t) not in mine)
        self.counts = _CountsLess(tmgr.counts, self._minus)

    def __len__(self) -> int:
        return len(self._latest)

    def wait_tasks(self, uids=None, state=None, timeout=None) -> list[str]:
        return self._tmgr.wait_tasks(uids, state, timeout=timeout)

    def get_tasks(self, uids=None) -> list:
        return list(self._latest) if uids is None else self._tmgr.get_tasks(uids)


class _CountsLess:
    def __init__(self, counts, minus) -> None:
        self._counts, self._minus = counts, minus

    def __getitem__(self, state: str) -> int:
        return self._counts[state] - self._minus.get(state, 0)


def _let_walltime_end(pilot, tasks) -> None:
    """When tasks ended undone and the pilot's walltime is up, its agent is stopping on its
    own: wait (bounded) for the pilot to end, so that the summary says why it ended rather
    than the session closing it (and no shutdown goes to an agent already gone)."""
    from . import states as S

    if pilot.state in S.FINAL or all(t.state == S.DONE for t in tasks):
        return
    launched = next((t for state, t in pilot.history if state == S.LAUNCHING), None)
    runtime = pilot.description.runtime
    # the agent drains this long before its walltime (agent/walltime.py, drain_margin); it
    # started after the client launched it: its drain is no earlier than this
    margin = min(60.0, max(1.0, 0.1 * runtime))
    if launched is not None and time.time() >= launched + runtime - margin:
        pilot.wait(timeout=margin + 15.0)


OUTPUTS = "outputs.msgpack"  # in the session directory: what `pilotfish logs` shows


class _Output(msgspec.Struct, array_like=True):
    """One task's end as `pilotfish logs` shows it."""

    uid: str
    name: str | None
    state: str
    exit_code: int | None
    reason: str | None
    stdout: str | bool | None  # captured text, or the file it went to (str in *_path)
    stderr: str | bool | None
    stdout_path: str | None
    stderr_path: str | None


def _keep_outputs(path: str, tasks) -> None:
    """Keep what each task printed (captured: task.stdout/stderr) and why it ended, in
    <session>/OUTPUTS (0600: output may be private); a resume adds to it (a task matched from
    the journal keeps what it printed the first time)."""
    from ._util import read_private, write_private

    file = os.path.join(path, OUTPUTS)
    try:
        kept = {o.uid: o for o in msgspec.msgpack.decode(read_private(file), type=list[_Output])}
    except (OSError, msgspec.DecodeError):
        kept = {}
    for t in tasks:
        d = t.description
        old = kept.get(t.uid)
        if old is not None and t.stdout is None and t.stderr is None and old.state == t.state:
            continue  # (known from the journal only)
        kept[t.uid] = _Output(
            t.uid,
            t.name,
            t.state,
            t.exit_code,
            t.reason,
            t.stdout,
            t.stderr,
            d.stdout if isinstance(d.stdout, str) else None,
            d.stderr if isinstance(d.stderr, str) else None,
        )
    try:
        write_private(file, msgspec.msgpack.encode(list(kept.values())))
    except OSError as e:
        click.echo(f"cannot keep the tasks' output in {file}: {e.strerror or e}", err=True)


RUN_STATE = "run.json"  # in the session directory: what `pilotfish run --resume` reads


def _runs_again(task) -> bool:
    """Whether a resume submits this latest run of a task once more: it was CANCELED (an
    interrupt, a --timeout, the pilot's end) or the pilot's walltime killed it."""
    from . import states as S

    return task.state == S.CANCELED or (
        task.state == S.FAILED and (task.reason or "").startswith(S.WALLTIME_KILLED)
    )


def _submit(session, tmgr, w, resume: bool) -> list:
    """Submit the workload's tasks; returns the latest run of each, in order. On a resume,
    the tasks the session's journal holds are matched again (what finished stays finished)
    and each task whose latest run was CANCELED (an interrupt, a --timeout, the pilot's
    walltime) is submitted once more; RUN_STATE keeps which task each such run is of, so a
    later resume submits the same tasks in the same order (the journal's contract)."""
    from ._util import read_private, write_private

    descs = w.descriptions()
    state_path = os.path.join(session.path, RUN_STATE)
    reruns: list[int] = []  # for each task submitted after the workload's: its index there
    if resume:
        try:
            reruns = _json.loads(read_private(state_path))["reruns"]
        except FileNotFoundError:
            reruns = []
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BadInput(
                f"{state_path}: cannot read what the run submitted: "
                f"{getattr(e, 'strerror', None) or e}"
            ) from None
        if not (
            isinstance(reruns, list) and all(type(k) is int and 0 <= k < len(descs) for k in reruns)
        ):
            raise BadInput(
                f"{state_path}: reruns = {_short(reruns)}: not indices of the "
                f"{len(descs)} tasks of {w.source}"
            )
    runs = tmgr.submit_tasks(descs)
    if reruns:
        runs += tmgr.submit_tasks([descs[k] for k in reruns])
    latest = list(runs[: len(descs)])
    for k, t in zip(reruns, runs[len(descs) :]):
        latest[k] = t
    again = [k for k, t in enumerate(latest) if _runs_again(t)]
    if again:  # (first said, then submitted: the journal never holds runs this file lacks)
        try:
            write_private(state_path, json.dumps({"reruns": reruns + again}).encode())
        except OSError as e:
            raise BadInput(
                f"{state_path}: cannot write which tasks run again: {e.strerror or e}"
            ) from None
        for k, t in zip(again, tmgr.submit_tasks([descs[k] for k in again])):
            latest[k] = t
    return latest


@main.command()
@click.argument("workload", type=_Path(exists=True, dir_okay=False), required=False)
@click.option("--nodes", type=int, default=None, help="Nodes of the simulated pilot.")
@click.option("--cores-per-node", type=int, default=None)
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--partitions", type=int, default=None, help="Partitions (launcher instances).")
@click.option("--launcher", default=None, help="Default launch method (its model applies).")
@click.option(
    "--launch-model",
    type=_Path(exists=True, dir_okay=False),
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
    type=_Path(file_okay=False),
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
    type=_Path(exists=True, file_okay=False),
    default=None,
    help="Instead: fit a launch model from the events of a real session directory.",
)
@click.option(
    "--out",
    "out_file",
    type=_Path(dir_okay=False),
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
        from .analytics.launch_model import fit_launch_model

        model = fit_launch_model(fit_dir)
        text = json.dumps(model, indent=1, sort_keys=True)
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
    from . import states as S
    from ._errors import DescriptionError, PilotfishError
    from .client import PilotManager, Session, TaskManager

    w = _load_workload(workload, check_fit=False)
    if launch_model is not None:
        from .analytics.launch_model import read_launch_model

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
            from ._launch_costs import read_launch_model

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
    from .descriptions import PilotDescription

    try:
        pdesc = PilotDescription(pd)
    except DescriptionError as e:
        raise BadInput(f"pilot: {e}") from None
    try:
        w.check_fit(pdesc)
    except ValueError as e:
        raise BadInput(str(e)) from None
    from .client.session import new_session_uid

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
    from .analytics import analyze

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
        from .analytics.report import report_main

        report_main(session.path, None, as_json=False)
    if unfinished:
        sys.exit(1)


def _simulate_autoalloc(workload, cores_per_node, runtime, queue_wait, cluster_nodes) -> None:
    """`simulate --autoalloc`: the workload's policy on _alloc_sim's model of the queue."""
    from ._util import parse_duration
    from .client import _alloc_sim as sim
    from .client.autoalloc import limits_of
    from .descriptions import PilotDescription

    w = _load_workload(workload, check_fit=False)
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


def _session_dir(session_dir: str) -> None:
    """Refuse what is not a session directory, naming the sessions under it (papercut 3)."""
    from ._session_dirs import not_a_session

    why = not_a_session(session_dir)
    if why:
        raise BadInput(why)


def _what_exists(session_dir: str) -> list[_Output]:
    """Every task of a session as far as its files tell now -- live or ended, run by
    `pilotfish run` or from Python: what `run` kept (OUTPUTS) first, then the journals (the
    client's: each task's name, output files and final state; each agent's: what a task
    printed, written with its final state), then the events (the state of a task that has
    not ended: the agent writes them every half second), then tasks.msgpack (at close)."""
    from . import states as S
    from ._agent_files import agent_files
    from ._events import read_all_events, read_task_records
    from ._journal import read_journal
    from ._util import read_private

    kept: dict[str, _Output] = {}
    try:
        kept = {
            o.uid: o
            for o in msgspec.msgpack.decode(
                read_private(os.path.join(session_dir, OUTPUTS)), type=list[_Output]
            )
        }
    except FileNotFoundError:
        pass
    except (OSError, msgspec.DecodeError) as e:
        click.echo(
            f"{os.path.join(session_dir, OUTPUTS)}: cannot read it "
            f"({getattr(e, 'strerror', None) or e}): from the journals",
            err=True,
        )
    rows: dict[str, dict] = {}

    def row(uid: str) -> dict:
        r = rows.get(uid)
        if r is None:
            r = rows[uid] = {
                "name": None,
                "state": None,
                "exit_code": None,
                "reason": None,
                "stdout": None,
                "stderr": None,
                "stdout_path": None,
                "stderr_path": None,
                "t": float("-inf"),
            }
        return r

    def final(rec: list) -> None:  # ["final", uid, state, exit_code, signal, reason, t]
        r = row(rec[1])
        if r["state"] not in S.FINAL:
            r.update(state=rec[2], exit_code=rec[3], reason=rec[5])

    sandboxes = {
        os.path.join(session_dir, n) for n in os.listdir(session_dir) if n.startswith("pilot.")
    }
    for rec in read_journal(os.path.join(session_dir, "journal")):
        if rec[0] == "task":
            desc = rec[3] if isinstance(rec[3], dict) else {}
            r = row(rec[1])
            r["name"] = desc.get("name")
            for what in ("stdout", "stderr"):
                if isinstance(desc.get(what), str):
                    r[what + "_path"] = desc[what]
        elif rec[0] == "final":
            final(rec)
        elif rec[0] == "pilot" and isinstance(rec[3], str):
            sandboxes.add(rec[3])
    for sandbox in sorted(sandboxes):  # (each of its agents': sub-agents' in sub/p<i>/ too)
        for journal in agent_files(sandbox, "agent.journal"):
            for rec in read_journal(journal):
                if rec[0] == "out":
                    row(rec[1]).update(stdout=rec[2], stderr=rec[3])
                elif rec[0] == "final":
                    final(rec)
    for path in [os.path.join(session_dir, "client.events")] + [
        f for p in sorted(sandboxes) for f in agent_files(p, "agent.events")
    ]:
        try:
            events = read_all_events(path)
        except (OSError, ValueError, msgspec.DecodeError):
            continue  # (not there, or a torn last frame of a live writer)
        for t, uid, name, detail in events:
            if name not in S.TASK_STATES or not uid.startswith("task."):
                continue
            r = row(uid)
            if r["state"] in S.FINAL:
                continue  # (the journal said how it ended, or a first final state did)
            if name in S.FINAL:
                r.update(state=name, reason=detail)
            elif t >= r["t"]:
                r.update(state=name, t=t)
    try:
        for rec in read_task_records(os.path.join(session_dir, "tasks.msgpack")):
            r = row(rec.uid)
            r["name"] = r["name"] or rec.name
            if r["state"] not in S.FINAL and rec.state in S.FINAL:
                r["state"] = rec.state
            if r["exit_code"] is None:
                r["exit_code"] = rec.exit_code
    except (OSError, ValueError, msgspec.DecodeError):
        pass
    out = dict(kept)
    for uid, r in rows.items():
        if uid in kept and (kept[uid].state == r["state"] or r["state"] not in S.FINAL):
            continue
        out[uid] = _Output(
            uid,
            r["name"],
            r["state"] or S.NEW,
            r["exit_code"],
            r["reason"],
            r["stdout"],
            r["stderr"],
            r["stdout_path"],
            r["stderr_path"],
        )
    return [out[u] for u in sorted(out)]


@main.command()
@click.argument("session_dir", type=_Path(exists=True, file_okay=False))
@click.argument("task", nargs=-1)
def logs(session_dir: str, task: tuple[str, ...]) -> None:
    """Show what the tasks of SESSION_DIR printed, and how each ended: every task, or each
    TASK given (a uid such as task.000003, or a group's name). Any session: run by `pilotfish
    run` or from Python, ended or live (a task that has not ended shows its state; what it
    prints shows once it ends)."""
    from . import states as S
    from ._inert import inert, one_line

    _session_dir(session_dir)
    outs = _what_exists(session_dir)
    if not outs and not task:
        click.echo(f"no tasks in {session_dir} (yet)")
        return
    chosen = outs
    if task:
        by_uid = {o.uid: o for o in outs}
        names = {o.name for o in outs}
        missing = [x for x in task if x not in by_uid and x not in names]
        if missing:
            uids = sorted(by_uid)
            have = f"{uids[0]}..{uids[-1]}" if uids else "none"
            raise BadInput(
                f"{', '.join(_short(m, 40) for m in missing[:5])}: no such task or "
                f"group in {session_dir} (its tasks: {have}; its groups: "
                f"{_short(', '.join(sorted(n or '' for n in names)), 200)})"
            )
        wanted = set(task)
        chosen = [o for o in outs if o.uid in wanted or o.name in wanted]
    for o in chosen:
        why = o.reason or (f"exit code {o.exit_code}" if o.exit_code not in (None, 0) else "")
        if o.state not in S.FINAL:
            why = "not ended: what it prints shows once it ends"
        click.echo(one_line(f"== {o.uid} ({o.name}): {o.state}" + (f": {why}" if why else "")))
        for what, text, where in (
            ("stdout", o.stdout, o.stdout_path),
            ("stderr", o.stderr, o.stderr_path),
        ):
            if where is not None:
                click.echo(
                    one_line(f"-- {what}: written to {where}")
                    + ("" if os.path.isabs(where) else " (in the task's sandbox)")
                )
            elif isinstance(text, str) and text:
                click.echo(f"-- {what}")
                click.echo(inert(text, keep="\n\t"), nl=not text.endswith("\n"))


@main.command(
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.pass_context
def dashboard(ctx) -> None:
    """Serve a live web dashboard of SESSION_DIR (127.0.0.1, a token in the URL it prints);
    `pilotfish dashboard --help` for its options."""
    from .analytics.dashboard import dashboard as command  # (numpy, pandas: only here)

    command.main(ctx.args, prog_name="pilotfish dashboard")


@main.command()
@click.argument("session_dir", type=_Path(exists=True, file_okay=False))
@click.argument("task", nargs=-1, required=True)
@click.option(
    "--timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to wait for a live pilot's answer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the explanations as JSON.")
def explain(session_dir: str, task: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """Why is TASK where it is? For each TASK uid of SESSION_DIR: where it is (queued,
    placed and waiting for its launcher, running, ended), what it waits for (no node with
    room for a rank now, another task's reservation, its colocation group's node, its
    partition's launcher, a held service view, tasks ahead of it), which nodes could ever
    hold it and the run time the scheduler expects. A live pilot is asked (through a
    request file in its sandbox); a finished one is explained from the session's events."""
    from . import _explain as X
    from . import states as S

    _session_dir(session_dir)
    hist, reason, pilot, first, last, launcher = _histories(session_dir, task)
    # the client writes its events in batches: a task of a live run may not be there yet,
    # and its pilot is the authority anyway -- ask every live pilot about the others
    live: dict[str, list[str]] = {}
    unseen = [u for u in task if not hist[u]]
    anywhere = list(unseen)  # (and the tasks a pilot made itself: service members, workers)
    for uid in task:
        if hist[uid] and hist[uid][-1][0] not in S.FINAL:
            if pilot.get(uid):
                live.setdefault(pilot[uid], []).append(uid)
            else:
                anywhere.append(uid)
    if anywhere:
        for p in _live_pilots(session_dir):
            live.setdefault(p, []).extend(u for u in anywhere if u not in live.get(p, ()))
    answers: dict[str, tuple[str, dict]] = {}
    notes: dict[str, str] = {}
    _asked = _ask_agents(session_dir, live, timeout)
    for p, (got, why) in _asked.items():
        for uid, a in zip(live[p], got or ()):
            if a.get(X.WHERE) != X.UNKNOWN:
                answers[uid] = (p, a)
        if got is None:
            for uid in live[p]:
                notes[uid] = why
    # a task its agent no longer holds ended a moment ago: its final state is in the agent's
    # journal already (written before the update leaves), in its events within half a second
    ended = [
        u
        for p, (got, _) in _asked.items()
        if got is not None
        for u in live[p]
        if u not in answers
        and hist[u]
        and S.TASK_RANK.get(hist[u][-1][0], 0) >= S.TASK_RANK[S.AGENT_SCHEDULING]
    ]
    deadline = time.monotonic() + min(timeout, 2.0)
    while ended:
        hist2, reason2, _, _, _, _ = _histories(session_dir, tuple(ended), journals=True)
        for u in list(ended):
            if hist2[u] and hist2[u][-1][0] in S.FINAL:
                hist[u], reason[u] = hist2[u], reason2.get(u)
                ended.remove(u)
        if not ended or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    missing = [u for u in unseen if u not in answers]
    if missing:
        have = f"{first}..{last}" if first else "none"
        raise BadInput(
            f"{', '.join(_short(m, 40) for m in missing[:5])}: no such task in "
            f"{session_dir} (its tasks: {have})"
        )
    out = []
    for uid in task:
        state = hist[uid][-1][0] if hist[uid] else None
        if uid in answers:
            p, a = answers[uid]
            e = X.merge(a, state, pilot.get(uid) or p)
        else:
            e = X.from_history(
                uid, state, hist[uid], reason.get(uid), pilot.get(uid), None, launcher.get(uid)
            )
            if uid in notes:
                e[X.WAITS_FOR].append(notes[uid])
            if state == S.SCHEDULING and not pilot.get(uid):  # an allocation policy's to send
                from .client.autoalloc import waiting_text

                e[X.WAITS_FOR] += waiting_text(session_dir)
        out.append(e)
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo("\n\n".join(str(e) for e in out))


def _histories(session_dir: str, task: tuple[str, ...], journals: bool = False):
    """(state history, final reason, pilot) of each TASK from the session's events, the
    first and last task uid seen, and each TASK's launch method (exec_start); journals: also the final states the client's and the
    agents' journals hold (the agent journals one before it tells anyone)."""
    from . import _events as E
    from . import states as S
    from ._agent_files import agent_files
    from ._events import read_all_events

    path = os.path.join(session_dir, "client.events")
    try:
        events = read_all_events(path)
    except FileNotFoundError:
        raise BadInput(f"{path}: not there -- is {session_dir} a pilotfish session?") from None
    except (OSError, ValueError, msgspec.DecodeError) as e:
        raise BadInput(f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    wanted = set(task)
    journal_paths = [os.path.join(session_dir, "journal")]
    for name in sorted(os.listdir(session_dir)):  # what the agents recorded (states there)
        if not name.startswith("pilot."):
            continue
        sandbox = os.path.join(session_dir, name)  # (its agents: sub-agents' in sub/p<i>/ too)
        for agent_events in agent_files(sandbox, "agent.events"):
            try:
                events += read_all_events(agent_events)
            except (OSError, ValueError, msgspec.DecodeError):
                pass  # (a torn last frame of a live agent: the client's events still count)
        if journals:
            journal_paths += agent_files(sandbox, "agent.journal")
    if journals:
        from ._journal import finals

        for jp in journal_paths:
            for uid, rec in finals(jp).items():  # ["final", uid, state, code, signal, why, t]
                if uid in wanted:
                    events.append((rec[6], uid, rec[2], rec[5]))
    hist: dict[str, list] = {u: [] for u in task}
    reason: dict[str, str | None] = {}
    pilot: dict[str, str] = {}
    launcher: dict[str, str] = {}
    first = last = None
    mine = []
    for ev in events:
        uid = ev[1]
        if uid in wanted:
            mine.append(ev)
        elif ev[2] == S.NEW and uid.startswith("task."):
            first = uid if first is None or uid < first else first
            last = uid if last is None or uid > last else last
    for t, uid, name, detail in sorted(mine, key=lambda e: e[0]):
        if name in S.TASK_STATES:
            if hist[uid] and hist[uid][-1][0] in S.FINAL:
                continue  # (its first final state counts)
            hist[uid].append((name, t))
            if name == S.SCHEDULING and detail:
                pilot[uid] = detail
            if name in S.FINAL:
                reason[uid] = detail
        elif name == E.ROUTED:  # a held task sent on by an allocation policy
            pilot[uid] = detail
        elif name == E.EXEC_START and detail:  # the launch method that started it
            launcher[uid] = detail
    return hist, reason, pilot, first, last, launcher


def _live_pilots(session_dir: str) -> list[str]:
    """The pilots of a session that said hello and whose agent may still run (client/pilot's
    local_agent: one that ran on this host only while its pid runs its agent.json)."""
    from .client.pilot import local_agent

    out = []
    for name in sorted(os.listdir(session_dir)):
        sandbox = os.path.join(session_dir, name)
        if (
            name.startswith("pilot.")
            and os.path.exists(os.path.join(sandbox, "pilot.json"))
            and local_agent(sandbox)[1]
        ):
            out.append(name)
    return out


def _ask_agents(
    session_dir: str, asks: dict[str, list[str]], timeout: float
) -> dict[str, tuple[list | None, str]]:
    """Ask pilots' agents at once (agent/explain.py: a request file in the pilot's sandbox,
    answered within a second); {pilot: (answers or None, why none)}."""
    import secrets

    from ._util import private_dir, read_private, write_private

    out: dict[str, tuple[list | None, str]] = {}
    pending: dict[str, str] = {}  # pilot -> its answer file
    for p, uids in asks.items():
        d = os.path.join(session_dir, p, "explain")
        if not os.path.isdir(os.path.dirname(d)):
            out[p] = (None, f"its pilot's sandbox is not in {session_dir}")
            continue
        rid = secrets.token_hex(8)
        try:
            private_dir(d)
            write_private(os.path.join(d, rid + ".req"), json.dumps(uids).encode())
        except OSError as e:
            out[p] = (None, f"cannot ask its agent: {e.strerror or e}")
            continue
        pending[p] = os.path.join(d, rid)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for p, base in list(pending.items()):
            try:
                body = _json.loads(read_private(base + ".json"))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                body = {"error": f"its agent's answer is unreadable: {e}"}
            del pending[p]
            for suffix in (".json", ".req"):
                try:
                    os.unlink(base + suffix)
                except OSError:
                    pass
            out[p] = (None, body["error"]) if "error" in body else (body.get("answers"), "")
        if pending:
            time.sleep(0.05)
    for p, base in pending.items():
        try:
            os.unlink(base + ".req")
        except OSError:
            pass
        out[p] = (
            None,
            f"its pilot's agent did not answer within {timeout:g} s (the pilot "
            f"ended, or its agent is gone): this is the last state the session "
            f"recorded",
        )
    return out


@main.command()
@click.argument("session_dir", type=_Path(exists=True, file_okay=False))
@click.option(
    "--out",
    "out_dir",
    type=_Path(file_okay=False),
    default=None,
    help="Where to write report.html and the PNGs (default: SESSION_DIR/report).",
)
@click.option("--json", "as_json", is_flag=True, help="Also write metrics.json (and print it).")
def report(session_dir: str, out_dir: str | None, as_json: bool) -> None:
    """Write a self-contained HTML report of SESSION_DIR: TTX, utilization by phase, plots."""
    from .analytics.report import report_main

    sys.exit(report_main(session_dir, out_dir, as_json))


if __name__ == "__main__":
    main()
