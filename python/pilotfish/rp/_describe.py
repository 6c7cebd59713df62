"""RADICAL-Pilot's descriptions, and their translation into pilotfish's.

An RP description is a dict with attribute access (`td.executable = ...` or
`rp.TaskDescription({...})`), with RP's field names and units (runtime in minutes, cores over
the whole pilot, staging directives as strings, dicts or lists). `to_pf()` gives the pilotfish
description; every field pilotfish cannot honour is rejected there, at submit, with the field,
the value and why -- never accepted and then ignored -- except the ones listed in `IGNORED`,
which change nothing here (said once in the docs). Staging directives: _staging.py.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from typing import Any

from .._errors import DescriptionError, show
from .._util import machine_shape
from ..descriptions import PilotDescription as _PfPilot
from ..descriptions import TaskDescription as _PfTask
from ._resources import from_user_config, resource_config
from ._staging import downloads, staging

# task modes
TASK_EXECUTABLE = "task.executable"
TASK_FUNCTION = "task.function"
TASK_METHOD = "task.method"
TASK_EVAL = "task.eval"
TASK_EXEC = "task.exec"
TASK_PROC = "task.proc"
TASK_SHELL = "task.shell"
TASK_SERVICE = "task.service"
TASK_FUNC, TASK_METH = TASK_FUNCTION, TASK_METHOD  # RP's short names
AGENT_SERVICE = "agent.service"
RAPTOR_MASTER = "raptor.master"
RAPTOR_WORKER = "raptor.worker"
RAPTOR_MODES = (TASK_FUNCTION, TASK_METHOD, TASK_EVAL, TASK_EXEC, TASK_PROC, TASK_SHELL)

# process types (RP's legacy cpu_process_type / gpu_process_type)
POSIX, MPI, OpenMP, CUDA = "POSIX", "MPI", "OpenMP", "CUDA"
SERIAL, GPU, GPU_MPI, GPU_OpenMP, FUNC = "Serial", "GPU", "GPU_MPI", "GPU_OpenMP", "FUNC"


class _Description(dict):
    """A dict whose keys are also attributes (RP's description objects behave so)."""

    _defaults: dict[str, Any] = {}

    def __init__(self, from_dict: dict | None = None, **kwargs: Any):
        super().__init__()
        if from_dict:
            self.update(from_dict)  # (no __setitem__ of its own: the same, at C speed)
        if kwargs:
            self.update(kwargs)

    def __missing__(self, key: str) -> Any:
        """d['services'].append(...) on a fresh description works, as in RP: a field's
        default, stored on first use."""
        if key not in self._defaults:
            raise KeyError(key)
        d = self._defaults[key]
        value = self[key] = d() if callable(d) else d
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self:
            return self[name]
        if name in self._defaults:
            return self[name]  # (__missing__: a list or dict default is kept, to be filled)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def as_dict(self) -> dict:
        return dict(self)

    def verify(self) -> None:
        self.to_pf()


# -- tasks ----------------------------------------------------------------------------------

# RP fields that change nothing on pilotfish (no effect on where or how a task runs here)
TASK_IGNORED = frozenset(
    (
        "gpu_type",
        "gpu_process_type",
        "cpu_thread_type",
        "gpu_threads",
        "lfs_per_rank",
        "lfs_per_process",
        "cpu_process_type_opts",
        "scheduler",
        "restartable",
        "partition",
        "use_mpi",
        "gpu_thread_type",
        "cleanup",
        "pre_exec_sync",
        "ranks_per_node",
        "origin",
    )
)
_RAPTOR_ONLY = (
    "runs on a RAPTOR master's workers: submit it with raptor.submit_tasks "
    "(or give raptor_id) after pilot.submit_raptors"
)
TASK_UNSUPPORTED = {
    "slots": "placing a task on the cores its slots name is not supported on pilotfish: "
    "pilotfish places tasks itself (pilot.nodelist is for the application's own "
    "bookkeeping); keep tasks on one node with tags={'colocate': name}, choose the pilot "
    "with TaskDescription.pilot",
    "raptor_id": "names a RAPTOR master: submit through a TaskManager the raptor's pilot is "
    "added to, or raptor.submit_tasks",
    "method": "a RAPTOR worker's method " + _RAPTOR_ONLY,
    "code": "eval/exec code " + _RAPTOR_ONLY,
    "command": "a shell command (mode rp.TASK_SHELL) " + _RAPTOR_ONLY + "; or use executable "
    "'/bin/sh' with arguments ['-c', command]",
    "info_pattern": "readiness by output pattern is not supported: give metadata="
    "{'startup_file': path} (RP 1.60's form)",
    "services": "tasks naming services (RP 1.90) are not supported: pilot services are",
    "raptor_file": "is for RAPTOR_MASTER / RAPTOR_WORKER descriptions (pilot.submit_raptors, "
    "raptor.submit_workers)",
    "raptor_class": "is for RAPTOR_MASTER / RAPTOR_WORKER descriptions (pilot.submit_raptors, "
    "raptor.submit_workers)",
}


class TaskDescription(_Description):
    """RP's TaskDescription: executable, arguments, environment, named_env, ranks,
    cores_per_rank, gpus_per_rank, mem_per_rank (or the legacy cpu_processes, cpu_threads,
    gpu_processes, mem_per_process), threading_type, pre_exec, post_exec, pre_launch,
    post_launch, stdout, stderr (file names in the task sandbox), input_staging,
    output_staging, stage_on_error, sandbox, pilot, uid, name, tags, metadata, priority,
    timeout (seconds), mode."""

    _defaults = {
        "executable": None,
        "arguments": list,
        "environment": dict,
        "named_env": None,
        "ranks": 1,
        "cores_per_rank": 1,
        "gpus_per_rank": 0,
        "mem_per_rank": 0,
        "pre_exec": list,
        "post_exec": list,
        "pre_launch": list,
        "post_launch": list,
        "stdout": None,
        "stderr": None,
        "input_staging": list,
        "output_staging": list,
        "stage_on_error": False,
        "sandbox": None,
        "uid": None,
        "name": None,
        "tags": dict,
        "metadata": None,
        "priority": 0,
        "timeout": 0.0,
        "mode": TASK_EXECUTABLE,
        "pilot": None,
        "threading_type": None,
        "function": None,
        "args": tuple,
        "kwargs": dict,
        "raptor_id": None,
        "raptor_file": None,
        "raptor_class": None,
        "method": None,
        "code": None,
        "command": None,
        # legacy and ignored fields read as RP gives them (0 / '': "not given")
        "cpu_processes": 0,
        "cpu_threads": 0,
        "gpu_processes": 0,
        "cpu_process_type": "",
        "gpu_process_type": "",
        "cpu_thread_type": "",
        "gpu_thread_type": "",
        "mem_per_process": 0,
        "lfs_per_process": 0,
        "lfs_per_rank": 0,
        "gpu_type": None,
    }

    def to_pf(self, index: int = 0) -> _PfTask:
        """The pilotfish TaskDescription, or DescriptionError (RP field name, value, why)."""
        v = dict(self)

        def fail(field: str, why: str) -> DescriptionError:
            return DescriptionError("rp.TaskDescription", field, v.get(field), why, index=index)

        out: dict[str, Any] = {}
        mode = v.get("mode") or TASK_EXECUTABLE
        if mode == TASK_FUNCTION:
            return self._function_to_pf(v, fail, index)
        if mode in RAPTOR_MODES:
            raise fail("mode", f"{mode} {_RAPTOR_ONLY}")
        if mode in (RAPTOR_MASTER, RAPTOR_WORKER):
            raise fail(
                "mode", f"{mode}: submit it with pilot.submit_raptors / raptor.submit_workers"
            )
        if mode not in (TASK_EXECUTABLE, TASK_SERVICE, AGENT_SERVICE):
            raise fail(
                "mode",
                f"unknown mode (RP's modes: {TASK_EXECUTABLE}, "
                f"{', '.join(RAPTOR_MODES)}, {RAPTOR_MASTER}, {RAPTOR_WORKER})",
            )
        for k in ("function", "args", "kwargs"):
            if v.get(k) not in (None, "", [], {}, ()):
                raise fail(k, "is for mode=rp.TASK_FUNCTION")
        for k in list(v):
            if k in TASK_UNSUPPORTED and v[k] not in (None, "", [], {}, ()):
                raise fail(k, TASK_UNSUPPORTED[k])
        out.update(task_shape(v))
        ranks, cores = out["ranks"], out["cores_per_rank"]
        ptype = v.get("cpu_process_type")
        if ptype not in (None, "", MPI, POSIX):
            raise fail("cpu_process_type", "must be rp.MPI or rp.POSIX")
        if (ptype == POSIX or v.get("use_mpi") is False) and ranks != 1:
            out["launcher"] = "direct"  # plain processes, no MPI launcher
        if v.get("launcher") is not None:
            out["launcher"] = v["launcher"]
        out["executable"] = v.get("executable")
        for k in (
            "named_env",
            "sandbox",
            "name",
            "tags",
            "metadata",
            "priority",
            "stage_on_error",
            "pilot",
        ):
            if v.get(k) not in (None, "", [], {}):
                out[k] = v[k]
        if "tags" in out:
            out["tags"] = _tags(out["tags"], fail)
        if v.get("uid") and not v.get("name"):
            out["name"] = v["uid"]
        args = _as_list(v.get("arguments"))
        args = [a if isinstance(a, str) else str(a) for a in args]
        env = (
            {
                str(k): e if isinstance(e, str) else str(e)
                for k, e in (v.get("environment") or {}).items()
            }
            if isinstance(v.get("environment"), dict)
            else v.get("environment")
        )
        pre: list[str] = []
        if isinstance(env, dict):  # RP: export K="<value as given>" -- "$X" expands, "\$"
            expand = {k: e for k, e in env.items() if _expands(e) or "\\" in e}  # is a $
            for k, e in expand.items():
                try:
                    shlex.split(f'"{e}"')
                except ValueError:
                    raise fail(
                        "environment",
                        f'{k}={e!r}: RP writes export {k}="{e}", '
                        "which the shell cannot read (an unescaped "
                        "double quote?)",
                    ) from None
            pre += [f'export {k}="{e}"' for k, e in expand.items()]
            env = {k: e for k, e in env.items() if k not in expand}
        if env:
            out["environment"] = env
        if v.get("threading_type") == OpenMP:
            out.setdefault("environment", {})["OMP_NUM_THREADS"] = str(cores)
        if ranks != 1:  # RP_RANK per rank (a single rank gets RP_RANK=0 with the others)
            pre.append('export RP_RANK="$PILOTFISH_RANK"')
        if out.get("named_env") == "rp":  # RP's own environment: the one pilotfish runs in
            del out["named_env"]
            pre.insert(0, f'export PATH={_dq(os.path.dirname(sys.executable))}:"$PATH"')
        pre += _per_rank(_as_list(v.get("pre_launch")), fail, "pre_launch")
        pre += _per_rank(_as_list(v.get("pre_exec")), fail, "pre_exec")
        post = _per_rank(_as_list(v.get("post_exec")), fail, "post_exec") + _per_rank(
            _as_list(v.get("post_launch")), fail, "post_launch"
        )
        if pre:
            out["pre_exec"] = pre
        if post:
            out["post_exec"] = post
        if any(_expands(a) for a in args):  # RP double-quotes each argument: "$X" expands
            out["shell"] = True
            args = [_dq(a) for a in args]
        if args:
            out["arguments"] = args
        if v.get("timeout"):
            out["timeout"] = v["timeout"]  # seconds, as in RP
        for k in ("stdout", "stderr"):  # RP: a file name in the sandbox
            if v.get(k):
                out[k] = v[k]
        for field in ("input_staging", "output_staging"):
            if v.get(field):
                out[field] = staging(v[field], field, fail=fail)
        fetch = [d for d in out.get("input_staging", ()) if d["action"] == "download"]
        if fetch:  # rp.DOWNLOAD: fetched by the pilot's side, before pre_exec (as RP's agent)
            out["input_staging"] = [d for d in out["input_staging"] if d not in fetch]
            if not out["input_staging"]:
                del out["input_staging"]
            out["pre_exec"] = downloads(fetch) + out.get("pre_exec", [])
        if any(d["action"] == "download" for d in out.get("output_staging", ())):
            raise fail(
                "output_staging",
                "rp.DOWNLOAD fetches a URL into the task's sandbox: input_staging only",
            )
        unknown = sorted(
            set(v)
            - set(self._defaults)
            - TASK_IGNORED
            - set(TASK_UNSUPPORTED)
            - {
                "cpu_processes",
                "cpu_threads",
                "gpu_processes",
                "cpu_process_type",
                "mem_per_process",
                "launcher",
            }
        )
        if unknown:
            raise fail(
                unknown[0], "is not a RADICAL-Pilot TaskDescription field that pilotfish.rp knows"
            )
        return translated(_PfTask, "rp.TaskDescription", out, index)

    def _function_to_pf(self, v: dict, fail, index: int) -> _PfTask:
        """mode=rp.TASK_FUNCTION: function (a callable, or rp.PythonTask(f, *args,
        **kwargs)), args, kwargs, ranks (an MPI function gets comm=)."""
        fn, args, kwargs = v.get("function"), v.get("args") or (), v.get("kwargs") or {}
        if isinstance(fn, PythonTask):
            if args or kwargs:
                raise fail("args", "must be empty for an rp.PythonTask function (as in RP)")
            fn, args, kwargs = fn.function, fn.args, fn.kwargs
        if isinstance(fn, str):
            raise fail(
                "function",
                "a function's name is a RAPTOR worker's method: submit "
                "with raptor.submit_tasks, or pass the callable",
            )
        out: dict[str, Any] = {
            "function": fn,
            "args": tuple(args),
            "kwargs": dict(kwargs),
            **task_shape(v),
        }
        for k in ("name", "tags", "metadata", "priority", "timeout", "pilot"):
            if v.get(k) not in (None, "", 0, {}, 0.0):
                out[k] = v[k]
        if "tags" in out:
            out["tags"] = _tags(out["tags"], fail)
        if v.get("uid") and not v.get("name"):
            out["name"] = v["uid"]
        allowed = (
            set(out)
            | {
                "mode",
                "uid",
                "function",
                "args",
                "kwargs",
                "cpu_processes",
                "cpu_threads",
                "gpu_processes",
                "mem_per_process",
            }
            | TASK_IGNORED
        )
        unknown = sorted(k for k in v if k not in self._defaults and k not in allowed)
        if unknown:
            raise fail(
                unknown[0], "is not a RADICAL-Pilot TaskDescription field that pilotfish.rp knows"
            )
        extra = sorted(
            k
            for k in v
            if k not in allowed and v[k] not in (None, "", [], {}, (), 0, 0.0, False, 1)
        )
        if extra:
            raise fail(extra[0], "not for a function task (it runs in a persistent worker)")
        return translated(_PfTask, "rp.TaskDescription", out, index)


class PythonTask:
    """rp.PythonTask(func, args=(), kwargs=None), as RP's: a function and its arguments, for
    TaskDescription(mode=rp.TASK_FUNCTION, function=rp.PythonTask(...)). RP serializes it
    into a string; here it stays an object (scripts only pass it on). The call's `args` and
    `kwargs` fields must then be empty, as in RP."""

    __slots__ = ("function", "args", "kwargs")

    def __init__(self, func, args=(), kwargs=None):
        if not callable(func):
            raise ValueError("task function not callable")
        self.function = func
        self.args = args if type(args) is tuple else tuple(args or ())
        self.kwargs = dict(kwargs) if kwargs else {}
        if kwargs and any(type(k) is not str for k in self.kwargs):
            raise ValueError(
                f"task kwargs must have str keys (keyword names): {show(self.kwargs, 60)}"
            )

    def __repr__(self) -> str:
        return f"rp.PythonTask({getattr(self.function, '__name__', self.function)!r})"


def pythontask(f):
    """@rp.pythontask, as RP's: calling the decorated function does not run it, it gives the
    rp.PythonTask to put in TaskDescription.function."""
    if not callable(f):
        raise ValueError("task function not callable")
    import functools

    @functools.wraps(f)
    def decor(*args, **kwargs):
        return PythonTask(f, args, kwargs)

    decor.__wrapped_pythontask__ = f
    return decor


def translated(cls, kind: str, values: dict, index: int):
    """The pilotfish description, its DescriptionError told in the RP description's name."""
    try:
        return cls(values)
    except DescriptionError as e:
        raise DescriptionError(kind, e.field, e.value, e.why, index=index) from None


def task_shape(v: dict) -> dict[str, Any]:
    """ranks, cores_per_rank, gpus_per_rank, mem_per_rank from RP's names, the legacy ones
    (cpu_processes, cpu_threads, gpu_processes, mem_per_process) first: RP zeroes a legacy
    name it has copied over, so 0 there means "not given". Whole GPU counts as ints."""
    ranks = v["cpu_processes"] if v.get("cpu_processes") else v.get("ranks", 1)
    cores = v["cpu_threads"] if v.get("cpu_threads") else v.get("cores_per_rank", 1)
    gpus = v["gpu_processes"] if v.get("gpu_processes") else v.get("gpus_per_rank", 0)
    if isinstance(gpus, float) and gpus.is_integer():
        gpus = int(gpus)
    out = {"ranks": ranks, "cores_per_rank": cores, "gpus_per_rank": gpus}
    mem = v["mem_per_process"] if v.get("mem_per_process") else v.get("mem_per_rank")
    if mem:
        out["mem_per_rank"] = mem
    return out


def _tags(tags: Any, fail) -> Any:
    """RP 1.60+'s colocate form {'colocate': {'bag': name, 'size': n}} (n tasks of the bag
    on one node) as pilotfish's group name str(bag): the group's tasks share a node (its
    size is not needed here: each task of the group waits for room on that node)."""
    c = tags.get("colocate") if isinstance(tags, dict) else None
    if not isinstance(c, dict):
        return tags
    if c.get("bag") in (None, ""):
        raise fail("tags", "{'colocate': {...}} must name its 'bag' (and its 'size')")
    return {**tags, "colocate": str(c["bag"])}


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _expands(s: str) -> bool:
    return "$" in s or "`" in s


def _dq(s: str) -> str:
    """s in double quotes, as RP writes arguments and exports: $VAR and `cmd` still work."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _per_rank(lines: list, fail, field: str) -> list[str]:
    """pre/post_exec items: shell lines, or {rank: line(s)} run only by that rank."""
    out = []
    for item in lines:
        if isinstance(item, dict):
            arms = []
            for rank, cmds in item.items():
                body = "; ".join(str(c) for c in _as_list(cmds)) or ":"
                arms.append(f"{int(rank)}) {body} ;;")
            out.append('case "$PILOTFISH_RANK" in ' + " ".join(arms) + " esac")
        elif isinstance(item, str):
            out.append(item)
        else:
            raise fail(field, f"item {show(item, 40)} must be a shell line or {{rank: line}}")
    return out


# -- pilots ---------------------------------------------------------------------------------

PILOT_IGNORED = frozenset(
    (
        "access_schema",
        "exit_on_error",
        "cleanup",
        "candidate_hosts",
        "enable_ep",
        "job_name",
        "layout",
        "uid",
    )
)
APP_COMM_REFUSED = (
    "RP's ZeroMQ channels between tasks (RP_<NAME>_IN/OUT) are not supported "
    "on pilotfish: connect tasks through a pilot service (PilotDescription."
    "services, and pilotfish.service.Group in the tasks)"
)


class PilotDescription(_Description):
    """RP's PilotDescription: resource (a label: 'local.localhost', or one added with
    rp.add_resource), runtime (minutes), nodes, cores, gpus, memory, queue, project/account,
    sandbox, services (task descriptions started first), prepare_env ({name: spec}),
    input_staging (client files into the pilot's shared space, pilot:///<name>, at submit)."""

    _defaults = {
        "resource": None,
        "runtime": 10,
        "nodes": None,
        "cores": None,
        "gpus": 0,
        "memory": None,
        "queue": None,
        "project": None,
        "account": None,
        "sandbox": None,
        "services": list,
        "prepare_env": dict,
        "reservation": None,
        "exit_on_error": True,
        "access_schema": None,
        "app_comm": list,
        "input_staging": list,
    }

    def to_pf(self, index: int = 0) -> _PfPilot:
        v = dict(self)

        def fail(field: str, why: str) -> DescriptionError:
            return DescriptionError("rp.PilotDescription", field, v.get(field), why, index=index)

        if v.get("app_comm"):
            raise fail("app_comm", APP_COMM_REFUSED)
        label = v.get("resource")
        if not isinstance(label, str):
            raise fail("resource", "is required: a resource label such as 'local.localhost'")
        try:
            cfg = resource_config(label)
        except KeyError as e:
            try:  # a site of the user's RP configs (~/.radical/pilot/configs/resource_*.json)
                user = from_user_config(label, v.get("access_schema"))
            except ValueError as why:
                raise fail(
                    "access_schema" if v.get("access_schema") else "resource", str(why)
                ) from None
            if user is None:
                raise fail("resource", str(e.args[0])) from None
            cfg = user
        runtime = v.get("runtime", 10)
        if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or runtime <= 0:
            raise fail("runtime", "must be a positive number of minutes")
        out: dict[str, Any] = {"resource": cfg["resource"], "runtime": f"{runtime}m"}
        for k in ("launcher", "launcher_options", "partitions"):
            if k in cfg:
                out[k] = cfg[k]
        cores, gpus, nodes = v.get("cores"), v.get("gpus") or 0, v.get("nodes")
        cpn, gpn = cfg.get("cores_per_node"), cfg.get("gpus_per_node", 0)
        if cfg.get("fake_resources"):  # local.localhost: one node of what was asked for
            out["nodes"] = nodes or 1
            per = (cores or machine_shape()[0]) / out["nodes"]
            out["cores_per_node"] = max(1, math.ceil(per))
            out["gpus_per_node"] = math.ceil(gpus / out["nodes"])
        else:
            if nodes is None:
                if cores is None:
                    raise fail("cores", "give cores or nodes")
                if not cpn:
                    raise fail(
                        "nodes", f"{label} has no cores_per_node in its resource config: give nodes"
                    )
                need = max(math.ceil(cores / cpn), math.ceil(gpus / gpn) if gpn else 0)
                nodes = max(1, need)
            out["nodes"] = nodes
            if cpn:
                out["cores_per_node"] = cpn
            if gpn:
                out["gpus_per_node"] = gpn
        if v.get("memory"):
            out["mem_per_node"] = v["memory"]
        if v.get("queue"):
            out["queue"] = v["queue"]
        if v.get("project") or v.get("account"):
            out["project"] = v.get("project") or v.get("account")
        if v.get("reservation"):
            out["reservation"] = v["reservation"]
        if v.get("sandbox"):
            out["sandbox"] = v["sandbox"]
        unknown = sorted(set(v) - set(self._defaults) - PILOT_IGNORED)
        if unknown:
            raise fail(
                unknown[0], "is not a RADICAL-Pilot PilotDescription field that pilotfish.rp knows"
            )
        services = v.get("services") or []
        for i, s in enumerate(services):
            if not isinstance(s, dict):
                raise fail("services", f"item {i} must be a TaskDescription")
        if v.get("input_staging"):  # (staged by the PilotManager at submit: checked here)
            staging(v["input_staging"], "input_staging", fail)
        envs = v.get("prepare_env") or {}
        if not isinstance(envs, dict):
            raise fail("prepare_env", "must be {name: environment spec}")
        return translated(_PfPilot, "rp.PilotDescription", out, index)
