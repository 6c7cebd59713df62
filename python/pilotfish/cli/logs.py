"""`pilotfish logs SESSION_DIR [TASK]...`: what the tasks printed, and how each ended."""

from __future__ import annotations

import os

import click
import msgspec

from ._common import BadInput, PathArg, check_session_dir, short

OUTPUTS = "outputs.msgpack"  # in the session directory: what `pilotfish logs` shows


class TaskOutput(msgspec.Struct, array_like=True):
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


def keep_outputs(path: str, tasks) -> None:
    """Keep what each task printed (captured: task.stdout/stderr) and why it ended, in
    <session>/OUTPUTS (0600: output may be private); a resume adds to it (a task matched from
    the journal keeps what it printed the first time)."""
    from .._util import read_private, write_private

    file = os.path.join(path, OUTPUTS)
    try:
        kept = {o.uid: o for o in msgspec.msgpack.decode(read_private(file), type=list[TaskOutput])}
    except (OSError, msgspec.DecodeError):
        kept = {}
    for t in tasks:
        d = t.description
        old = kept.get(t.uid)
        if old is not None and t.stdout is None and t.stderr is None and old.state == t.state:
            continue  # (known from the journal only)
        kept[t.uid] = TaskOutput(
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


def what_exists(session_dir: str) -> list[TaskOutput]:
    """Every task of a session as far as its files tell now -- live or ended, run by
    `pilotfish run` or from Python: what `run` kept (OUTPUTS) first, then the journals (the
    client's: each task's name, output files and final state; each agent's: what a task
    printed, written with its final state), then the events (the state of a task that has
    not ended: the agent writes them every half second), then tasks.msgpack (at close)."""
    from .. import states as S
    from .._agent_files import agent_files
    from .._events import read_all_events, read_task_records
    from .._journal import read_journal
    from .._util import read_private

    kept: dict[str, TaskOutput] = {}
    try:
        kept = {
            o.uid: o
            for o in msgspec.msgpack.decode(
                read_private(os.path.join(session_dir, OUTPUTS)), type=list[TaskOutput]
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
        out[uid] = TaskOutput(
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


@click.command()
@click.argument("session_dir", type=PathArg(exists=True, file_okay=False))
@click.argument("task", nargs=-1)
def logs(session_dir: str, task: tuple[str, ...]) -> None:
    """Show what the tasks of SESSION_DIR printed, and how each ended: every task, or each
    TASK given (a uid such as task.000003, or a group's name). Any session: run by `pilotfish
    run` or from Python, ended or live (a task that has not ended shows its state; what it
    prints shows once it ends)."""
    from .. import states as S
    from .._inert import inert, one_line

    check_session_dir(session_dir)
    outs = what_exists(session_dir)
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
                f"{', '.join(short(m, 40) for m in missing[:5])}: no such task or "
                f"group in {session_dir} (its tasks: {have}; its groups: "
                f"{short(', '.join(sorted(n or '' for n in names)), 200)})"
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
