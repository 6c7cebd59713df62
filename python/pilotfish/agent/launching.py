"""How the agent makes the launch methods of its partitions and watches them: a method per
(partition, launcher name) on the partition's nodes and the agent's clock; a supervisor per
partition whose methods retry or run daemons (supervisor.py); their rank notes' sockets on
the loop's poller once a method is ready (and off it when its partition is let go)."""

from __future__ import annotations

import os
from typing import Any

import zmq

from ..launch.base import LaunchError, SupervisedLaunchMethod
from .partition import READY, Partition
from .supervisor import Supervisor


class LaunchWiring:
    def __init__(
        self,
        table: Any,
        runner: Any,
        poller: Any,
        desc: dict,
        sandbox: str,
        clock: Any,
        model: dict | None,
    ):
        """model: a simulated pilot's launch model (methods are ModeledLaunchers), else None."""
        self.table = table
        self.runner = runner
        self.poller = poller
        self.desc = desc
        self.sandbox = sandbox
        self.clock = clock
        self.model = model
        self.supervisors: list[Supervisor] = []  # of partitions whose launchers need watching
        self.notes: dict[int, tuple[Supervisor, object]] = {}  # notes fd -> (supervisor, method)
        self.nodes: Any = None  # the node executors' link (node_link.py), on a pilot that has them

    def make(self, p: Partition, name: str):
        """A launch method over partition p's nodes (called by Launchers, which starts it)."""
        from ..launch import get_launcher

        if self.model is not None:
            from .simulation import ModeledLauncher

            if name not in self.model:
                raise LaunchError(f"no launch model for {name!r}")
            return ModeledLauncher(name, self.model[name], len(p.nodes), self.clock)
        options = dict((self.desc.get("launcher_options") or {}).get(name, {}))
        options.update(p.options.get(name, {}))  # a grown unit's own (its batch job)
        if name == "nodes" and "jobid" in p.options.get("srun", {}):  # a grown unit's job
            options.setdefault("jobid", p.options["srun"]["jobid"])
        tag = name if len(self.table.partitions) == 1 else f"{name}.p{p.index}"
        options.setdefault("dvm_dir", os.path.join(self.sandbox, tag))
        lm = get_launcher(name, p.resources, options)
        lm.mono = self.clock.mono  # its deadlines on the agent's clock
        if lm.node_link:
            lm.link = self.nodes  # type: ignore[attr-defined]  # NodesLaunch's (None: no executors on this pilot; begin() says so)
        if name == "pmix":
            self.table.ended.append(lm)  # (a task's end lets its worlds' namespaces go)
        if lm.launch_retries or isinstance(lm, SupervisedLaunchMethod):
            if p.supervisor is None:
                p.supervisor = Supervisor(self.table, p)
                self.supervisors.append(p.supervisor)
            p.supervisor.watch(lm)
        return lm

    def spawn_aux(self, detail: str, argv, env, stdout=None, stderr=None) -> int:
        """Start a launcher's daemon through the core (its exit is reaped like any child)."""
        tag = detail.replace(" ", ".")
        stdout = stdout or os.path.join(self.sandbox, f"{tag}.out")
        stderr = stderr or os.path.join(self.sandbox, f"{tag}.err")
        return self.runner.spawn_aux(detail, argv, env, stdout, stderr)

    def changed(self, changed: list) -> None:
        """Instances that became ready have their rank notes listened to; the table does the
        rest (launch what waited, or close a partition)."""
        for lm in changed:
            if lm.state != READY:
                continue
            sup = lm.partition.supervisor
            notes = getattr(lm.method, "notes", None)
            if sup is not None and notes is not None and notes.fileno() not in self.notes:
                self.notes[notes.fileno()] = (sup, lm.method)
                self.poller.register(notes.fileno(), zmq.POLLIN)
        self.table.launchers_changed(changed)

    def forget(self, p: Partition) -> None:
        """A drained unit is gone: its launchers' notes are no longer listened to."""
        for lm in p.launchers.values():
            notes = getattr(lm.method, "notes", None)
            fd = notes.fileno() if notes is not None and not notes.closed else None
            if fd is not None and fd in self.notes:
                del self.notes[fd]
                self.poller.unregister(fd)
        if p.supervisor is not None and p.supervisor in self.supervisors:
            self.supervisors.remove(p.supervisor)
