"""Turns placed tasks into processes and exits into results, in batches.

Spawning and reaping are the Rust core's (`_core.Executor`: clone + exec, a reaper thread on
wait4(-1), no file descriptor per running task). This module builds the process specs through
the launch methods, keeps the key -> (task, rank) map, and reads captured output at exit.
"""

from __future__ import annotations

import errno
import math
import os
import signal as _signal
from typing import Any, Callable, NamedTuple

from .. import _events as E
from .._core import read_outputs as _core_read_outputs
from .._paths import task_cwd
from ..launch.base import SupervisedLaunchMethod
from .ports import Runner
from .supervisor import LaunchRecord
from .tasks import AgentTask

# bytes of stdout/stderr returned to the client per task (node_executor.py too)
OUTPUT_CAP = 1 << 20
UNREACHABLE = -errno.EHOSTUNREACH  # a spawn result: the node's executor is lost or not up
REASON_TAIL = 300  # characters of stderr quoted in a failure reason


def spawn_failure(argv0: str, stdout: Any, stderr: Any, info: Any, errno: int) -> str:
    """Why a process could not be spawned. The core opens a process's output files in the
    child and reports only the errno: when a user's stdout / stderr path is what failed (its
    directory missing, a directory in its place, not writable), say so, naming the path --
    else it is the executable. Looked at only after a failure (no cost to a spawn)."""
    for which, path in (("stdout", stdout), ("stderr", stderr)):
        if not isinstance(path, str):
            continue
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            why = "its directory does not exist"
        elif os.path.isdir(path):
            why = "it is a directory"
        elif not os.access(path if os.path.exists(path) else parent, os.W_OK):
            why = "it cannot be written here"
        else:
            continue
        return f"cannot open {which} {path!r}: {why} ({info}, errno {errno})"
    return f"cannot execute {argv0!r}: {info} (errno {errno})"


class Proc(NamedTuple):
    """One process to spawn: what the core takes (key, argv, env ["K=V"], cwd, stdout, stderr,
    empty: its spool file is known empty, pass_fd: a descriptor it inherits as its 3) and
    where and what it is (node: the node executor that spawns it, None: this agent's core;
    rank; world: the PMI world it is a rank of, launch method `pmi`)."""

    key: int
    argv: list[str]
    env: list[str] | None
    cwd: str | None
    stdout: Any
    stderr: Any
    empty: bool = False
    pass_fd: int | None = None
    node: str | None = None
    rank: int = 0
    world: Any = None

    def core(self) -> tuple:
        """The Rust core's spec (its 8th field only when a descriptor is passed)."""
        return tuple(self[:7]) if self.pass_fd is None else tuple(self[:8])

    def remote(self) -> tuple:
        """A node executor's spec (_node_wire.py: outputs True are captured there)."""
        return tuple(self[:6])


class TaskRunner(Runner):
    """Launch methods + the core executor: spawn placed tasks, collect finished ones
    (ports.Runner)."""

    def __init__(
        self,
        core_executor: Any,
        tasks_dir: str,
        profile: bool = True,
        spool_dir: str | None = None,
        clock: Any = None,
    ):
        self.core = core_executor
        self.profile = profile  # build exec_ok / exec_stop events (off: not even the tuples)
        self.clock = clock
        self.tasks_dir = tasks_dir
        # Captured stdout/stderr go to spool files that are reused, not to new files per
        # task: creating a file costs 25 us of kernel time here, and now and then 500 us
        # (measured), twice per task -- the whole of the capture tax. A spool file is reused
        # only when nothing else has it open any more (a write lease says so: a process the
        # task left behind may still write to it); otherwise it is retired.
        self.spool_dir = spool_dir or os.path.join(os.path.dirname(tasks_dir), "spool")
        os.makedirs(self.spool_dir, mode=0o700, exist_ok=True)
        self._spool_free: list[int] = []
        # Numbers go on after any an earlier agent of this pilot left (a resumed pilot):
        # their files may hold output, and only free-list files are known empty.
        self._spool_next = max(
            (
                int(f.split(".", 1)[0])
                for f in os.listdir(self.spool_dir)
                if f.split(".", 1)[0].isdigit()
            ),
            default=0,
        )
        self._procs: dict[int, tuple[AgentTask, int]] = {}  # spawn key -> (task, rank)
        self._next_key = 1 << 40  # process keys live apart from placement keys
        self.aux: dict[int, str] = {}  # spawn key -> name of an auxiliary daemon
        self.signal_ranks: Callable[[AgentTask, int], None] | None = None  # see kill()
        # on_spawn([(task, [process keys])]): told before a batch is spawned (the journal
        # records which keys are whose, so the core's exit log can be read after a crash)
        self.on_spawn: Callable[[list[tuple[AgentTask, list[int]]]], None] | None = None
        # MPI tasks' PMI worlds (pmi/worlds.PmiWorlds), launch method `pmi`
        self.pmi: Any = None

    # -- spawning ---------------------------------------------------------------------------
    def launch(
        self, tasks: list[AgentTask]
    ) -> tuple[list[AgentTask], list[tuple[float, str, str, Any]]]:
        """Spawn every process of these tasks in one batch.

        Returns (tasks that failed to launch, events). A task fails to launch when its
        launcher cannot build it or any of its processes cannot be spawned.
        """
        specs: list[Proc] = []
        owners: list[tuple[AgentTask, int]] = []
        failed: list[AgentTask] = []
        worlds: list[tuple[AgentTask, int, int]] = []  # (task, its first spec, its end)
        for t in tasks:
            try:
                spec_list = self._build(t)
            except Exception as e:  # noqa: BLE001 -- a launcher refusing this task fails it alone
                t.reason = f"launch failed: {e}"
                failed.append(t)
                continue
            first = len(specs)
            for s in spec_list:
                key = self._next_key
                self._next_key += 1
                specs.append(Proc(key, *s[1:]))  # (s with its key: _replace costs 2x)
                owners.append((t, s.rank))
            if spec_list and spec_list[0].world is not None:
                worlds.append((t, first, len(specs)))
        starts: dict[str, list] = {}
        if worlds:
            specs, owners = self._serve_worlds(worlds, specs, owners, starts, failed)
        events: list[tuple[float, str, str, Any]] = []
        if not specs:
            return failed, events
        if self.on_spawn is not None:
            keys_of: dict[AgentTask, list[int]] = {}
            for (t, _), s in zip(owners, specs):
                keys_of.setdefault(t, []).append(s.key)
            self.on_spawn(list(keys_of.items()))
        results = self._spawn(specs, starts)
        if worlds:  # the ranks hold their ends now: the agent's copies go
            self.pmi.spawned(list({s.world.kvsname for s in specs if s.world is not None}))
        procs = self._procs
        profile = self.profile
        for (t, rank), spec, (pid, info) in zip(owners, specs, results):
            if pid == 0:  # sent to its node's executor: running (its pid comes later)
                procs[spec.key] = (t, rank)
                if t.rkeys is None:
                    t.rkeys = []
                t.rkeys.append(spec.key)
                t.running += 1
            elif pid > 0:
                procs[spec.key] = (t, rank)
                t.procs.append(pid)
                t.running += 1
                if profile:
                    events.append((info, t.spec.uid, E.EXEC_OK, str(pid)))
            elif pid == UNREACHABLE and t.reason is None:
                # its node (a rank's) was lost before it started: it never ran, it goes back to
                # the queue -- at once, or once the ranks that did start are killed and reaped
                t.reason = info
                t.kill_reason = (E.REQUEUE, info)
                failed.append(t)
            elif t.reason is None:
                t.reason = spawn_failure(spec.argv[0], spec.stdout, spec.stderr, info, -pid)
                failed.append(t)
            if pid < 0 and spec.world is not None and spec.node is None:
                self.pmi.local.unspawned(spec.world.kvsname, spec.key)
        for t in failed:
            if t.procs:  # some ranks started: stop them, the task fails as a whole
                self.core.kill(t.procs, _signal.SIGKILL)
            if t.rkeys:
                self._kill_away(t.rkeys, _signal.SIGKILL)
            if self.pmi is not None:  # its world, if any: forgotten, or not served any more
                if not t.procs and not t.rkeys:
                    self.pmi.ended(t)
                else:
                    self.pmi.abandon(t, t.reason or "launch failed")
        return failed, events

    def _serve_worlds(
        self, worlds: list, specs: list[Proc], owners: list, starts: dict, failed: list
    ) -> tuple[list[Proc], list]:
        """PMI worlds for the `pmi` tasks among these specs: ranks spawned here get their
        descriptor (pass_fd), each other node a PmiStart in its Spawn frame. A world the
        agent's server cannot take fails its task alone."""
        drop: set[int] = set()
        for t, a, b in worlds:
            ranks = [(specs[i].rank, specs[i].key, specs[i].node) for i in range(a, b)]
            try:
                fds, st = self.pmi.prepare(t, specs[a].world, ranks, t.lm.init_timeout)
            except (ValueError, OSError) as e:
                t.reason = f"launch failed: cannot serve its PMI world: {e}"
                failed.append(t)
                drop.update(range(a, b))
                continue
            for i in range(a, b):
                fd = fds.get(specs[i].key)
                if fd is not None:
                    specs[i] = specs[i]._replace(pass_fd=fd)
            for node, start in st.items():
                starts.setdefault(node, []).append(start)
        if drop:
            keep = [i for i in range(len(specs)) if i not in drop]
            specs, owners = [specs[i] for i in keep], [owners[i] for i in keep]
        return specs, owners

    def _spawn_here(self, specs: list[tuple]) -> list[tuple]:
        try:
            return self.core.spawn_batch(specs)
        except Exception:  # noqa: BLE001 -- a spec the core cannot take (not UTF-8): one by one
            return self._spawn_one_by_one(specs)

    def _spawn(self, specs: list[Proc], starts: dict[str, list]) -> list[tuple]:
        """Spawn these processes (the core's answers: (pid, t) or (-errno, why)); starts: the
        PMI worlds of other nodes' ranks (a NodeRunner's: node_runner.py)."""
        return self._spawn_here([s.core() for s in specs])

    def _kill_away(self, keys: list[int], sig: int) -> None:
        """Signal processes other hosts' executors run (a NodeRunner's: none here)."""

    def _more_exits(self, exits: list, events: list) -> list:
        """The core's exits, and any a NodeRunner's node executors sent."""
        return exits

    def _spawn_one_by_one(self, specs: list[tuple]) -> list[tuple]:
        out = []
        for spec in specs:
            try:
                out.extend(self.core.spawn_batch([spec]))
            except Exception as e:  # noqa: BLE001 -- that one spec fails alone
                out.append((-22, f"{type(e).__name__}: {e}"))  # EINVAL: fails its task alone
        return out

    def _build(self, t: AgentTask) -> list[Proc]:
        """The processes of a task (keys come later, in launch()): those of its ranks on other
        nodes go to their node executors, which capture their outputs; those here write to
        this agent's spool (a task's first process to its spool file, the others beside it)."""
        spec = t.spec
        launcher = t.lm  # its partition's instance, ready (the agent checked)
        t.rkeys = None
        cwd = task_cwd(spec, spec.uid, self.tasks_dir)
        if spec.sandbox:
            os.makedirs(cwd, exist_ok=True)
        elif cwd != self.tasks_dir:  # a directory of its own: same names never collide
            try:
                os.mkdir(cwd)
            except FileExistsError:  # a retry, a relaunch, or input staging made it
                pass
        t.cwd = cwd
        procs = launcher.build(spec, t.slots, cwd)
        if launcher.launch_retries or isinstance(launcher, SupervisedLaunchMethod):
            if t.launch is None:
                t.launch = LaunchRecord()
            t.launch.new_attempt(
                procs[0].handle if procs else None,
                self.clock.mono() if self.clock is not None else None,
            )
        local = sum(1 for p in procs if p.node is None)
        out = err = ao = ae = None
        empty = False
        if local:
            # A spool file from the free list is empty (read_outputs emptied every file it
            # read): the child opens it without O_TRUNC. Truncated as before: a new number
            # (creating costs more anyway), a spool kept for a retry (the failed attempt's
            # output), and tasks of several processes (an attempt with fewer ranks than an
            # earlier one leaves the higher ranks' files unread).
            if (spec.stdout is True or spec.stderr is True) and t.spool < 0:
                empty = bool(self._spool_free)
                t.spool = self._spool_free.pop() if empty else self._new_spool()
            out = self._output_path(t.spool, spec.stdout, "out", cwd)
            err = self._output_path(t.spool, spec.stderr, "err", cwd)
            t.out_paths = (
                out if spec.stdout is True else None,
                err if spec.stderr is True else None,
            )
            t.extra_outs = local - 1 if t.out_paths != (None, None) else 0
            empty = (
                empty
                and len(procs) == 1
                and isinstance(spec.stdout, bool)
                and isinstance(spec.stderr, bool)
            )  # (a user's own path is truncated, as always)
        else:
            t.out_paths = (None, None)
            t.extra_outs = 0
        if local < len(procs):  # captured by their node's executor
            ao = True if spec.stdout is True else self._output_path(-1, spec.stdout, "out", cwd)
            ae = True if spec.stderr is True else self._output_path(-1, spec.stderr, "err", cwd)
        built = []
        i = 0
        for p in procs:
            rank = p.rank if p.rank is not None else 0
            env = [f"{k}={v}" for k, v in p.env.items()] if p.env else None
            if p.node is not None:
                if p.pmi_fd is not None:  # (its node executor gives a rank its own)
                    raise ValueError(
                        f"pmi_fd={p.pmi_fd} for rank {p.rank} on node {p.node}: "
                        "a descriptor of the agent cannot reach another node"
                    )
                built.append(Proc(0, p.argv, env, cwd, ao, ae, False, None, p.node, rank, p.world))
                continue
            o, e = out, err
            if i and spec.stdout is True:  # extra processes of a task write beside rank 0
                o = f"{out}.{i}"
            if i and spec.stderr is True:
                e = f"{err}.{i}"
            i += 1
            # pmi_fd: its PMI connection, which the core passes as the child's descriptor 3
            built.append(Proc(0, p.argv, env, cwd, o, e, empty, p.pmi_fd, None, rank, p.world))
        return built

    def _new_spool(self) -> int:
        self._spool_next += 1
        return self._spool_next

    def read_outputs(self, tasks: list[AgentTask]) -> list[tuple[str | None, str | None]]:
        """The captured (stdout, stderr) of finished tasks, capped, read by the core in one
        call; their spool files go back to the pool (or are retired, if something still
        has them open)."""
        return self._read_here(tasks)

    def _read_here(self, tasks: list[AgentTask]) -> list[tuple[str | None, str | None]]:
        rows = _core_read_outputs([t.out_paths for t in tasks], OUTPUT_CAP)
        if any(t.extra_outs for t in tasks):
            rows = self._with_other_ranks(tasks, rows)
        free = self._spool_free
        out = []
        for t, (stdout, stderr, reusable) in zip(tasks, rows):
            if t.spool >= 0:
                if reusable:
                    free.append(t.spool)
                t.spool = -1
                t.out_paths = (None, None)
            out.append((stdout, stderr))
        return out

    def _with_other_ranks(self, tasks: list[AgentTask], rows: list) -> list:
        """Append the captured output of every process of a task after its first (direct
        launch runs a process per rank), in rank order: all ranks' output, merged, capped
        (stdout keeps its head, stderr its tail)."""
        pairs, owners = [], []
        for k, t in enumerate(tasks):
            o, e = t.out_paths
            for i in range(1, t.extra_outs + 1):
                pairs.append((f"{o}.{i}" if o else None, f"{e}.{i}" if e else None))
                owners.append(k)
        extra = _core_read_outputs(pairs, OUTPUT_CAP)
        rows = [list(r) for r in rows]
        for k, (so, se, ok) in zip(owners, extra):
            r = rows[k]
            if so:
                r[0] = ((r[0] or "") + so)[:OUTPUT_CAP]
            if se:
                r[1] = ((r[1] or "") + se)[-OUTPUT_CAP:]
            r[2] = r[2] and ok
        for t in tasks:
            t.extra_outs = 0
        return [tuple(r) for r in rows]

    def _output_path(self, spool: int, mode: bool | str, ext: str, cwd: str) -> str | None:
        if mode is True:
            return os.path.join(self.spool_dir, f"{spool}.{ext}")
        if mode is False:
            return None
        return mode if os.path.isabs(mode) else os.path.join(cwd, mode)

    def spawn_aux(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
        fd3: int | None = None,
    ) -> int:
        """Start a daemon (e.g. a PRRTE DVM) through the core, so its exit is reaped too;
        fd3: a descriptor of ours it inherits as its 3 (the node executors' step secret)."""
        key = self._next_key
        self._next_key += 1
        envl = [f"{k}={v}" for k, v in env.items()] if env else None
        spec = (key, argv, envl, None, stdout, stderr) + (() if fd3 is None else (False, fd3))
        ((pid, info),) = self.core.spawn_batch([spec])
        if pid < 0:
            raise OSError(-pid, f"cannot start {name}: {info}")
        self.aux[key] = name
        return pid

    # -- reaping ----------------------------------------------------------------------------
    def reap(
        self, block_s: float | None = None
    ) -> tuple[list[AgentTask], list[tuple], list[tuple[str, int, int, int]]]:
        """Collect exits (waiting up to block_s for one, if given).

        Returns (finished tasks, events, aux exits (name, pid, code, signal))."""
        finished: list[AgentTask] = []
        events: list[tuple] = []
        aux_exits = []
        procs = self._procs
        exits = self.core.reap() if block_s is None else self.core.wait(block_s)
        profile = self.profile
        exits = self._more_exits(exits, events)
        pmi = self.pmi if self.pmi is not None and self.pmi.of_task else None
        for key, pid, code, sig, t_exit, _ut, _st, _rss in exits:
            owner = procs.pop(key, None)
            if owner is None:
                name = self.aux.pop(key, None)
                if name is not None:
                    aux_exits.append((name, pid, code, sig))
                continue
            t, rank = owner
            t.running -= 1
            if sig:
                if t.signal is None:
                    t.signal = sig
            elif code and not t.exit_code:
                t.exit_code = code
            if pmi is not None and t.spec.uid in pmi.of_task:  # a rank of a PMI world
                pmi.local.reaped(key)
                pmi.rank_exit(t, rank, code, sig)  # (a bad end: the other ranks are killed)
                if not t.running:
                    pmi.finished(t)
            elif (code or sig) and getattr(t.lm, "names_ranks", False):
                self._rank_failed(t, rank, code, sig)
            if profile:
                events.append((t_exit, t.spec.uid, E.EXEC_STOP, str(-sig if sig else code)))
            if t.running == 0:
                if t.exit_code is None:
                    t.exit_code = -t.signal if t.signal else 0  # as subprocess does
                finished.append(t)
        return finished, events, aux_exits

    def _rank_failed(self, t: AgentTask, rank: int, code: int, sig: int) -> None:
        """A rank of a launch method that `names_ranks` (pmix: one MPI world) ended badly: the
        task fails naming it (the first one), and its other ranks, which would wait for it
        forever, are killed."""
        if t.reason is not None or t.kill_reason is not None:
            return  # (a second end, or one we caused: the first says why)
        how = f"was killed by {signal_name(sig)}" if sig else f"exited with code {code}"
        t.reason = f"rank {rank} {how}"
        if t.running:
            t.reason += "; the task's other ranks were killed"
            self.kill([t], _signal.SIGKILL)

    def kill(self, tasks: list[AgentTask], sig: int = _signal.SIGTERM) -> None:
        """Signal the tasks' process groups. Tasks of supervised launch methods (prrte) are
        signalled through their ranks (`signal_ranks`, set by the agent's supervisor): their
        launcher process ignores SIGTERM and its death alone leaves the ranks running; it
        gets only SIGKILL."""
        pids = []
        signal_ranks = self.signal_ranks
        away: list[int] = []
        for t in tasks:
            if t.rkeys:
                away.extend(t.rkeys)
            if not t.procs:
                continue
            if (
                signal_ranks is not None
                and t.launch is not None
                and isinstance(t.lm, SupervisedLaunchMethod)
            ):
                signal_ranks(t, sig)
                if sig != _signal.SIGKILL:
                    continue  # the launcher ends by itself once its ranks are gone
            pids.extend(t.procs)
        if pids:
            self.core.kill(pids, sig)
        if away:
            self._kill_away(away, sig)

    def next_event(self) -> float:
        """Real processes end when the kernel says: nothing is known in advance."""
        return math.inf

    @property
    def running(self) -> int:
        return len(self._procs)


def signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
