"""A session directory read back from its files: what its tasks printed and how each ended,
each task's state history, and why a task is where it is.

Any session -- run by `pilotfish run` or from Python, ended or live -- is read from what its
files say now (docs/internals.md, "Session directory"): the client's journal and events, each
pilot's agent files (a pilot's sub-agents' too: _agent_files), tasks.msgpack once closed.
Nothing here changes a session, but for `keep_outputs` (the run's own OUTPUTS file) and the
request files `ask_agents` leaves in a live pilot's sandbox (agent/explain.py answers them).

- `task_outputs(session_dir)`: every task's TaskOutput (name, state, exit code, reason, what
  it printed or the files it printed to) -- `pilotfish logs`; `choose_outputs` picks tasks
  by uid or group name. `keep_outputs(session_dir, tasks)`: what `pilotfish run` keeps of
  its tasks (OUTPUTS, 0600), read first by `task_outputs`.
- `task_histories(session_dir, uids)`: each task's states with their times, its pilot, its
  final reason, its launch method. `live_pilots`, `ask_agents`: the pilots whose agent may
  still run, and their answers. `explain_tasks(session_dir, uids, timeout)`: one
  _explain.Explanation per task, from its live agent if there is one, else from the events
  -- `pilotfish explain`.

What a session's files cannot say (its events file missing or unreadable, a task it does not
have) is a SessionReadError naming the path or the uid.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from .. import _events as E
from .. import _explain as X
from .. import _json
from .. import states as S
from .._agent_files import agent_files
from .._errors import PilotfishError
from .._events import read_all_events, read_task_records
from .._journal import finals, read_journal
from .._util import private_dir, read_private, write_private
from .autoalloc import waiting_text
from .resume import local_agent

if TYPE_CHECKING:
    from .task import Task

OUTPUTS = "outputs.msgpack"  # in the session directory: what `pilotfish run` kept


class SessionReadError(PilotfishError):
    """What a session's files cannot say: the message names the file or the task."""


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


def _cut(text: object, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def keep_outputs(session_dir: str, tasks: Iterable[Task]) -> None:
    """Keep what each task printed (captured: task.stdout/stderr) and why it ended, in
    <session>/OUTPUTS (0600: output may be private); a resume adds to it (a task matched from
    the journal keeps what it printed the first time). OSError: it could not be written."""
    file = os.path.join(session_dir, OUTPUTS)
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
    write_private(file, msgspec.msgpack.encode(list(kept.values())))


def task_outputs(session_dir: str, warn: Callable[[str], None] | None = None) -> list[TaskOutput]:
    """Every task of a session as far as its files tell now, by uid -- live or ended, run by
    `pilotfish run` or from Python: what `run` kept (OUTPUTS) first, then the journals (the
    client's: each task's name, output files and final state; each agent's: what a task
    printed, written with its final state), then the events (the state of a task that has
    not ended: the agent writes them every half second), then tasks.msgpack (at close).
    warn: told when OUTPUTS is there but unreadable (the rest is read all the same)."""
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
        if warn is not None:
            warn(
                f"{os.path.join(session_dir, OUTPUTS)}: cannot read it "
                f"({getattr(e, 'strerror', None) or e}): from the journals"
            )
    rows: dict[str, dict[str, Any]] = {}

    def row(uid: str) -> dict[str, Any]:
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
        for task in read_task_records(os.path.join(session_dir, "tasks.msgpack")):
            r = row(task.uid)
            r["name"] = r["name"] or task.name
            if r["state"] not in S.FINAL and task.state in S.FINAL:
                r["state"] = task.state
            if r["exit_code"] is None:
                r["exit_code"] = task.exit_code
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


def choose_outputs(
    outputs: list[TaskOutput], wanted: Sequence[str]
) -> tuple[list[TaskOutput], list[str]]:
    """(the outputs of the tasks wanted -- each a uid or a group's name --, in uid order; the
    wanted that name no task or group)."""
    by_uid = {o.uid for o in outputs}
    names = {o.name for o in outputs}
    missing = [x for x in wanted if x not in by_uid and x not in names]
    chosen = set(wanted)
    return [o for o in outputs if o.uid in chosen or o.name in chosen], missing


class Histories(NamedTuple):
    """What a session's events (and journals) say of some tasks (task_histories)."""

    history: dict[str, list[tuple[str, float]]]  # uid -> [(state, t)], up to its first final
    reason: dict[str, str | None]  # uid -> its final state's reason
    pilot: dict[str, str | None]  # uid -> the pilot it was sent to
    first: str | None  # the session's first and last task uid (any task's)
    last: str | None
    launcher: dict[str, str]  # uid -> the launch method that started it (exec_start)


def task_histories(session_dir: str, uids: Sequence[str], journals: bool = False) -> Histories:
    """The state history, final reason, pilot and launch method of each of uids from the
    session's events (the client's and every agent's), and the first and last task uid seen;
    journals: also the final states the client's and the agents' journals hold (an agent
    journals one before it tells anyone). SessionReadError: the client's events file is not
    there or cannot be read."""
    path = os.path.join(session_dir, "client.events")
    try:
        events = read_all_events(path)
    except FileNotFoundError:
        raise SessionReadError(
            f"{path}: not there -- is {session_dir} a pilotfish session?"
        ) from None
    except (OSError, ValueError, msgspec.DecodeError) as e:
        raise SessionReadError(
            f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}"
        ) from None
    wanted = set(uids)
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
        for jp in journal_paths:
            for uid, rec in finals(jp).items():  # ["final", uid, state, code, signal, why, t]
                if uid in wanted:
                    events.append((rec[6], uid, rec[2], rec[5]))
    history: dict[str, list[tuple[str, float]]] = {u: [] for u in uids}
    reason: dict[str, str | None] = {}
    pilot: dict[str, str | None] = {}
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
        hist = history[uid]
        if name in S.TASK_STATES:
            if hist and hist[-1][0] in S.FINAL:
                continue  # (its first final state counts)
            hist.append((name, t))
            if name == S.SCHEDULING and detail:
                pilot[uid] = detail
            if name in S.FINAL:
                reason[uid] = detail
        elif name == E.ROUTED:  # a held task sent on by an allocation policy
            pilot[uid] = detail
        elif name == E.EXEC_START and detail:  # the launch method that started it
            launcher[uid] = detail
    return Histories(history, reason, pilot, first, last, launcher)


def live_pilots(session_dir: str) -> list[str]:
    """The pilots of a session that said hello and whose agent may still run (resume's
    local_agent: one that ran on this host only while its pid runs its agent.json)."""
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


def ask_agents(
    session_dir: str, asks: dict[str, list[str]], timeout: float
) -> dict[str, tuple[list | None, str]]:
    """Ask pilots' agents at once (agent/explain.py: a request file in the pilot's sandbox,
    answered within a second); {pilot: (answers or None, why none)}."""
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


def explain_tasks(session_dir: str, uids: Sequence[str], timeout: float) -> list[X.Explanation]:
    """Why is each task of uids where it is: the answer of its pilot's agent while that may
    run (asked through a request file, waiting at most timeout seconds), else what the
    session's events say. SessionReadError: a task the session does not have (nor a live
    pilot), or the session's events unreadable."""
    h = task_histories(session_dir, uids)
    hist, reason, pilot = h.history, h.reason, h.pilot
    # the client writes its events in batches: a task of a live run may not be there yet,
    # and its pilot is the authority anyway -- ask every live pilot about the others
    live: dict[str, list[str]] = {}
    unseen = [u for u in uids if not hist[u]]
    anywhere = list(unseen)  # (and the tasks a pilot made itself: service members, workers)
    for uid in uids:
        if hist[uid] and hist[uid][-1][0] not in S.FINAL:
            sent_to = pilot.get(uid)
            if sent_to:
                live.setdefault(sent_to, []).append(uid)
            else:
                anywhere.append(uid)
    if anywhere:
        for p in live_pilots(session_dir):
            live.setdefault(p, []).extend(u for u in anywhere if u not in live.get(p, ()))
    answers: dict[str, tuple[str, dict]] = {}
    notes: dict[str, str] = {}
    asked = ask_agents(session_dir, live, timeout)
    for p, (got, why) in asked.items():
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
        for p, (got, _) in asked.items()
        if got is not None
        for u in live[p]
        if u not in answers
        and hist[u]
        and S.TASK_RANK.get(hist[u][-1][0], 0) >= S.TASK_RANK[S.AGENT_SCHEDULING]
    ]
    deadline = time.monotonic() + min(timeout, 2.0)
    while ended:
        h2 = task_histories(session_dir, tuple(ended), journals=True)
        for u in list(ended):
            if h2.history[u] and h2.history[u][-1][0] in S.FINAL:
                hist[u], reason[u] = h2.history[u], h2.reason.get(u)
                ended.remove(u)
        if not ended or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    missing = [u for u in unseen if u not in answers]
    if missing:
        have = f"{h.first}..{h.last}" if h.first else "none"
        raise SessionReadError(
            f"{', '.join(_cut(m, 40) for m in missing[:5])}: no such task in "
            f"{session_dir} (its tasks: {have})"
        )
    out = []
    for uid in uids:
        state = hist[uid][-1][0] if hist[uid] else None
        if uid in answers:
            p, a = answers[uid]
            e = X.merge(a, state, pilot.get(uid) or p)
        else:
            assert state is not None  # (a task with no history and no answer is missing)
            e = X.from_history(
                uid, state, hist[uid], reason.get(uid), pilot.get(uid), None, h.launcher.get(uid)
            )
            if uid in notes:
                e[X.WAITS_FOR].append(notes[uid])
            if state == S.SCHEDULING and not pilot.get(uid):  # an allocation policy's to send
                e[X.WAITS_FOR] += waiting_text(session_dir)
        out.append(e)
    return out
