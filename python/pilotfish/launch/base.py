"""The launch-method contract and the helpers every launcher shares.

A launch method turns (task, placement) into the processes the agent's executor spawns:
`build(task, slots, sandbox) -> [ProcSpec]`. The executor spawns each ProcSpec with
cwd = sandbox, the ProcSpec's env on top of the agent's environment, and stdin = /dev/null.

Environment of a rank, lowest precedence first:
  1. launcher defaults (e.g. OMPI_MCA_pml=ob1) -- tuning the task may override
  2. the task's own `environment`
  3. OMP_NUM_THREADS = cores of the rank, unless the task set it (a default, not placement)
  4. placement variables (PILOTFISH_*, CUDA_VISIBLE_DEVICES): override the task's, so a task
     never sees resources it was not given
  5. variables the launcher itself needs to work (OPAL_PREFIX, *_ALLOW_RUN_AS_ROOT)

Launchers that start every rank with one command (MPI launchers, srun, flux, jsrun, aprun)
cannot give each rank its own environment: the variables equal for all ranks go into the
launcher's environment, and the ones that differ (PILOTFISH_RANK, _NODE, _CORES, _GPUS,
CUDA_VISIBLE_DEVICES) are set by a short /bin/sh prelude that reads the launcher's rank
variable and picks the rank's line from a `case` table (see `rank_wrapped`). The rank order
is the launcher's: slots are grouped by node in order of first appearance (`by_node`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._wire import RankSlot, TaskSpec

# spawn(argv, env, stdout=None, stderr=None) -> pid: the executor facade handed to start()
# for launcher daemons (stdout/stderr: paths for the daemon's output, None for the default)
Spawn = Callable[..., int]

# A `case` table larger than this is left out: one argv string must stay under the kernel's
# MAX_ARG_STRLEN (128 KiB). Ranks then get PILOTFISH_RANK but not their per-rank variables
# (about 2,000 ranks on distinct cores and nodes; equal values never need the table).
RANK_TABLE_LIMIT = 96 * 1024


@dataclass
class ProcSpec:
    """One process for the executor: argv (argv[0] searched in PATH without a '/'), extra
    environment, the rank it runs (None: one process that starts all ranks), and for
    supervised launch methods the launcher's handle of this launch (what its rank notes and
    daemon-health reports refer to; see prrte.py), and the node whose executor spawns it
    (agent/node_link.py; None: the agent's own core). pmi_fd: a descriptor of the agent the
    process inherits as its 3 (its PMI connection, agent/pmi/; agent/task_runner.py).
    world: the PMI job this rank belongs to (launch method `pmi`): whoever spawns it serves
    its PMI connection (agent/pmi/worlds.py)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rank: int | None = None
    handle: Any = None
    node: str | None = None  # the node executor that spawns it (None: the agent's own core)
    pmi_fd: int | None = None
    world: PmiWorld | None = None


@dataclass(frozen=True)
class PmiWorld:
    """One task's PMI job (launch method `pmi`): its KVS name, its size, the node of every
    rank (names, in rank order) -- what each node's PMI server needs to serve its ranks."""

    kvsname: str
    size: int
    nodes: tuple[str, ...]


class LaunchError(ValueError):
    """A launch method cannot be used here or cannot launch this task."""


class LaunchMethod:
    """Base class: see the module docstring for the environment rules.

    resources: the agent's `Resources` (nodes of this launcher's partition; `.source`,
    `.emulated`). options: launcher-specific settings (paths of tools, flags), documented on
    each subclass.
    """

    name = "base"
    # Launch supervision (agent/supervisor.py), off for methods that need none -- direct pays
    # nothing for it:
    #   launch_retries  how often a launch that failed before the task ran is repeated
    #                   (options["launch_retries"] overrides; see retryable())
    # (a SupervisedLaunchMethod reports rank starts/ends (rank notes) and runs daemons whose
    # health is watched (prrte); its tasks are stopped by signalling their ranks, not the
    # launcher process)
    launch_retries = 0
    # The MPI world its ranks make (launch/mpi_check.py, mpi_route.py): "plain" (plain
    # processes, no world: direct, ssh, nodes), "mpich" / "openmpi" (one world of a program
    # of that MPI: it serves PMI / PMIx), "either" (it chooses per program: srun), None (not
    # known: nothing is checked)
    mpi_world: str | None = None
    # it launches through the pilot's node executors: the agent hands it their link
    # (agent/launching.py; its `link`)
    node_link = False

    @classmethod
    def starts_mpi(cls) -> bool:
        """Whether it makes one MPI world of a multi-rank task's ranks."""
        return cls.mpi_world not in (None, "plain")

    def __init__(self, resources: Any, options: dict | None = None):
        self.resources = resources
        self.options = dict(options or {})
        self.launch_retries = int(self.options.get("launch_retries", self.launch_retries))
        # the clock of every deadline a method keeps (daemon start-up, stop grace): the
        # agent gives its own (agent/clock.py) when it makes the method
        self.mono: Callable[[], float] = time.monotonic

    def start(self, spawn: Spawn | None = None) -> None:
        """Start daemons this method needs (e.g. a PRRTE DVM) and wait until they are ready;
        spawn(argv, env) -> pid. For standalone use: the agent calls begin() and polls."""
        self.begin(spawn)
        while not self.poll_ready():
            time.sleep(0.005)

    def begin(self, spawn: Spawn | None = None) -> None:
        """Start what start() starts without waiting for it (the agent's loop must never
        block: it polls poll_ready() while it serves everything else)."""

    def poll_ready(self) -> bool:
        """True once launches can be built; False while daemons start. Raises LaunchError
        when they cannot be started (after the method's own retries)."""
        return True

    def stop_begin(self) -> None:
        """Ask daemons to stop without waiting (stop() then waits): the agent stops every
        partition's instances at once."""

    def stop(self) -> None:
        """Stop what start() started. Safe to call twice, or without start()."""

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        raise NotImplementedError

    def retryable(self, exit_code: int, stderr: str | None = None) -> bool:
        """Did the launcher fail before the task ran, so that running it again is safe?

        stderr: the tail of the launch command's standard error when it was captured.
        """
        return False

    # -- helpers for subclasses -------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return getattr(self.resources, "source", None) in ("local", "declared")

    def _tool(self, key: str, default: str) -> str:
        """The command for a tool: options[key] if given, else its name (searched in PATH)."""
        return str(self.options.get(key) or default)

    def locate_tool(
        self, key: str, names: Sequence[str], is_right: Callable[[str], bool] | None = None
    ) -> str:
        """The command of one of its tools: options[key] if given (trusted as is), else the
        first of `names` found by `find_tool` that passes is_right(path), else names[0]
        (spawning it then fails with a reason that names it). Launch methods and their
        helpers (mpirun.find_openmpi_launcher) call it."""
        given = self.options.get(key)
        if given:
            return str(given)
        return find_tool(names, is_right) or names[0]


class Daemon:
    """One daemon instance of a supervised launch method (a PRRTE DVM), with what the
    supervisor counts on it. `state`: live (current), retiring (replaced: stops when its
    launches are gone), dead (stopped, or died on its own). `ready`: it accepts launches."""

    def __init__(self, number: int):
        self.number = number
        self.pid: int | None = None
        self.state = "live"
        self.ready = False
        self.launches = 0  # launches made against it
        self.running = 0  # of those, not yet reaped (kept by the supervisor)
        self.strikes = 0  # launches in a row that failed before running or hung
        self.last_start = 0.0  # monotonic: when a rank of it last started (or it did)


class LaunchHandle:
    """A supervised method's handle of one launch (ProcSpec.handle): the daemon it went to
    and the key its rank notes carry."""

    __slots__ = ("daemon", "key")

    def __init__(self, daemon: Daemon, key: str):
        self.daemon = daemon
        self.key = key


class SupervisedLaunchMethod(LaunchMethod):
    """The supervision protocol (agent/supervisor.py): a method whose launches go through
    daemons it runs, and whose ranks report their starts and ends (rank notes).

    Subclasses set the attributes and implement the methods below; the supervisor uses
    nothing else. Each ProcSpec of a launch carries a LaunchHandle."""

    recycle_after = 500  # launches per daemon before a fresh one replaces it
    hang_grace = 10.0  # s a launch may outlive all its ranks
    launch_timeout = 30.0  # s a launch may wait for its first rank while its daemon starts none
    max_strikes = 3  # launches in a row that failed before running before a daemon is wedged
    notes: Any = None  # its RankNotes (launch/rank_notes.py), or None without notes

    @property
    def daemons(self) -> list[Daemon]:
        """Every daemon not yet gone; the last one is current."""
        raise NotImplementedError

    def replace(self, old: Daemon, retire: bool) -> Daemon:
        """Take `old` out of service and return the current daemon -- a new one that is
        starting (poll_ready() says when it is ready) when old was current. retire: old
        finishes its launches first; else it is stopped now."""
        raise NotImplementedError

    def alive(self, d: Daemon) -> bool:
        raise NotImplementedError

    def reap_daemons(self) -> None:
        """Stop retiring daemons whose launches are gone, forget stopped ones (now and then)."""
        raise NotImplementedError

    def daemon_of_pid(self, pid: int) -> Daemon | None:
        return next((d for d in self.daemons if d.pid == pid), None)

    def signal_remote(self, host: str, pids: list[int], sig: int) -> bool:
        """Signal rank process groups on another node; False where there is no way."""
        return False


# -- finding tools ------------------------------------------------------------------------------


def tool_dirs() -> list[str]:
    """Where tools are looked for: PATH, then the bin directory of this Python environment
    (a venv's MPI wheels are there, and a venv's bin is often not on PATH when its python is
    run by its full path, as the batch script does)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for extra in (os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable)):
        if extra not in dirs:
            dirs.append(extra)
    return dirs


def find_tool(names: Sequence[str], is_right: Callable[[str], bool] | None = None) -> str | None:
    """Absolute path of the first executable named one of `names` (in that order of
    preference) in `tool_dirs()` for which is_right(path) holds; None if there is none."""
    dirs = tool_dirs()
    for name in names:
        for d in dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                if is_right is None or is_right(path):
                    return path
    return None


_PROBES: dict[tuple[str, ...], str] = {}


def probe(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 10.0) -> str:
    """stdout + stderr of a short command ('' if it cannot run), cached per argv.

    Only the text is used: inside the agent the core's reaper thread may collect the child
    first, and Python then reports exit status 0 whatever it was.
    """
    key = tuple(argv)
    if key not in _PROBES:
        try:
            r = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
                env={**os.environ, **(env or {})},
            )
            _PROBES[key] = (r.stdout or "") + (r.stderr or "")
        except (OSError, subprocess.TimeoutExpired):
            _PROBES[key] = ""
    return _PROBES[key]


# -- the task's own command -------------------------------------------------------------------


def needs_shell(task: TaskSpec) -> bool:
    return bool(task.shell or task.pre_exec or task.post_exec)


def command_text(task: TaskSpec) -> str:
    """The executable and arguments as one shell command.

    shell=True: the text as written (the user asked for shell syntax: pipes, $VARS, globs).
    Otherwise each word is quoted, so the shell runs exactly [executable, *arguments].
    """
    words = [task.executable, *task.arguments]
    if task.shell:
        return " ".join(words)
    return " ".join(shlex.quote(w) for w in words)


def payload_script(task: TaskSpec) -> str:
    """The task as a /bin/sh script: pre_exec lines, the command, post_exec lines.

    pre_exec lines run in the same shell (their exports reach the command); their failures do
    not stop the task. The script exits with the command's exit code, after post_exec ran. A
    shell=True command runs in a subshell when post_exec follows, so an `exit` in it cannot
    skip post_exec. Without post_exec a plain command is exec'd: no shell stays behind.
    """
    lines = list(task.pre_exec)
    cmd = command_text(task)
    if task.post_exec:
        lines.append(f"(\n{cmd}\n)" if task.shell else cmd)
        lines.append("_pf_rc=$?")
        lines.extend(task.post_exec)
        lines.append("exit $_pf_rc")
    else:
        lines.append(cmd if task.shell else f"exec {cmd}")
    return "\n".join(lines)


def payload_argv(task: TaskSpec) -> list[str]:
    """[executable, *arguments], or ['/bin/sh', '-c', script] when a shell is needed."""
    if needs_shell(task):
        return ["/bin/sh", "-c", payload_script(task)]
    return [task.executable, *task.arguments]


# -- placement environment --------------------------------------------------------------------


def unique_nodes(slots: Sequence[RankSlot]) -> list[str]:
    """Node names in rank order, each once."""
    return list(dict.fromkeys(s.node for s in slots))


def by_node(slots: Sequence[RankSlot]) -> list[RankSlot]:
    """Slots grouped by node, nodes in order of first appearance, ranks in order within a
    node: the order in which `--host h1:n1,h2:n2` style launchers number their ranks."""
    groups: dict[str, list[RankSlot]] = {}
    for s in slots:
        groups.setdefault(s.node, []).append(s)
    return [s for group in groups.values() for s in group]


def node_counts(slots: Sequence[RankSlot]) -> list[tuple[str, int]]:
    """[(node, ranks on it)] in order of first appearance."""
    counts: dict[str, int] = {}
    for s in slots:
        counts[s.node] = counts.get(s.node, 0) + 1
    return list(counts.items())


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))


def task_placement(task: TaskSpec, slots: Sequence[RankSlot]) -> dict[str, str]:
    """The placement variables that are the same for every rank."""
    return {
        "PILOTFISH_TASK_UID": task.uid,
        "PILOTFISH_RANKS": str(len(slots)),
        "PILOTFISH_NODELIST": slots[0].node if len(slots) == 1 else ",".join(unique_nodes(slots)),
    }


def rank_placement(slots: Sequence[RankSlot], rank: int) -> dict[str, str]:
    """The placement variables of one rank. CUDA_VISIBLE_DEVICES is "" for a rank without
    GPUs, so that it never uses GPUs it was not given."""
    s = slots[rank]
    gpus = _ids(s.gpus)
    return {
        "PILOTFISH_RANK": str(rank),
        "PILOTFISH_NODE": s.node,
        "PILOTFISH_NODE_INDEX": str(s.node_index),
        "PILOTFISH_CORES": _ids(s.cores),
        "PILOTFISH_GPUS": gpus,
        "CUDA_VISIBLE_DEVICES": gpus,
    }


def compose_env(
    task: TaskSpec,
    placement: Mapping[str, str],
    defaults: Mapping[str, str] | None = None,
    required: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Layer the environment as the module docstring says."""
    env = dict(defaults or {})
    env.update(task.environment)
    env.setdefault("OMP_NUM_THREADS", str(task.cores_per_rank))
    env.update(placement)
    env.update(required or {})
    return env


def placement_env(task: TaskSpec, slots: Sequence[RankSlot], rank: int | None) -> dict[str, str]:
    """The environment of one rank: task environment, then placement (which wins).

    rank None: only the variables every rank shares.
    """
    # (compose_env's layers without defaults or required ones, in its order: built per task)
    env = dict(task.environment)
    env.setdefault("OMP_NUM_THREADS", str(task.cores_per_rank))
    env.update(task_placement(task, slots))
    if rank is not None:
        env.update(rank_placement(slots, rank))
    return env


# -- one command for all ranks ------------------------------------------------------------------


def rank_prelude(
    task: TaskSpec, slots: Sequence[RankSlot], rank_expr: str, skip: Sequence[str] = ()
) -> tuple[list[str], dict[str, str]]:
    """Shell lines that give each rank of a one-command launch its own placement.

    slots must be in the launcher's rank order. rank_expr: shell expression that yields the
    rank inside a started process, e.g. '${PMIX_RANK:-$OMPI_COMM_WORLD_RANK}'. skip: rank
    variables the launcher sets itself (srun sets CUDA_VISIBLE_DEVICES when it binds GPUs).
    Returns (lines, placement): the variables equal across ranks are in placement; the lines
    export PILOTFISH_RANK and, from a `case` table, the variables that differ.
    """
    per_rank = [rank_placement(slots, r) for r in range(len(slots))]
    for p in per_rank:
        for k in skip:
            p.pop(k, None)
    placement = task_placement(task, slots)
    keys = [k for k in per_rank[0] if k != "PILOTFISH_RANK"]
    varying = [k for k in keys if any(p[k] != per_rank[0][k] for p in per_rank)]
    placement.update({k: per_rank[0][k] for k in keys if k not in varying})

    lines = [f'PILOTFISH_RANK="{rank_expr}"', "export PILOTFISH_RANK"]
    if varying:
        rows = [
            f"{r}) export " + " ".join(f"{k}={shlex.quote(p[k])}" for k in varying) + ";;"
            for r, p in enumerate(per_rank)
        ]
        if sum(len(row) + 1 for row in rows) <= RANK_TABLE_LIMIT:
            lines += ['case "$PILOTFISH_RANK" in', *rows, "esac"]
    return lines, placement


# rank_wrapped's `fail_fast`: after the task's command, a rank that ended with a status other
# than 0 says so on its stderr and runs the launcher's action (e.g. ends the launcher's step:
# hydra across hosts never ends the job for a rank's exit alone).
FAIL_FAST = (
    "_pf_rc=$?\n"
    'if [ "$_pf_rc" -ne 0 ]; then\n'
    "  printf 'pilotfish: rank %s exited with %s on %s: ending the job\\n' "
    '"$PILOTFISH_RANK" "$_pf_rc" "$(uname -n)" >&2\n'
    "  {action}\n"
    "fi\n"
    "exit $_pf_rc"
)


def rank_wrapped(
    task: TaskSpec,
    slots: Sequence[RankSlot],
    rank_expr: str,
    skip: Sequence[str] = (),
    fail_fast: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """argv and shared placement for a launcher that starts all ranks with one command.

    See rank_prelude for the arguments. Returns (argv, placement): one rank needs no prelude
    (its placement is all in the environment); more ranks get `/bin/sh -c` with the prelude
    before the task's own command. fail_fast (more ranks; shell text): the command runs in
    a subshell, and a rank that ends with a status other than 0 says so on stderr and runs
    this action (FAIL_FAST).
    """
    if len(slots) == 1:
        placement = task_placement(task, slots)
        placement.update({k: v for k, v in rank_placement(slots, 0).items() if k not in skip})
        return payload_argv(task), placement
    prelude, placement = rank_prelude(task, slots, rank_expr, skip)
    if needs_shell(task):
        body = payload_script(task)
    else:
        body = "exec " + command_text(task)
    if fail_fast:
        body = f"(\n{body}\n)\n" + FAIL_FAST.replace("{action}", fail_fast)
    return ["/bin/sh", "-c", "\n".join([*prelude, body])], placement
