"""A Parsl executor that runs apps on a pilotfish pilot.

    from parsl.config import Config
    from pilotfish.parsl import PilotfishExecutor

    parsl.load(Config(executors=[PilotfishExecutor(label="pilotfish")]))

python_app calls become function tasks (persistent workers, batched: tens of thousands a
second). bash_app calls become executable tasks: the command line is composed on the client
(the app's own function, as Parsl's bash wrapper does), and runs as `/bin/bash -c CMD` with
the app's stdout/stderr files, walltime as the task's timeout, and Parsl's errors
(BashExitFailure, AppTimeout, MissingOutputs, AppBadFormatting). A bash app whose
stdout/stderr ask for an open mode or a File runs Parsl's own wrapper as a function task
instead, so its semantics stay Parsl's.

parsl_resource_specification: cores, memory (MB), gpus, num_ranks (or num_nodes x
ranks_per_node), running_time (s: the timeout), priority; anything else raises
InvalidResourceSpecification. Scaling: by default the pilot is the capacity (one pilot,
no blocks). With max_blocks, blocks are pilots of `pilot` (the template) that an allocation
policy (PilotManager.autoalloc) requests as the apps wait: max_blocks -> max_pilots,
min_blocks -> min_pilots, init_blocks -> init_pilots, parallelism -> parallelism,
max_idletime (s) -> idle_timeout; a block's size is sized from what waits (up to the
template's nodes).
"""

from __future__ import annotations

import functools
import os
import shlex
from concurrent.futures import Future
from typing import Any, Callable

from ._extras import require

require("parsl", "pilotfish.parsl (the Parsl executor)")
# after require(): without Parsl, the error names the extra
from parsl.executors.base import ParslExecutor  # noqa: E402 -- after require()
from parsl.executors.errors import InvalidResourceSpecification  # noqa: E402 -- after require()

from . import states as S  # noqa: E402 -- after require()
from .client.executor import Executor  # noqa: E402 -- after require()
from .descriptions import PilotDescription, TaskDescription  # noqa: E402 -- after require()

RESOURCE_KEYS = (
    "cores",
    "memory",
    "gpus",
    "num_ranks",
    "num_nodes",
    "ranks_per_node",
    "running_time",
    "priority",
)


class PilotfishExecutor(ParslExecutor):
    """label: Parsl's name for it; pilot: a PilotDescription (default: one local node of
    this machine's cores) for a pilot it starts and stops; or tmgr: run on an existing
    TaskManager's pilots (then nothing is started or stopped here)."""

    def __init__(
        self,
        label: str = "pilotfish",
        pilot: PilotDescription | dict | None = None,
        tmgr=None,
        session_path: str | None = None,
        bash_apps_as_executables: bool = True,
        max_blocks: int | None = None,
        min_blocks: int = 0,
        init_blocks: int = 0,
        parallelism: float = 1.0,
        max_idletime: float = 120.0,
    ):
        super().__init__()
        self.label = label
        self.pilot_description = pilot
        self.tmgr = tmgr
        self.session_path = session_path
        self.bash_apps_as_executables = bash_apps_as_executables
        self.autoalloc = (
            None
            if max_blocks is None
            else {
                "max_pilots": max_blocks,
                "min_pilots": min_blocks,
                "init_pilots": init_blocks,
                "parallelism": max(0.01, parallelism)
                if isinstance(parallelism, (int, float))
                else parallelism,
                "idle_timeout": max_idletime,
            }
        )
        self._ex: Executor | None = None

    def start(self) -> None:
        path = self.session_path
        if path is None and self.tmgr is None:
            path = os.path.join(self.run_dir, "pilotfish-session")
        self._ex = Executor(
            self.tmgr,
            pilot=self.pilot_description,
            session_path=path,
            autoalloc=None if self.tmgr is not None else self.autoalloc,
        )

    def monitor_resources(self) -> bool:
        return False  # calls run inside persistent workers: no process tree per task

    def submit(
        self, func: Callable, resource_specification: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Future:
        ex = self._ex
        if ex is None:
            raise RuntimeError(f"executor {self.label} was not started")
        shape = _shape(resource_specification or {})
        bash = _bash_app(func) if self.bash_apps_as_executables else None
        if bash is not None and _plain_std(kwargs):
            return self._submit_bash(ex, bash, shape, args, kwargs)
        d = TaskDescription(function=func, args=args, kwargs=kwargs, **shape)
        return ex.submit_description(d)

    def _submit_bash(self, ex: Executor, app: Callable, shape: dict, args, kwargs) -> Future:
        import parsl.app.errors as pe

        name = getattr(app, "__name__", "bash_app")
        try:  # compose the command line here, as Parsl's wrapper would on the worker
            cmd = app(*args, **kwargs)
            if not isinstance(cmd, str):
                raise ValueError(f"Expected a str for bash_app commandline, got {type(cmd)}")
        except AttributeError as e:
            return _failed(
                pe.AppBadFormatting(
                    f"App formatting failed for app '{name}' with AttributeError: {e}"
                )
            )
        except IndexError as e:
            return _failed(
                pe.AppBadFormatting(f"App formatting failed for app '{name}' with IndexError: {e}")
            )
        except Exception as e:  # noqa: BLE001 -- any failure to build the command fails its future
            return _failed(e)
        # Parsl appends to a bash app's stdout/stderr files (and writes the command line to
        # stderr first): the script redirects the same way
        redirect = []
        for which, fd in (("stdout", 1), ("stderr", 2)):
            path = kwargs.get(which)
            if path is None:
                continue
            path = os.path.abspath(os.fspath(path))
            if os.path.dirname(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            if which == "stderr":
                with open(path, "a") as f:
                    f.write(f"--> executable follows <--\n{cmd}\n--> end executable <--\n")
            redirect.append(f"{fd}>>{shlex.quote(path)}")
        script = (f"exec {' '.join(redirect)}\n" if redirect else "") + cmd
        timeout = kwargs.get("walltime")
        if timeout:
            shape = dict(shape, timeout=timeout)
        d = TaskDescription(
            executable="/bin/bash",
            arguments=["-c", script],
            sandbox=os.getcwd(),
            stdout=False,
            stderr=False,
            **shape,
        )
        outputs = list(kwargs.get("outputs", []))

        def finish(task):
            if task.state == S.DONE:
                missing = [f for f in outputs if not os.path.exists(f.filepath)]
                if missing:
                    return None, pe.MissingOutputs(f"Missing outputs from app {name}", missing)
                return 0, None
            if task.reason and "timed out" in task.reason:
                return None, pe.AppTimeout(f"App {name} exceeded walltime: {timeout} seconds")
            if task.exit_code is not None:
                return None, pe.BashExitFailure(name, task.exit_code)
            return None, pe.AppException(f"App {name} failed: {task.reason}", None)

        return ex.submit_description(d, finish)

    def shutdown(self) -> None:
        if self._ex is not None:
            self._ex.shutdown(wait=True)
            self._ex = None
        super().shutdown()


def _shape(spec: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(RESOURCE_KEYS))
    if unknown:
        raise InvalidResourceSpecification(set(unknown), f"pilotfish accepts {RESOURCE_KEYS}")
    out: dict[str, Any] = {}
    if "cores" in spec:
        out["cores_per_rank"] = spec["cores"]
    if "memory" in spec:
        out["mem_per_rank"] = spec["memory"]
    if "gpus" in spec:
        out["gpus_per_rank"] = spec["gpus"]
    if "num_ranks" in spec:
        out["ranks"] = spec["num_ranks"]
    elif "num_nodes" in spec or "ranks_per_node" in spec:
        out["ranks"] = spec.get("num_nodes", 1) * spec.get("ranks_per_node", 1)
    if "running_time" in spec:
        out["timeout"] = spec["running_time"]
    if "priority" in spec:
        out["priority"] = spec["priority"]
    return out


def _bash_app(func: Callable) -> Callable | None:
    """The user's command-composing function of a Parsl bash app, or None."""
    from parsl.app.bash import remote_side_bash_executor

    f: Callable | None = func
    for _ in range(8):  # through wrap_error and functools.wraps layers
        if isinstance(f, functools.partial):
            if f.func is remote_side_bash_executor and f.args:
                return f.args[0]
            return None
        f = getattr(f, "__wrapped__", None)
        if f is None:
            return None
    return None


def _plain_std(kwargs: dict) -> bool:
    """stdout/stderr given as plain paths (or not at all): what an executable task does."""
    return all(
        isinstance(kwargs.get(k), (str, os.PathLike, type(None)))
        and not hasattr(kwargs.get(k), "filepath")
        for k in ("stdout", "stderr")
    )


def _failed(e: BaseException) -> Future:
    f: Future = Future()
    f.set_exception(e)
    return f
