"""Why is it pending? -- the one contract of an explanation: its keys, its `where` values, and
how it reads as text. The agent makes live ones (agent/explain.py); the client makes the
ones it can answer alone (a task not sent yet, or final: client/task.py) and client/reading.py
those of a session whose agent is gone (from_history). `task.explain()` and `pilotfish explain` both
return an Explanation, which is the dict and its text.
"""

from __future__ import annotations

import time
from typing import Any

# keys (plain values only: msgpack and JSON carry them)
UID = "uid"
WHERE = "where"  # one of the values below
WAITS_FOR = "waits_for"  # sentences, most telling first
REQUEST = "request"  # [ranks, cores_per_rank, gpus_per_rank, mem_per_rank MiB]
PARTITION = "partition_index"  # its partition's index
PILOT = "pilot"  # its pilot's uid (added by whoever asked the agent)
STATE = "state"  # its state as the client (or the events) know it
ESTIMATE = "estimate"  # {seconds, source: given|learned, std, n, from} or absent
WAITED_S = "waited_s"  # seconds in the queue so far
NODES = "nodes"  # the nodes it is placed or runs on
LAUNCHER = "launcher"  # the launch method that started it (pmi, pmix, srun, nodes, direct, ...)
FREE_NOW = "free_now"  # {count, names}: nodes with room for one of its ranks now
FITS_EVER = "fits_ever"  # {count, names}: nodes that could hold one of its ranks, empty
RANKS_EVER = "ranks_ever"  # ranks of it its partition could hold at once, empty
NEVER = "never"  # why it can never start there (absent: it can)
AT = "at"  # when the answer was made (the agent's clock, epoch seconds)

# where it is
NOT_SENT = "not sent"  # in the client, not sent to any pilot yet
ARRIVING = "arriving"  # the agent has it, not in a queue yet
QUEUED = "queued"  # in its partition's queue (or a function call in its pool's)
HELD = "placed"  # placed, waiting for its launcher (or being launched)
RUNNING = "running"
BACKOFF = "backoff"  # failed, waiting out its retry backoff
ENDING = "ending"  # its final state is on its way
FINAL = "final"  # DONE, FAILED or CANCELED
UNKNOWN = "unknown"  # the agent holds no such live task


class Explanation(dict):
    """An explanation: a dict with the keys above; str() reads it as text."""

    def __str__(self) -> str:
        return render(self)

    @property
    def text(self) -> str:
        return render(self)


def render(e: dict) -> str:
    """The explanation as a few lines of text."""
    uid = e.get(UID, "?")
    head = f"{uid}: {e.get(WHERE, UNKNOWN)}"
    if e.get(STATE):
        head += f" ({e[STATE]})"
    if e.get(PILOT):
        head += f" on {e[PILOT]}" + (
            f" partition p{e[PARTITION]}" if e.get(PARTITION) is not None else ""
        )
    lines = [head]
    req = e.get(REQUEST)
    if req:
        ranks, c, g, m = req
        lines.append(
            f"  asks for {ranks} rank{'s' if ranks != 1 else ''} x ({c} core"
            f"{'s' if c != 1 else ''}"
            + (f", {g} GPU{'s' if g != 1 else ''}" if g else "")
            + (f", {m} MiB" if m else "")
            + ")"
        )
    if e.get(WAITED_S) is not None:
        lines.append(f"  waited {e[WAITED_S]:.1f} s so far")
    for w in e.get(WAITS_FOR) or ():
        lines.append(f"  - {w}")
    if e.get(FREE_NOW) is not None:
        lines.append(f"  nodes with room for a rank now: {_count_names(e[FREE_NOW])}")
    if e.get(FITS_EVER) is not None:
        lines.append(
            f"  nodes that could ever hold a rank: {_count_names(e[FITS_EVER])}"
            + (f"; {e[RANKS_EVER]} ranks at once" if e.get(RANKS_EVER) is not None else "")
        )
    if e.get(NEVER):
        lines.append(f"  never: {e[NEVER]}")
    est = e.get(ESTIMATE)
    if est:
        if est.get("source") == "given":
            lines.append(f"  expected to run {est['seconds']:.3g} s (its duration)")
        else:
            lines.append(
                f"  expected to run {est['seconds']:.3g} s +- {est.get('std', 0):.2g}"
                f" (learned from {est.get('n', '?')} {est.get('from', 'finished tasks')})"
            )
    return "\n".join(lines)


def _count_names(v: dict) -> str:
    names = v.get("names") or []
    n = v.get("count", len(names))
    if not n:
        return "none"
    more = f", ... ({n} in all)" if n > len(names) else ""
    return ", ".join(names) + more


def from_history(
    uid: str,
    state: str,
    history: list,
    reason: str | None,
    pilot: str | None,
    nodes: list[str] | None = None,
    launcher: str | None = None,
) -> Explanation:
    """What the client (or the events) alone can say: a task not sent yet, or ended."""
    from . import states as S

    e = Explanation({UID: uid, STATE: state})
    if pilot:
        e[PILOT] = pilot
    if nodes:
        e[NODES] = nodes
    if launcher:
        e[LAUNCHER] = launcher
    waits: list[str] = []
    e[WAITS_FOR] = waits
    times = {s: t for s, t in history}
    if state in S.FINAL:
        e[WHERE] = FINAL
        end = times.get(state)
        start = times.get(S.EXECUTING)
        line = f"ended {state}" + (f" at {_clock(end)}" if end else "")
        if start and end:
            line += f" after running {end - start:.3g} s"
            if nodes:
                line += f" on {', '.join(nodes[:8])}"
            if launcher:
                line += f" (launched by {launcher})"
        if reason:
            line += f": {reason}"
        waits.append(line)
        sub = times.get(S.NEW) or times.get(S.SCHEDULING)
        if sub and start:
            waits.append(f"it waited {start - sub:.3g} s from submit to start")
    elif state in (S.NEW, S.SCHEDULING) and not pilot:
        e[WHERE] = NOT_SENT
        waits.append(
            "not sent to a pilot yet: its TaskManager routes it once a pilot "
            "that can hold it is added (and ACTIVE or launching)"
        )
    else:
        e[WHERE] = UNKNOWN
        waits.append(
            f"last known state {state}"
            + (f" at {_clock(times[state])}" if times.get(state) else "")
        )
    return e


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}"


def merge(answer: dict[str, Any], state: str | None, pilot: str | None) -> Explanation:
    """The agent's answer, with what the asker knows added (the state it sees, the pilot)."""
    e = Explanation(answer)
    if state is not None:
        e.setdefault(STATE, state)
    if pilot is not None:
        e.setdefault(PILOT, pilot)
    return e
