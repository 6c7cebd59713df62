"""An RP task's place on disk, as RP lays it out.

RP's layout: a task's sandbox is <pilot sandbox>/<uid>/ (or <pilot sandbox>/<its sandbox>),
holding <uid>.out and <uid>.err. pilotfish keeps a pilot's tasks under its tasks/ (the rest
of the sandbox is the pilot's own, protected files: _paths.py), so an RP task works in
tasks/<name>/ and <pilot sandbox>/<name> is a link to it, made at submit. Names that are
the pilot's own (their part before the first '.') get no link: RP reserves names too.

`Linker` makes those links off the submit path; `task_dir` finds a task's sandbox; `download`
brings a pilot's own files into the session directory (session.close(download=True));
`task_extra` gives an RP task its variables and its sandbox at submit.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import threading

from .._paths import TASKS_DIR

log = logging.getLogger("pilotfish.rp")

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_PILOT_OWN = frozenset(
    ("agent", "env", "functions", "grow", "journal", "keeper", "nodes", "pilot", "psij")
    + ("services", "session", "spool", "sub", "tasks", "prrte", "dvm", "flux", "bootstrap_0")
)


def _plain(name: str) -> bool:
    """name is one path component that may stand beside the pilot's own files."""
    return (
        len(name) <= 200
        and _PLAIN.fullmatch(name) is not None
        and name.split(".", 1)[0].lower() not in _PILOT_OWN
    )


def sandbox_name(rp_uid: str, pf_uid: str) -> str:
    """The directory an RP task gets when it names none: its uid (RP's), if plain."""
    return rp_uid if _plain(rp_uid) else pf_uid


def _link(pilot_sandbox: str, sandbox: str) -> None:
    """<pilot sandbox>/<first part of sandbox> -> tasks/<it>, RP's place of the task's
    sandbox (a relative sandbox only; nothing done if that name is taken or not plain)."""
    top = sandbox.split("/", 1)[0]
    if os.path.isabs(sandbox) or not _plain(top):
        return
    try:
        os.symlink(os.path.join(TASKS_DIR, top), os.path.join(pilot_sandbox, top))
    except FileExistsError:
        pass  # (tasks sharing a sandbox; or a name taken: task_dir sees which)
    except OSError as e:  # (the pilot's sandbox is not on this machine's file system)
        log.debug("no link %s/%s to its task sandbox: %s", pilot_sandbox, top, e)


class Linker:
    """Makes RP's links (_link) off the submit path, on a thread of its own: a symlink costs
    30-75 us here (while the pilot's agent makes its tasks' directories beside it), which
    tripled the cost of an RP submit (28 -> 246 us per task, 2000 tasks). A link comes
    moments after its submit; wait_tasks and the session's close wait for the links asked
    for so far (flush), so the layout is there once a script looks. A task itself works in
    tasks/<name>/ (its $PWD and RP_TASK_SANDBOX), which exists before it starts."""

    def __init__(self):
        self._todo: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._added = self._done = 0
        self._seen: set = set()  # (pilot sandbox, name) asked for already (shared sandboxes)
        self._thread: threading.Thread | None = None
        self._stop = False

    def add(self, pilot_sandbox: str, sandbox: str) -> None:
        key = (pilot_sandbox, sandbox.split("/", 1)[0])
        if key in self._seen or os.path.isabs(sandbox):
            return
        self._seen.add(key)
        self._added += 1  # (the submitting thread's count; the linker's is _done)
        self._todo.append(key)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rp-links", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        todo = self._todo
        while True:
            self._wake.wait()
            self._wake.clear()
            n = 0
            while todo:
                _link(*todo.popleft())
                n += 1
            with self._cond:
                self._done += n
                self._cond.notify_all()
                if self._stop and not todo:
                    return

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait until the links asked for so far are made (at most timeout s)."""
        target = self._added
        if self._thread is None or self._done >= target:
            return
        self._wake.set()
        with self._cond:
            self._cond.wait_for(lambda: self._done >= target, timeout)

    def close(self) -> None:
        self.flush()
        if self._thread is not None:
            with self._cond:
                self._stop = True
            self._wake.set()
            self._thread.join(5)


def task_dir(pilot_sandbox: str, sandbox: str) -> str:
    """An RP task's sandbox: an absolute `sandbox` as it is; else <pilot sandbox>/<sandbox>
    where that is the link to tasks/<sandbox> (_link), else tasks/<sandbox> itself -- every
    RP task has one (native pilotfish tasks only when they declare files)."""
    if os.path.isabs(sandbox):
        return sandbox
    top = sandbox.split("/", 1)[0]
    link = os.path.join(pilot_sandbox, top)
    try:
        if os.readlink(link) == os.path.join(TASKS_DIR, top):
            return os.path.join(pilot_sandbox, sandbox)
    except OSError:
        pass
    return os.path.join(pilot_sandbox, TASKS_DIR, sandbox)


def download(sandbox: str, into: str) -> None:
    """A pilot's own files (logs, events, its configuration), not its tasks' directories, into
    the session directory -- unless the sandbox is there already (local pilots)."""
    if not os.path.isdir(sandbox) or os.path.realpath(sandbox) == os.path.realpath(into):
        return
    os.makedirs(into, exist_ok=True)
    for name in os.listdir(sandbox):
        src = os.path.join(sandbox, name)
        if name != TASKS_DIR and os.path.isfile(src):
            shutil.copy2(src, os.path.join(into, name))


def task_extra(
    rp_uid: str, uid: str, d, pilot, sid: str, resource: str | None, links: Linker
) -> dict:
    """What an RP task adds to its pilotfish description at submit (the client's spec_extra,
    for pilotfish task `uid`, RP's `rp_uid`, on `pilot`): RP's per-task variables, and a
    sandbox of its own (as in RP), linked where RP has it once `links` gets to it."""
    name = d.sandbox or sandbox_name(rp_uid, uid)
    links.add(pilot.sandbox, name)  # (RP's path to it: a link, made soon)
    full = os.path.join(pilot.sandbox, TASKS_DIR, name)  # (an absolute one wins)
    out: dict = {
        "environment": {
            "RP_TASK_ID": rp_uid,
            "RP_TASK_NAME": d.name or rp_uid,
            "RP_PILOT_ID": pilot.uid,
            "RP_SESSION_ID": sid,
            "RP_TASK_SANDBOX": full,
            "RP_PILOT_SANDBOX": pilot.sandbox,
            "RP_RANKS": str(d.ranks),
            "RP_CORES_PER_RANK": str(d.cores_per_rank),
            "RP_GPUS_PER_RANK": str(d.gpus_per_rank),
            "RP_RESOURCE": resource or "local",
        }
    }
    if d.ranks == 1:  # (several ranks: each exports its own, see _describe)
        out["environment"]["RP_RANK"] = "0"
    if d.sandbox is None:
        out["sandbox"] = name
    if d.ranks == 1:  # RP's <uid>.out and <uid>.err in the sandbox, unless it names its own
        # (several ranks started by pilotfish itself would each truncate one file: theirs
        # are captured, merged)
        own = sandbox_name(rp_uid, uid)
        if d.stdout is True:
            out["stdout"] = f"{own}.out"
        if d.stderr is True:
            out["stderr"] = f"{own}.err"
    return out
