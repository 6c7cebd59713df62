"""Validated value objects: what a user asks for.

Descriptions are plain objects with a fixed set of fields. Construction checks each field on
its own (type, range); `TaskManager.submit_tasks` checks what needs context (does the request
fit any pilot). Every rejection is a `DescriptionError` naming the field, the value and why.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from . import _validate as check
from ._errors import DescriptionError, show
from ._shapes import (
    MAX_CORES_PER_NODE,
    MAX_DURATION_S,
    MAX_GPUS_PER_NODE,
    MAX_MEM_MIB,
    MAX_NODES,
    MAX_RANKS,
    MAX_TOTAL_CORES,
    declared_shape,
    misfit,
    misfit_partitions,
    partition_layout,
)


class _Description:
    """Fixed fields, each checked on assignment; unknown fields are an error.

    Only fields set away from their default are stored (a queued task costs little memory);
    a mutable default (list, dict) is materialized on first access so in-place edits stick.
    """

    _kind = "Description"
    _fields: dict[str, tuple[Any, Callable[[str, str, Any], Any]]] = {}
    # names people bring from other systems (RADICAL-Pilot, Slurm) -> what to use here: a
    # closest spelling is often the wrong field ('cores' is not 'nodes', 'pilot' not 'priority')
    _aliases: dict[str, str] = {}
    __slots__ = ("values",)
    values: dict[str, Any]
    """{field: checked value} of the fields set away from their defaults: the description's
    own dict, read without a copy where descriptions go by the thousand (routing, the wire
    spec, the journal). Read it; change a field by assigning the field (a write into this
    dict skips its check). `TaskDescription.values` is the slot itself:
    `.__set__(d, values)` fills a description made with object.__new__ (as from_checked)."""

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        if from_dict is None:
            given = kwargs
        elif isinstance(from_dict, dict):
            given = dict(from_dict)
            given.update(kwargs)
        else:
            raise DescriptionError(self._kind, "(itself)", from_dict, "expected a dict of fields")
        # the fields are checked here rather than through setattr: a task description is
        # built 100k times a second
        values: dict[str, Any] = {}
        kind, fields = self._kind, self._fields
        object.__setattr__(self, "values", values)
        for name, value in given.items():
            spec = fields.get(name)
            if spec is None:
                name = self._unknown(name, value)
                spec = fields[name]
            values[name] = spec[1](kind, name, value)

    @classmethod
    def from_checked(cls, values: dict[str, Any]):
        """A description from values already checked field by field (no copy, no re-check):
        for a caller that builds many from parts it validated once (pf.Executor,
        pilotfish.workload). What a whole description must satisfy is still checked at
        submit (check_complete)."""
        d = object.__new__(cls)
        object.__setattr__(d, "values", values)
        return d

    def _unknown(self, name: Any, value: Any) -> str:
        """The field a str subclass names; else DescriptionError (with a suggestion)."""
        if not isinstance(name, str):
            raise DescriptionError(self._kind, show(name, 60), value, "field names must be strings")
        if type(name) is not str and str.__str__(name) in self._fields:
            return str.__str__(name)
        # (difflib is quadratic: no suggestion for a name far longer than any field's)
        alias = self._aliases.get(name) if isinstance(name, str) else None
        close = (
            difflib.get_close_matches(name, self._fields, n=1)
            if alias is None and len(name) <= 64
            else []
        )
        hint = (
            f" (did you mean {alias}?)"
            if alias
            else f" (did you mean {close[0]!r}?)"
            if close
            else ""
        )
        raise DescriptionError(self._kind, name, value, f"unknown field{hint}")

    def __getattr__(self, name: str) -> Any:
        values = self.values
        if name in values:
            return values[name]
        spec = self._fields.get(name)
        if spec is None:
            raise AttributeError(f"{self._kind} has no field {name!r}")
        default = spec[0]
        if callable(default):
            value = self.values[name] = default()
            return value
        return default

    def __setattr__(self, name: str, value: Any) -> None:
        spec = self._fields.get(name)
        if spec is None:
            name = self._unknown(name, value)
            spec = self._fields[name]
        self.values[name] = spec[1](self._kind, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.values)

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "values", dict(state))

    def as_dict(self) -> dict[str, Any]:
        """Every field with its value (defaults included)."""
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.as_dict() == self.as_dict()

    def __repr__(self) -> str:
        # a function's callable and arguments are any Python objects (deeply nested, huge,
        # with a failing __repr__): shown cut; the validated fields in full, unless even they
        # are too deep for repr (metadata nested ~1000 levels passes msgpack)
        shown = ", ".join(f"{k}={_field_repr(k, v)}" for k, v in self.values.items())
        return f"{self._kind}({shown})"


_OPAQUE_FIELDS = frozenset(("function", "args", "kwargs"))


def _field_repr(name: str, value: Any) -> str:
    if name in _OPAQUE_FIELDS:
        return show(value, 400)
    try:
        return repr(value)
    except RecursionError:
        return show(value, 400)


_CONTAINER_FIELDS = frozenset(
    (
        "arguments",
        "environment",
        "pre_exec",
        "post_exec",
        "tags",
        "input_staging",
        "output_staging",
        "metadata",
    )
)


class TaskDescription(_Description):
    """A unit of work and its resource request: ranks x (cores, GPUs, memory) per rank.

    executable   program to run (searched in PATH when it has no '/'); no shell unless shell=True
    function, args, kwargs  instead of executable: a Python callable run as function(*args,
                 **kwargs) on a persistent worker in the pilot (task.result, task.exception);
                 ranks > 1: on that many ranks, with comm= (an mpi4py communicator)
    arguments    list of arguments
    environment  extra environment variables
    sandbox      working directory (default: the pilot's task directory)
    pre_exec, post_exec  shell lines run before / after the executable (imply a shell)
    shell        run `executable arguments...` through /bin/sh -c
    ranks, cores_per_rank, gpus_per_rank, mem_per_rank (MiB)
    launcher     launch method for this task (default: the pilot's), e.g. "mpirun"
    stdout, stderr  True: captured into task.stdout/stderr (default); False: discarded; or a path
    timeout      seconds or "90s"/"30m": the task's process group is killed after it
    duration     the expected run time (seconds or "90s"): a scheduling hint -- longer tasks
                 start first among equals, and short ones backfill -- never enforced
    priority     higher runs first
    pilot        run on this pilot (its uid) instead of where the TaskManager routes it
    retries      run a FAILED task again up to this many times, after a backoff (0.5 s doubling,
                 at most 30 s); a task canceled or killed at the pilot's end is not retried
    tags         e.g. {"colocate": "group"}: tasks of one group share a node
    name, metadata  free for the user
    input_staging, output_staging  [{source, target, action: copy|link|move|transfer|tarball}]
    stage_on_error  stage the outputs of a task that FAILED too (default: only of DONE tasks)
    restartable  when its node is drained (Pilot.shrink) the task is stopped and queued again
                 elsewhere instead of being waited for
    named_env    run in an environment the pilot prepared (Pilot.prepare_env)
    """

    _kind = "TaskDescription"
    _aliases = {
        "cores": "'cores_per_rank' (cores of each rank; 'ranks' = processes)",
        "cpu_processes": "'ranks'",
        "processes": "'ranks'",
        "ntasks": "'ranks'",
        "cpu_threads": "'cores_per_rank'",
        "threads_per_process": "'cores_per_rank'",
        "cpu_process_type": "'launcher' (e.g. 'mpiexec', 'prrte')",
        "gpus": "'gpus_per_rank'",
        "gpu_processes": "'gpus_per_rank'",
        "gpus_per_process": "'gpus_per_rank'",
        "mem": "'mem_per_rank' (MiB)",
        "memory": "'mem_per_rank' (MiB)",
        "mem_per_process": "'mem_per_rank' (MiB)",
        "runtime": "'timeout' (a limit: seconds or '90s') or 'duration' (an estimate)",
        "walltime": "'timeout' (a limit: seconds or '90s') or 'duration' (an estimate)",
        "uid": "'name' (uids are given by the TaskManager)",
        "input_files": "'input_staging'",
        "output_files": "'output_staging'",
    }
    _fields = {
        "executable": (None, check.optional(check.nonempty_string)),
        "arguments": (list, check.string_list),
        "environment": (dict, check.env),
        "sandbox": (None, check.optional(check.task_sandbox)),
        "pre_exec": (list, check.string_list),
        "post_exec": (list, check.string_list),
        "shell": (False, check.boolean),
        "ranks": (1, check.int_range(1, MAX_RANKS, " (the most ranks one task can have)")),
        "cores_per_rank": (1, check.int_range(1, MAX_CORES_PER_NODE, " (a rank runs on one node)")),
        "gpus_per_rank": (0, check.int_range(0, MAX_GPUS_PER_NODE, " (a rank runs on one node)")),
        "mem_per_rank": (0, check.int_range(0, MAX_MEM_MIB, " MiB (the placer's limit)")),
        "launcher": (None, check.optional(check.registered_launcher())),
        "stdout": (True, check.output),
        "stderr": (True, check.output),
        "timeout": (None, check.optional(check.duration)),
        "duration": (None, check.optional(check.duration)),
        "priority": (0, check.int_range(-(2**31), 2**31 - 1)),
        "retries": (0, check.int_range(0, 100)),
        "pilot": (None, check.optional(check.nonempty_string)),
        "tags": (dict, check.tags),
        "name": (None, check.optional(check.string)),
        "metadata": (None, check.metadata),
        "input_staging": (list, check.staging),
        "output_staging": (list, check.staging),
        "stage_on_error": (False, check.boolean),
        "restartable": (False, check.boolean),
        "named_env": (None, check.optional(check.nonempty_string)),
        "function": (None, check.a_callable),
        "args": ((), check.args),
        "kwargs": (dict, check.kwargs),
    }
    __slots__ = ()

    def check_complete(self) -> None:
        """What only a whole description can tell (called at submit). Also checks again the
        fields that are containers: they may have been edited in place since they were set,
        and what is submitted must still be valid (and normalised) when it is sent."""
        values = self.values
        if values.get("function") is not None:
            if values.get("executable") is not None:
                raise DescriptionError(
                    self._kind,
                    "function",
                    values["function"],
                    "give either executable or function, not both "
                    f"(executable = {show(values['executable'], 40)})",
                )
            for name, why in check.NOT_FOR_FUNCTIONS.items():
                if name in values and values[name] not in ((), [], {}, False, None):
                    raise DescriptionError(
                        self._kind, name, values[name], f"not for a function task: {why}"
                    )
            if values.get("timeout") is not None and values.get("ranks", 1) > 1:
                raise DescriptionError(
                    self._kind,
                    "timeout",
                    values["timeout"],
                    "not for a function on several ranks (it is raised "
                    "inside the call, which all ranks would have to see)",
                )
            if isinstance(values.get("stdout"), str) or isinstance(values.get("stderr"), str):
                field = "stdout" if isinstance(values.get("stdout"), str) else "stderr"
                raise DescriptionError(
                    self._kind,
                    field,
                    values[field],
                    "not for a function task: its output is captured",
                )
        elif values.get("executable") is None:
            raise DescriptionError(
                self._kind, "executable", None, "is required (or function=, for a Python function)"
            )
        elif "args" in values or "kwargs" in values:
            field = "args" if "args" in values else "kwargs"
            raise DescriptionError(
                self._kind,
                field,
                values[field],
                "is for function tasks: an executable takes 'arguments'",
            )
        fields = self._fields
        for name, value in values.items():
            if name in _CONTAINER_FIELDS:  # (replacing a value keeps the dict's size: safe)
                values[name] = fields[name][1](self._kind, name, value)

    @property
    def cores(self) -> int:
        """Cores of the whole task: ranks x cores_per_rank."""
        return self.ranks * self.cores_per_rank

    @property
    def gpus(self) -> int:
        """GPUs of the whole task: ranks x gpus_per_rank."""
        return self.ranks * self.gpus_per_rank


class PilotDescription(_Description):
    """A placeholder job: nodes x (cores, GPUs, memory) for a walltime.

    resource        "local" (default: an agent process on this machine), "slurm", "pbs", "lsf",
                    "flux", "simulated" (nothing runs: each task takes its `duration` on a
                    virtual clock; see pilotfish.agent.simulation)
    nodes           number of nodes
    cores_per_node, gpus_per_node, mem_per_node (MiB)
                    default: this machine's shape for "local", discovered for batch systems.
                    A local shape larger than this machine is an emulated machine: tasks are
                    placed as on the declared nodes and run here (planning and scale tests).
    runtime         walltime: seconds or "90s", "30m", "2h", "HH:MM:SS"
    sandbox         pilot directory (default: <session>/<pilot uid>)
    queue, project, reservation   passed to the batch system
    launcher        default launch method ("direct" for local)
    launcher_options  per launcher, e.g. {"srun": {"mpi": "pmi2"}, "mpirun": {"prefix": ...}},
                    {"nodes": {"lost_after_s": 10, "beat_s": 1, "start_timeout": 60}}
    node_executors  a Slurm pilot on other hosts runs its single-node tasks through one
                    node executor per node (launcher "nodes"; no launcher process per task).
                    Default None: on for such pilots, off for simulated ones; True on a
                    simulated pilot: modeled (launch model "nodes"); False: off (the pilot's
                    launcher, e.g. srun, launches every task)
    launch_model    resource="simulated" only: launch costs per launch method (a dict or a JSON
                    file; see pilotfish.agent.simulation), over the fitted defaults
    partitions      P: the nodes split into P equal partitions, each with its own launcher
                    instance (its own PRRTE DVM), placer and queue; or a list
                    [{"nodes": 12, "launcher": "prrte"}, {"nodes": 4, "launcher": "direct"}]
                    whose sizes add up to `nodes`. Default 1. A task never spans partitions.
    subagents       each partition served by an agent process of its own (a sub-agent), under
                    a root that routes whole submit batches (pilotfish.agent.subagent). Default
                    None: on for a pilot of several partitions and at least 512 nodes; True: on
                    (several partitions needed); False: one agent. Not for simulated pilots
                    (their launch model's cpu.subagents models them)
    environment     extra environment for the agent and its tasks
    """

    _kind = "PilotDescription"
    _aliases = {
        "cores": "'cores_per_node' (per node)",
        "gpus": "'gpus_per_node' (per node)",
        "walltime": "'runtime'",
        "time": "'runtime'",
        "access_schema": "'launcher'",
        "account": "'project'",
        "partition": "'queue' (the batch queue) or 'partitions' (launcher partitions of the pilot)",
    }
    _fields = {
        "resource": ("local", check.registered_resource()),
        "nodes": (1, check.int_range(1, MAX_NODES)),
        "cores_per_node": (None, check.optional(check.int_range(1, MAX_CORES_PER_NODE))),
        "gpus_per_node": (
            None,
            check.optional(
                check.int_range(0, MAX_GPUS_PER_NODE, " (the most GPUs a node can have)")
            ),
        ),
        "mem_per_node": (None, check.optional(check.int_range(0, MAX_MEM_MIB, " MiB"))),
        "runtime": (3600.0, check.pilot_runtime),
        "workers": (dict, check.workers),
        "sandbox": (None, check.optional(check.nonempty_string)),
        "queue": (None, check.optional(check.string)),
        "project": (None, check.optional(check.string)),
        "reservation": (None, check.optional(check.string)),
        "launcher": (None, check.optional(check.registered_launcher())),
        "launcher_options": (dict, check.launcher_options),
        "node_executors": (None, check.optional(check.boolean)),
        "partitions": (1, check.partitions),
        "subagents": (None, check.optional(check.boolean)),
        "launch_model": (None, check.launch_model),
        "environment": (dict, check.env),
        "name": (None, check.optional(check.string)),
    }
    __slots__ = ()

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        super().__init__(from_dict, **kwargs)
        self.check_complete()

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.values.get(name, _MISSING) if type(name) is str else _MISSING
        super().__setattr__(name, value)
        try:
            self.check_complete()
        except DescriptionError:
            if old is _MISSING:  # a rejected assignment changes nothing
                del self.values[name]
            else:
                self.values[name] = old
            raise

    def check_complete(self) -> None:
        """What only the fields together can tell: the placer's core bitsets must fit."""
        values = self.values
        nodes, cores = values.get("nodes", 1), values.get("cores_per_node")
        if cores is not None and nodes * cores > MAX_TOTAL_CORES:
            raise DescriptionError(
                self._kind,
                "nodes",
                nodes,
                f"nodes x cores_per_node = {nodes * cores} must be <= "
                f"{MAX_TOTAL_CORES} (the most cores a pilot can have)",
            )
        if values.get("launch_model") is not None and values.get("resource") != "simulated":
            raise DescriptionError(
                self._kind,
                "launch_model",
                values["launch_model"],
                "only a simulated pilot (resource='simulated') has a launch model",
            )
        parts = values.get("partitions", 1)
        if values.get("subagents") is True and (
            (parts if isinstance(parts, int) else len(parts)) < 2
            or values.get("resource") == "simulated"
        ):
            raise DescriptionError(
                self._kind,
                "subagents",
                True,
                "a simulated pilot models sub-agents in its launch model (cpu.subagents)"
                if values.get("resource") == "simulated"
                else "a sub-agent serves a partition: give the pilot several (partitions=P)",
            )
        if isinstance(parts, int) and parts > nodes:
            raise DescriptionError(
                self._kind,
                "partitions",
                parts,
                f"more partitions than nodes ({nodes}): a partition owns whole nodes",
            )
        if isinstance(parts, list) and sum(p["nodes"] for p in parts) != nodes:
            raise DescriptionError(
                self._kind,
                "partitions",
                parts,
                f"partition sizes add up to {sum(p['nodes'] for p in parts)} "
                f"nodes, the pilot has {nodes}",
            )


_MISSING = object()

RESTART_POLICIES = ("on-failure", "never")


def service_name_problem(v: Any) -> str | None:
    """Why v cannot name a service group (it names its members' uids too), or None."""
    if (
        not isinstance(v, str)
        or not v
        or len(v) > 64
        or not all(c.isalnum() or c in "_-" for c in v)
    ):
        return "must be 1-64 letters, digits, '_' or '-' (it names the group and its members)"
    return None


def _service_name(kind: str, field: str, v: Any) -> str:
    why = service_name_problem(v)
    if why is not None:
        raise check.fail(kind, field, v, why)
    return str.__str__(v)  # a str subclass (numpy.str_) as a plain str: the wire carries it


class CheckedCall(TaskDescription):
    """A function task's description its maker built from a template it checked whole
    (check_complete) once, only `args` (a tuple) and `kwargs` (str keys) differing from
    call to call, and that nobody else holds before it is submitted: submit does not check
    it again. pilotfish.rp's RAPTOR calls are made so, by the thousand (RaptorState)."""

    __slots__ = ()

    def check_complete(self) -> None:
        pass


class ServiceDescription(_Description):
    """A long-running service: each member of a group (TaskManager.submit_service_group) is
    one of these, kept up by the pilot until the group shrinks or stops.

    name         the group's name (unique in the pilot): members are <name>.<k>
    executable, arguments  a program; or function, args, kwargs: a Python callable run as
                 function(*args, **kwargs) in its own process for the member's life
    environment, ranks, cores_per_rank, gpus_per_rank, mem_per_rank, launcher, pre_exec
                 as for TaskDescription
    ready_timeout  seconds a member may run before it announces its endpoint (default 60):
                 then it is stopped and FAILED, with its stderr tail
    restart      "on-failure" (default): a member that fails is replaced, up to
                 max_restarts (default 3) times per member slot; "never"
    health_interval  seconds between health checks of members that announced through
                 pilotfish.service.announce (it answers, running its probe if it has one);
                 a member silent for 3 intervals, or whose probe fails, has failed
    leave_timeout  seconds a member asked to leave may take to finish (default 30): then
                 it is stopped
    pilot        the pilot to run on (default: the TaskManager's first live pilot)
    """

    _kind = "ServiceDescription"
    _aliases = {
        "replicas": "submit_service_group(desc, replicas=N)",
        "cores": "'cores_per_rank'",
        "gpus": "'gpus_per_rank'",
    }
    _fields = {
        "name": (None, check.optional(_service_name)),
        "executable": (None, check.optional(check.nonempty_string)),
        "arguments": (list, check.string_list),
        "function": (None, check.a_callable),
        "args": ((), check.args),
        "kwargs": (dict, check.kwargs),
        # as a task's (one definition, one check)
        **{
            k: TaskDescription._fields[k]
            for k in (
                "environment",
                "pre_exec",
                "ranks",
                "cores_per_rank",
                "gpus_per_rank",
                "mem_per_rank",
                "launcher",
            )
        },
        "ready_timeout": (60.0, check.duration),
        "restart": ("on-failure", check.choice(RESTART_POLICIES)),
        "max_restarts": (3, check.int_range(0, 1000)),
        "health_interval": (None, check.optional(check.duration)),
        "leave_timeout": (30.0, check.duration),
        "pilot": (None, check.optional(check.nonempty_string)),
    }
    __slots__ = ()

    def check_complete(self) -> None:
        """What only the fields together can tell (raises DescriptionError): a name, and
        either an executable or a function (not both)."""
        values = self.values
        if values.get("name") is None:
            raise DescriptionError(self._kind, "name", None, "is required (it names the group)")
        if (values.get("function") is None) == (values.get("executable") is None):
            field = "function" if values.get("function") is not None else "executable"
            raise DescriptionError(
                self._kind,
                field,
                values.get(field),
                "give either executable or function (one of them)",
            )
        if values.get("function") is not None and values.get("arguments"):
            raise DescriptionError(
                self._kind,
                "arguments",
                values["arguments"],
                "a function service takes args=(...), kwargs={...}",
            )
        if values.get("function") is None and ("args" in values or "kwargs" in values):
            field = "args" if "args" in values else "kwargs"
            raise DescriptionError(
                self._kind,
                field,
                values[field],
                "is for function services: an executable takes 'arguments'",
            )
        for name in ("arguments", "environment", "pre_exec"):
            if name in values:
                values[name] = self._fields[name][1](self._kind, name, values[name])


def check_descriptions(descs: Iterable[Any], cls: type[_Description]) -> list[Any]:
    """Accept descriptions or dicts; re-check each one, naming its index on error."""
    if isinstance(descs, (str, bytes, bytearray)) or not isinstance(descs, Iterable):
        raise DescriptionError(
            cls._kind, "(itself)", descs, f"expected a {cls.__name__}, a dict or a list of them"
        )
    out = []
    for i, d in enumerate(descs):
        try:
            if isinstance(d, dict):
                d = cls(d)
            elif not isinstance(d, cls):
                raise DescriptionError(
                    cls._kind, "(itself)", d, f"expected a {cls.__name__} or a dict"
                )
            # (no copy: what runs is fixed when the task is submitted, later edits to the
            # description change nothing, and a queued task costs half the memory)
            d.check_complete()
        except DescriptionError as e:
            raise DescriptionError(e.kind, e.field, e.value, e.why, index=i) from None
        out.append(d)
    return out


def __getattr__(name: str) -> tuple[str, ...]:
    """RESOURCES, LAUNCHERS: the registered batch systems' and launch methods' names now
    (batch/registry.py, launch/__init__.py: the registries are the lists)."""
    if name == "RESOURCES":
        return check.resource_names()
    if name == "LAUNCHERS":
        return check.launcher_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TaskDescription",
    "PilotDescription",
    "check_descriptions",
    "declared_shape",
    "misfit",
    "misfit_partitions",
    "partition_layout",
    "MAX_NODES",
    "MAX_CORES_PER_NODE",
    "MAX_GPUS_PER_NODE",
    "MAX_TOTAL_CORES",
    "MAX_MEM_MIB",
    "MAX_RANKS",
    "MAX_DURATION_S",
]
