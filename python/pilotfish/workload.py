"""Workload files: a pilot and groups of identical tasks, in YAML or JSON (see `pilotfish run
--help`). `pilotfish validate`, `run` and `simulate` all read them with load_workload.

A workload file is input like any other: reading one must not exhaust the machine, however it
was written. Each limit is checked before the work it bounds is done, and a file past one is
refused with a WorkloadError (a ValueError; the CLI exits 2) naming the file, the place (line,
column and field path where known), the value shortened and the limit:

    MAX_FILE_BYTES   4 MiB       the file is read no further (a device such as /dev/zero never
                                 ends); a workload of 25,000 distinct groups takes ~4 MB
    MAX_DEPTH        64          nested collections, the document's own three levels included:
                                 checked while composing, before PyYAML (or anything after it)
                                 recurses into the next level
    MAX_NODES        1,000,000   values in the document, YAML aliases expanded (an alias
    MAX_TEXT         16 MiB      counts as a copy of what it names: the "billion laughs" is
                                 refused at its first alias past the limit); characters of
                                 its strings, aliases expanded. Whatever reads the data later
                                 (checks, msgpack, repr) walks it expanded; a recursive alias
                                 is refused outright
    MAX_SCALAR       131,072     characters in one string (also an argument once `{i}` is
                                 expanded): Linux's MAX_ARG_STRLEN, the longest argument or
                                 environment string execve takes
    MAX_TASKS        1,000,000   tasks, all groups together (checked from the counts, before
                                 any task is built): the client holds about 4 KB per task
                                 (100,000 simulated tasks peak at 390 MB here) and the session
                                 report was sized for a million tasks (BENCHMARKS.md)
    MAX_TOTAL_BYTES  1 GiB       Σ count × encoded size of a group's largest task: what a
                                 submit of the whole workload encodes at once

`validate` counts tasks from the groups without building them (Workload.task_count);
`run` and `simulate` build them (Workload.descriptions), `{i}` in an argument or a
`stdout:`/`stderr:` path becoming each task's index in its group. Workload.check_fit checks,
before any pilot starts, what a submit to the pilot would (the tasks fit its nodes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import msgspec
import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from ._errors import DescriptionError, printable, show
from ._files import WorkloadError, read_file
from ._files import byte_count as _bytes
from ._files import cut as _cut
from ._files import file_name as _name
from .descriptions import (
    PilotDescription,
    TaskDescription,
    declared_shape,
    misfit_partitions,
    partition_layout,
)

MAX_FILE_BYTES = 4 << 20
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_TEXT = 16 << 20
MAX_SCALAR = 128 << 10
MAX_TASKS = 1_000_000
MAX_TOTAL_BYTES = 1 << 30

_TOP = ("pilot", "tasks", "autoalloc")


# -- YAML, with limits ----------------------------------------------------------------------


class _LimitExceeded(Exception):
    """A YAML limit, raised by the composer with the place; load_workload adds the file."""


class _LimitedComposer(Composer):
    """PyYAML's composer, counting as it goes: the depth of the collections open (refused
    before composing one more level), every value with its aliases expanded, the characters
    of every string. Each anchored node's expanded size is kept, so an alias costs O(1) to
    count however much it stands for."""

    def __init__(self) -> None:
        Composer.__init__(self)
        # per collection being composed: [values, chars, height of its children], expanded
        self._open: list[list[int]] = []
        self._where: list[tuple] = []  # (parent, index) of each node being composed: the path
        self._sizes: dict[str, tuple[int, int, int]] = {}  # anchor -> its [values, chars, height]
        self._values = 0
        self._chars = 0

    def compose_node(self, parent, index):
        self._where.append((parent, index))
        try:
            return self._compose_counted(parent, index)
        finally:
            self._where.pop()

    def _compose_counted(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            size = self._sizes.get(event.anchor)
            if size is None:
                if event.anchor in self.anchors:  # still being composed: it holds itself
                    raise self._refuse(
                        event,
                        f"alias *{_cut(event.anchor, 40)} stands inside "
                        "the node it names: a recursive structure is not data "
                        "a task can carry",
                    )
                return Composer.compose_node(self, parent, index)  # PyYAML: undefined alias
            values, chars, height = size
            if len(self._open) + height > MAX_DEPTH:
                raise self._refuse(
                    event,
                    f"alias *{_cut(event.anchor, 40)} makes it nested "
                    f"deeper than {MAX_DEPTH} levels (the most a workload "
                    "file may nest)",
                )
            self._count(event, values, chars, f"alias *{_cut(event.anchor, 40)}")
            self._add_to_parent(values, chars, height)
            return Composer.compose_node(self, parent, index)
        if isinstance(event, ScalarEvent):
            chars = len(event.value)
            if chars > MAX_SCALAR:
                raise self._refuse(
                    event,
                    f"{show(event.value, 60)}: a string of {chars} "
                    f"characters, longer than {MAX_SCALAR} (Linux's "
                    "MAX_ARG_STRLEN: no program can be given a longer argument "
                    "or variable)",
                )
            self._count(event, 1, chars, "this string")
            self._add_to_parent(1, chars, 0)
            node = Composer.compose_node(self, parent, index)
            if event.anchor is not None:
                self._sizes[event.anchor] = (1, chars, 0)
            return node
        # a sequence or a mapping
        if len(self._open) >= MAX_DEPTH:
            raise self._refuse(
                event, f"nested deeper than {MAX_DEPTH} levels (the most a workload file may nest)"
            )
        self._count(event, 1, 0, "this collection")
        self._open.append([1, 0, 0])
        try:
            node = Composer.compose_node(self, parent, index)
        finally:
            values, chars, below = self._open.pop()
        self._add_to_parent(values, chars, below + 1)
        if event.anchor is not None:
            self._sizes[event.anchor] = (values, chars, below + 1)
        return node

    def _count(self, event, values: int, chars: int, what: str) -> None:
        self._values += values
        self._chars += chars
        if self._values > MAX_NODES or self._chars > MAX_TEXT:
            raise self._refuse(
                event,
                f"{what} brings the document to {self._values} values "
                f"and {self._chars} characters, aliases expanded (an alias "
                f"counts as a copy of what it names): more than the {MAX_NODES} "
                f"values or {MAX_TEXT} characters a workload file may hold",
            )

    def _add_to_parent(self, values: int, chars: int, height: int) -> None:
        if self._open:
            top = self._open[-1]
            top[0] += values
            top[1] += chars
            if height > top[2]:
                top[2] = height

    def _path(self) -> str:
        """Where the node being composed is: tasks[0].metadata.a3[2]."""
        out = ""
        for parent, index in self._where:
            if parent is None:
                continue
            if isinstance(index, int):
                out += f"[{index}]"
            elif index is None:
                out += ".(a key)" if out else "(a key)"
            else:
                label = _cut(index.value, 40) if isinstance(index, ScalarNode) else "(a key)"
                out += f".{label}" if out else label
        if len(out) > 300:
            out = out[:150] + "..." + out[-147:]
        return out or "(the document)"

    def _refuse(self, event, why: str) -> _LimitExceeded:
        mark = event.start_mark
        return _LimitExceeded(
            f"line {mark.line + 1}, column {mark.column + 1}: {self._path()}: {why}"
        )


class _Constructor(SafeConstructor):
    """SafeConstructor; an integer of more digits than Python converts (4300 by default) is a
    YAML error with its place, not a bare ValueError."""

    def construct_yaml_int(self, node):
        try:
            return SafeConstructor.construct_yaml_int(self, node)
        except ValueError:
            raise ConstructorError(
                None,
                None,
                f"an integer of {len(node.value)} characters: "
                f"Python reads at most {sys.get_int_max_str_digits()} digits",
                node.start_mark,
            ) from None


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)


class _PyLoader(Reader, Scanner, Parser, _LimitedComposer, _Constructor, Resolver):
    """yaml.SafeLoader with the limits: PyYAML's pure-Python parser."""

    def __init__(self, stream) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _LimitedComposer.__init__(self)
        _Constructor.__init__(self)
        Resolver.__init__(self)


def _libyaml_loader() -> type | None:
    """_CLoader, or None where PyYAML was built without libyaml."""
    try:
        from yaml.cyaml import CParser
    except ImportError:  # PyYAML built without libyaml
        return None

    class _CLoader(_LimitedComposer, CParser, _Constructor, Resolver):
        """yaml.CSafeLoader with the limits: libyaml parses (4x faster here), the composer is
        the counting one above, fed libyaml's events."""

        def __init__(self, stream) -> None:
            CParser.__init__(self, stream)
            _LimitedComposer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)

    return _CLoader


_CLoader = _libyaml_loader()
_Loader = _CLoader or _PyLoader


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line, each part cut (it quotes tags and alias names whole)."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return _cut(str(e), 300)
    mark = e.problem_mark or e.context_mark
    parts = []
    if e.context:
        part = _cut(str(e.context), 120)
        cm = e.context_mark
        if cm is not None and mark is not cm and (cm.line, cm.column) != (mark.line, mark.column):
            part += f" (line {cm.line + 1}, column {cm.column + 1})"
        parts.append(part)
    parts.extend(_cut(str(p), 200) for p in (e.problem, e.note) if p)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + ": ".join(parts)


def _parse(data: bytes, name: str):
    loader = _Loader(data)
    try:
        return loader.get_single_data()
    except _LimitExceeded as e:
        raise WorkloadError(f"{name}: {e}") from None
    except yaml.YAMLError as e:
        raise WorkloadError(f"{name}: not valid YAML: {_yaml_problem(e)}") from None
    finally:
        loader.dispose()


# -- the workload ---------------------------------------------------------------------------


@dataclass
class TaskGroup:
    """`count` tasks made from one template; `{i}` in its arguments becomes each task's index
    in the group."""

    name: str
    template: TaskDescription
    count: int

    def descriptions(self) -> list[TaskDescription]:
        args = self.template.arguments
        outputs = [f for f in ("stdout", "stderr") if _indexed(getattr(self.template, f))]
        if not any("{i}" in a for a in args) and not outputs:
            return [self.template] * self.count
        # arguments and output paths with digits for {i} are as valid as the template's
        # (checked): the fields are not checked again one task at a time (submit checks each
        # task as a whole)
        values = self.template.__getstate__()
        make = TaskDescription.from_checked
        out = []
        for i in range(self.count):
            n = str(i)
            task = {**values, "arguments": [a.replace("{i}", n) for a in args]}
            for f in outputs:
                task[f] = values[f].replace("{i}", n)
            out.append(make(task))
        return out


def _indexed(output: object) -> bool:
    """An output path (stdout/stderr given as a file) with {i} in it."""
    return isinstance(output, str) and "{i}" in output


@dataclass
class Workload:
    pilot: PilotDescription
    groups: list[TaskGroup]
    source: str = "workload"  # the file's name, for messages
    autoalloc: dict | None = None  # PilotManager.autoalloc's settings: `pilot` is a template

    def check_fit(self, pilot: PilotDescription | None = None) -> None:
        """What a submit to a pilot of this description checks before anything is sent, done
        without one (`validate` and `run` alike, before a pilot is started): every group's
        tasks fit the pilot's nodes (of each partition: a task never spans two) as declared
        -- on a batch resource that does not declare cores_per_node the shape is learned
        when the pilot starts and the agent checks then --, a simulated pilot's tasks have a
        duration, and no task names an environment (a workload file prepares none).
        Raises WorkloadError naming the group, the field, the value and why."""
        d = pilot or self.pilot
        if self.autoalloc is not None and pilot is None:  # requests grow up to max_nodes
            grown = {**d.as_dict(), "nodes": self.autoalloc.get("max_nodes") or 4096}
            grown.pop("partitions", None)
            d = PilotDescription(grown)
        shape = declared_shape(d)
        shapes = (
            None
            if shape is None
            else [
                shape[first : first + n]
                for first, n, _ in partition_layout(len(shape), d.partitions, d.launcher)
            ]
        )
        for gi, g in enumerate(self.groups):
            t = g.template
            where = f"{self.source}: tasks[{gi}] ({_label(g.name)})"
            if t.named_env is not None:
                raise WorkloadError(
                    f"{where}.named_env = {show(t.named_env, 60)}: no "
                    "environment of that name is prepared (a workload file "
                    "prepares none: use the Python API, Pilot.prepare_env)"
                )
            if d.resource == "simulated" and t.duration is None:
                raise WorkloadError(
                    f"{where}.duration = None: required on a simulated pilot "
                    "(a simulated task runs for its duration)"
                )
            if shape is None or shapes is None:  # no declared shape (both or neither)
                continue
            problem = misfit_partitions(
                t.ranks, t.cores_per_rank, t.gpus_per_rank, t.mem_per_rank, shapes
            )
            if problem is not None:
                field, why = problem
                c, gpus, mem = shape[0]
                mine = f"{len(shape)} nodes x {c} cores, {gpus} GPUs" + (
                    f", {mem} MiB" if mem else ""
                )
                raise WorkloadError(
                    f"{where}.{field} = {show(getattr(t, field), 60)}: {why} (the pilot: {mine})"
                )

    @property
    def task_count(self) -> int:
        return sum(g.count for g in self.groups)

    def descriptions(self) -> list[TaskDescription]:
        """Every task of every group, in order."""
        out: list[TaskDescription] = []
        for g in self.groups:
            out.extend(g.descriptions())
        return out


def _label(name: object) -> str:
    return _cut(printable(name), 60) if isinstance(name, str) else show(name, 60)


def load_workload(path: str) -> Workload:
    """Parse and check a workload file (within the limits above). Raises WorkloadError (a
    ValueError) naming the file, the place and the problem."""
    name = _name(path)
    doc = _parse(read_file(path, MAX_FILE_BYTES, "workload file"), name)
    if not isinstance(doc, dict):
        raise WorkloadError(f"{name}: expected a mapping with 'pilot' and 'tasks'")
    unknown = [k for k in doc if not (type(k) is str and k in _TOP)]
    if unknown:
        shown = ", ".join(show(k, 40) for k in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise WorkloadError(
            f"{name}: unknown top-level keys {shown}{more} (expected pilot, tasks, autoalloc)"
        )
    pilot_doc = doc.get("pilot") or {}
    if isinstance(pilot_doc, dict) and isinstance(pilot_doc.get("launch_model"), str):
        # read here with a bound: PilotDescription reads the file again, whole
        from ._launch_costs import read_launch_model

        try:
            read_launch_model(pilot_doc["launch_model"])
        except ValueError as e:
            raise WorkloadError(f"{name}: pilot.launch_model: {e}") from None
    try:
        pilot = PilotDescription(pilot_doc)
    except DescriptionError as e:
        raise WorkloadError(f"{name}: pilot: {e}") from None
    autoalloc = _autoalloc(doc.get("autoalloc"), pilot, name)
    groups_doc = doc.get("tasks")
    if not isinstance(groups_doc, list) or not groups_doc:
        raise WorkloadError(f"{name}: 'tasks' must be a non-empty list of task groups")
    # the counts first: a workload of too many tasks is refused before any task is built
    counts = []
    for gi, g in enumerate(groups_doc):
        if not isinstance(g, dict):
            raise WorkloadError(f"{name}: tasks[{gi}]: expected a mapping, not {show(g, 60)}")
        count = g.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TASKS:
            raise WorkloadError(
                f"{name}: tasks[{gi}] ({_label(g.get('name') or f'group{gi}')})"
                f".count = {show(count, 60)}: must be an integer 1..{MAX_TASKS} "
                "(the most tasks one workload file may hold, all groups "
                "together)"
            )
        counts.append(count)
    total = sum(counts)
    if total > MAX_TASKS:
        raise WorkloadError(
            f"{name}: tasks: {len(counts)} groups hold {total} tasks: more "
            f"than {MAX_TASKS}, the most one workload file may hold (all "
            "groups together)"
        )
    groups = []
    total_bytes = 0
    for gi, (g, count) in enumerate(zip(groups_doc, counts)):
        g = dict(g)
        g.pop("count", None)
        group_name = g.get("name") or f"group{gi}"
        where = f"tasks[{gi}] ({_label(group_name)})"
        g.setdefault("name", group_name)
        try:
            template = TaskDescription(g)
            template.check_complete()
        except DescriptionError as e:
            raise WorkloadError(f"{name}: {where}: {e}") from None
        values = template.__getstate__()
        args = template.arguments
        if any("{i}" in a for a in args):
            last = str(count - 1)
            for ai, a in enumerate(args):
                longest = len(a) + a.count("{i}") * (len(last) - 3)
                if longest > MAX_SCALAR:
                    raise WorkloadError(
                        f"{name}: {where}.arguments[{ai}] = {show(a, 60)}: {longest} "
                        f"characters with {{i}} = {last}, longer than {MAX_SCALAR} (Linux's "
                        "MAX_ARG_STRLEN: no program can be given a longer argument)"
                    )
            values["arguments"] = [a.replace("{i}", last) for a in args]
        try:
            size = len(msgspec.msgpack.encode(values))
        except Exception as e:  # noqa: BLE001 -- checked fields encode; else a message
            raise WorkloadError(f"{name}: {where}: cannot be encoded: {show(e, 120)}") from None
        total_bytes += count * size
        if total_bytes > MAX_TOTAL_BYTES:
            raise WorkloadError(
                f"{name}: {where}: {count} tasks of {size} bytes each "
                f"(encoded) bring the workload to {total_bytes} bytes: more "
                f"than {_bytes(MAX_TOTAL_BYTES)}, the most one workload file "
                "may submit"
            )
        groups.append(TaskGroup(group_name, template, count))
    return Workload(pilot, groups, name, autoalloc)


def _autoalloc(doc: object, pilot: PilotDescription, name: str) -> dict | None:
    """The file's `autoalloc:` settings (PilotManager.autoalloc's), checked as it checks
    them; None without the key."""
    if doc is None:
        return None
    if not isinstance(doc, dict) or not all(type(k) is str for k in doc):
        raise WorkloadError(
            f"{name}: autoalloc: expected a mapping of settings, not {show(doc, 60)}"
        )
    from .client.autoalloc import limits_of

    kw = dict(doc)
    try:
        limits_of(pilot, kw.pop("max_pilots", 3), kw.pop("idle_timeout", "30s"), **kw)
    except DescriptionError as e:
        raise WorkloadError(f"{name}: autoalloc: {e}") from None
    return dict(doc)
