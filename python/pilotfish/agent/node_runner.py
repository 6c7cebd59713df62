"""The Runner of a pilot whose nodes are other hosts (ports.Runner): TaskRunner's spawning and
reaping on the agent's own node, and the node executors (nodes.NodeLink) for every other node.

    launch: processes for this host -> the core; the others -> their node's executor, one
            Spawn frame per node per round (with the PMI worlds it serves ranks of)
    reap:   the core's exits, and what the executors sent since (spawn results, exits, the
            verdicts of lost nodes) -- one stream of exit rows for the task table
    outputs: captured here for the ranks here, sent with the exit by the executors for theirs
    kill:   the core for processes here, the executors for theirs
    aux:    the launcher step that starts the executors gets the pipe holding its step secret
            as its descriptor 3 (NodeLink.start; agent/node_keys.py)

A process sent away is running from the agent's point of view (pid 0 until its node reports
the spawn); one that never started there (its node lost or fenced before) sends its task back
to the queue once every process of the task is accounted for.
"""

from __future__ import annotations

from typing import Any

from .. import _events as E
from .task_runner import OUTPUT_CAP, UNREACHABLE, Proc, TaskRunner
from .tasks import AgentTask


class NodeRunner(TaskRunner):
    def __init__(self, link: Any, *args: Any, **kw: Any):
        """link: the node executors (nodes.NodeLink); the rest: TaskRunner's."""
        super().__init__(*args, **kw)
        self.link = link

    def spawn_aux(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
        fd3: int | None = None,
    ) -> int:
        """TaskRunner's; while NodeLink.start starts a step of executors (step_stdin set),
        that step inherits the step secret's pipe as its descriptor 3."""
        if fd3 is None:
            fd3 = self.link.step_stdin
        return super().spawn_aux(name, argv, env, stdout, stderr, fd3)

    def _spawn(self, specs: list[Proc], starts: dict[str, list]) -> list[tuple]:
        """Specs for this host to the core, the others to their nodes' executors: (pid, t) /
        (-errno, why) as the core answers, (0, node) when sent away, (UNREACHABLE, why) when
        the node's executor is lost or not up."""
        here: list[int] = []
        away: dict[str, list[int]] = {}
        for i, s in enumerate(specs):
            if s.node is not None:
                away.setdefault(s.node, []).append(i)
            else:
                here.append(i)
        results: list[Any] = [None] * len(specs)
        if here:
            for i, r in zip(here, self._spawn_here([specs[i].core() for i in here])):
                results[i] = r
        for node, idx in away.items():
            why = self.link.spawn(node, [specs[i].remote() for i in idx], starts.get(node, ()))
            for i in idx:
                results[i] = (0, node) if why is None else (UNREACHABLE, why)
        return results

    def _kill_away(self, keys: list[int], sig: int) -> None:
        self.link.kill(keys, sig)

    def _more_exits(self, exits: list, events: list) -> list:
        """Spawn results and exits the node executors sent, merged into the core's: a
        process that could not be spawned there, or whose node was lost, ends with why."""
        spawned, away = self.link.take()
        if not spawned and not away:
            return exits
        procs = self._procs
        exits = list(exits)
        now = self.clock.now() if self.clock is not None else 0.0
        for key, pid, info in spawned:
            owner = procs.get(key)
            if owner is None:
                continue
            t = owner[0]
            if pid > 0:
                if self.profile:
                    events.append((info, t.spec.uid, E.EXEC_OK, str(pid)))
                continue
            if pid == UNREACHABLE and t.kill_reason is None:
                # it never started there (its node was lost, or fenced itself, before): back
                # to the queue once all its processes are accounted for, as in launch()
                t.kill_reason = (E.REQUEUE, info)
            elif t.reason is None:
                # the executor says why, judged on its host (node_executor.py:
                # task_runner.spawn_failure there -- the output path that failed, or the executable)
                t.reason = str(info)
            exits.append((key, 0, 127, 0, now, 0.0, 0.0, 0))
        for row in away:  # (nodes.Ended)
            if row.reason is not None:
                owner = procs.get(row.key)
                if owner is not None and owner[0].reason is None:
                    owner[0].reason = row.reason
            exits.append(row.core())
        return exits

    def read_outputs(self, tasks: list[AgentTask]) -> list[tuple[str | None, str | None]]:
        """Outputs of finished tasks: captured here, and/or sent by the node executors with
        their exits (a PMI world's ranks: here first, then the others)."""
        if not any(t.rkeys for t in tasks):
            return self._read_here(tasks)
        here = [t for t in tasks if not t.rkeys or t.spool >= 0 or t.out_paths != (None, None)]
        mine = dict(zip(here, self._read_here(here))) if here else {}
        outputs = self.link.outputs
        out = []
        for t in tasks:
            so, se = mine.get(t, (None, None))
            for k in t.rkeys or ():
                o, e = outputs.pop(k, (None, None))
                if o:
                    so = ((so or "") + o)[:OUTPUT_CAP]
                if e:
                    se = ((se or "") + e)[-OUTPUT_CAP:]
            out.append((so, se))
        return out
