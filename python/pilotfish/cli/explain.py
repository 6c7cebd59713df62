"""`pilotfish explain SESSION_DIR TASK...`: why each task is where it is -- a live pilot's
agent asked, an ended one's from the session's events."""

from __future__ import annotations

import json
import os
import time

import click
import msgspec

from .. import _json
from ._common import BadInput, PathArg, check_session_dir, short


@click.command()
@click.argument("session_dir", type=PathArg(exists=True, file_okay=False))
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
    from .. import _explain as X
    from .. import states as S

    check_session_dir(session_dir)
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
            f"{', '.join(short(m, 40) for m in missing[:5])}: no such task in "
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
                from ..client.autoalloc import waiting_text

                e[X.WAITS_FOR] += waiting_text(session_dir)
        out.append(e)
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo("\n\n".join(str(e) for e in out))


def _histories(session_dir: str, task: tuple[str, ...], journals: bool = False):
    """(state history, final reason, pilot) of each TASK from the session's events, the
    first and last task uid seen, and each TASK's launch method (exec_start); journals: also
    the final states the client's and the agents' journals hold (the agent journals one
    before it tells anyone)."""
    from .. import _events as E
    from .. import states as S
    from .._agent_files import agent_files
    from .._events import read_all_events

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
        from .._journal import finals

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
    from ..client.pilot import local_agent

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

    from .._util import private_dir, read_private, write_private

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
