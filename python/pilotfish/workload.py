"""Workload files: a pilot and groups of identical tasks, in YAML (see `pilotfish run --help`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import DescriptionError
from .descriptions import PilotDescription, TaskDescription

_TOP = {"pilot", "tasks"}
MAX_TASKS = 10_000_000


@dataclass
class Workload:
    pilot: PilotDescription
    groups: list[tuple[str, list[TaskDescription]]]


def load_workload(path: str) -> Workload:
    """Parse and check a workload file. Raises ValueError naming the place and the problem."""
    import yaml

    with open(path) as f:
        try:
            doc = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with 'pilot' and 'tasks'")
    unknown = set(doc) - _TOP
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)} (expected pilot, tasks)")
    try:
        pilot = PilotDescription(doc.get("pilot") or {})
    except DescriptionError as e:
        raise ValueError(f"{path}: pilot: {e}") from None
    groups_doc = doc.get("tasks")
    if not isinstance(groups_doc, list) or not groups_doc:
        raise ValueError(f"{path}: 'tasks' must be a non-empty list of task groups")
    groups = []
    for gi, g in enumerate(groups_doc):
        if not isinstance(g, dict):
            raise ValueError(f"{path}: tasks[{gi}]: expected a mapping")
        g = dict(g)
        name = g.get("name") or f"group{gi}"
        count = g.pop("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TASKS:
            raise ValueError(f"{path}: tasks[{gi}] ({name}).count = {count!r}: must be an integer 1..{MAX_TASKS}")
        g.setdefault("name", name)
        try:
            template = TaskDescription(g)
            template.check_complete()
        except DescriptionError as e:
            raise ValueError(f"{path}: tasks[{gi}] ({name}): {e}") from None
        args = template.arguments
        templated = any("{i}" in a for a in args)
        descs = []
        for i in range(count):
            if templated:
                descs.append(TaskDescription(dict(template._values), arguments=[a.replace("{i}", str(i)) for a in args]))
            else:
                descs.append(template)
        groups.append((name, descs))
    return Workload(pilot, groups)
