"""What a pilot keeps on its side for its tasks, apart from the Pilot (pilot.py) that offers
it: its shared directory's staging (Pilot.stage_in / stage_out: `stage_shared`), its named
environments (Pilot.prepare_env: `make_env`, a venv made by a task on the pilot) and its
pilot.json (`write_pilot_info`, once its agent said hello).
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

from .. import _wire
from .. import states as S
from .._errors import PilotfishError
from .._util import write_private
from ..descriptions import PilotDescription
from .task import TaskManager

if TYPE_CHECKING:
    from ._ports import PilotPort
    from .session import Session

log = logging.getLogger("pilotfish.client")

ENV_KEYS = ("type", "pre_exec", "packages", "python", "system_site_packages", "timeout")


def stage_shared(shared: str, sandbox: str, directives, inbound: bool) -> list[str]:
    """Pilot.stage_in (inbound) / stage_out: directives checked as a task's input / output
    staging, between the client's side and the pilot's shared directory; the paths written."""
    from .._staging import stage
    from ..descriptions import TaskDescription

    field = "input_staging" if inbound else "output_staging"
    if not inbound:  # checked as a task's output staging: source on the shared side
        directives = [
            {**d, "source": d["source"].replace("pilot://", "task://", 1)}
            if isinstance(d, dict) and isinstance(d.get("source"), str)
            else d
            for d in ([directives] if isinstance(directives, (str, dict)) else directives)
        ]
    else:
        directives = [
            {**d, "target": d["target"].replace("pilot://", "task://", 1)}
            if isinstance(d, dict) and isinstance(d.get("target"), str)
            else d
            for d in ([directives] if isinstance(directives, (str, dict)) else directives)
        ]
    checked = getattr(TaskDescription(executable="-", **{field: directives}), field)
    side = "source" if inbound else "target"
    absolute = [{**d, side: os.path.abspath(d[side])} for d in checked]
    os.makedirs(shared, exist_ok=True)
    stage(absolute, shared, outbound=not inbound, sandbox=sandbox)
    return [os.path.join(shared, d["target"]) if inbound else d["target"] for d in absolute]


def make_env(session: Session, pilot: PilotPort, name: str, spec: dict | None) -> dict:
    """Pilot.prepare_env's record of environment `name` on `pilot` (its sandbox, its uid),
    made by a task of a TaskManager of `session` for a venv; ValueError for a bad name or
    spec, PilotfishError (the setup task's stderr) when the setup fails."""
    import shlex
    import sys

    from ..descriptions import TaskDescription

    spec = dict(spec or {})
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"prepare_env: name {name!r} must be a non-empty name without '/'")
    unknown = sorted(set(spec) - set(ENV_KEYS))
    if unknown:
        raise ValueError(
            f"prepare_env {name!r}: unknown keys {unknown} (known: {', '.join(ENV_KEYS)})"
        )
    kind = spec.get("type", "venv")
    if kind not in ("venv", "shell"):
        raise ValueError(
            f"prepare_env {name!r}: type {kind!r} is not supported ('venv' or "
            f"'shell'; conda is not installed on this kind of machine)"
        )
    pre_exec = TaskDescription(executable="-", pre_exec=spec.get("pre_exec", [])).pre_exec
    packages = TaskDescription(executable="-", arguments=spec.get("packages", [])).arguments
    record = {"type": kind, "path": None, "pre_exec": pre_exec}
    if kind == "venv":
        path = os.path.join(pilot.sandbox, "env", name)
        python = spec.get("python") or sys.executable
        make = [python, "-m", "venv", path]
        if spec.get("system_site_packages"):
            make.insert(3, "--system-site-packages")
        if not packages:
            make.insert(3, "--without-pip")  # seconds faster; nothing to install
        lines = ["set -e", shlex.join(make)]
        if packages:
            lines.append(
                shlex.join(
                    [
                        os.path.join(path, "bin", "python"),
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--disable-pip-version-check",
                        *packages,
                    ]
                )
            )
        tmgr = TaskManager(session)
        tmgr.add_pilots(pilot)
        t = tmgr.submit_tasks(
            TaskDescription(
                executable="/bin/sh",
                arguments=["-c", "\n".join(lines)],
                pilot=pilot.uid,
                name=f"prepare_env:{name}",
                stdout=True,
                stderr=True,
            )
        )
        state = t.wait(timeout=float(spec.get("timeout", 600)))
        if state != S.DONE:
            raise PilotfishError(
                f"prepare_env {name!r} on {pilot.uid}: {state}: "
                f"{t.reason or (t.stderr or '')[-2000:]}"
            )
        record["path"] = path
    return record


def write_pilot_info(
    sandbox: str, uid: str, description: PilotDescription, msg: _wire.Hello
) -> None:
    """<sandbox>/pilot.json: what the pilot's agent found (its Hello: nodes, launcher, host,
    pid) and the pilot's description, for analytics and resume; a full disk is logged, not
    raised (it must not keep the pilot from ACTIVE)."""
    info_path = os.path.join(sandbox, "pilot.json")
    try:  # (a full disk must not keep the pilot from ACTIVE)
        write_private(
            info_path,
            json.dumps(
                {
                    "uid": uid,
                    "description": description.as_dict(),
                    "nodes": [[n.name, n.cores, n.gpus, n.mem] for n in msg.nodes],
                    "launcher": msg.launcher,
                    "agent_cores": 0,
                    "agent_gpus": 0,
                    "agent_host": msg.host,
                    "agent_pid": msg.pid,
                },
                indent=1,
            ).encode(),
        )
    except OSError as e:
        log.error("pilot %s: cannot write %s: %s", uid, info_path, e.strerror or e)
