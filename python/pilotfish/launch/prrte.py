"""prrte: persistent PRRTE DVMs; one `prterun --dvm` per task.

start() starts a DVM through the agent's executor:
    prte --hostfile D/N/hostfile --report-uri D/N/dvm.uri --report-pid D/N/dvm.pid \
        > D/N/prte.log 2> D/N/prte.err
and waits (bounded) for "DVM ready" in its output and the URI file. build():
    prterun --dvm uri:file:D/N/dvm.uri -n R --map-by slot --bind-to none --host h1:n1,...
            -x VAR ... <payload>
stop(): SIGTERM to every DVM, SIGKILL to its process group after a grace period; the PID is
checked against /proc/PID/comm first (PIDs wrap quickly here).

Facts this relies on (shared/notes/substrates.md, Open MPI 5.0.9 wheel, and measured here):
  - the wheel has no `prun`/`pterm`: `prterun --dvm uri:file:...` stands in for prun;
  - `--map-by slot --bind-to none` on every prterun (as DVM defaults some launches hang);
  - the DVM never queues: a job that does not fit exits 77 at once; a missing executable
    gives 75; task exit codes pass through;
  - 0.5-2.5 % of prterun calls exit 1 "failed to initialize" without running the task (safe
    to retry) or hang after the task ran (missed job-end event); a DVM can wedge entirely;
    a DVM spanning two Slurm nodes (prteds through srun), driven by prterun one job after
    another from a batch script, missed the job end of 10-30 % of jobs here and kept the
    hung job's slots (cf. openpmix/prrte #2568). The agent's own DVM in the same kind of
    allocation ran 100 two-node tasks with 3 relaunches and 1 DVM replaced when it waited
    for the URI file only, and 400 with none once it waited for "DVM ready" too;
  - ~0.5 % of DVM starts die at once ("The PMIx server's listener thread failed to start"):
    started again (start_attempts);
  - prterun ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT, and SIGKILL of prterun leaves the
    job's ranks running in the DVM. It forwards SIGUSR1/SIGUSR2 (not SIGTERM) -- but to the
    ranks of EVERY job in the DVM, not just its own: useless for stopping one task. A task is
    stopped by signalling its ranks' process groups, whose pids their start notes carry
    (`signal_ranks`; the supervisor does it);
  - a DVM killed with SIGKILL leaves its local ranks running (reparented to init); its
    prterun clients exit 195;
  - DVM memory grows ~90 KB per launch: long-lived DVMs are recycled.
  - inside Slurm, prte needs PRTE_MCA_ras=^slurm and SLURM_OVERLAP=1 (see mpirun.py).
Several DVMs side by side work, each with its own slot budget -- one per partition, and a
fresh one beside an old one that is being recycled or replaced.

Instances: a `Dvm` is one DVM (its own directory D/N, process, counters). The launcher builds
against its current DVM; the agent's supervisor (agent/supervisor.py) decides when to replace
it (wedged, died, recycled) and calls `replace()`, which starts a new current DVM; the old one
stops once its launches are gone (`retire`) or at once (`discard`).

Rank notes (rank_notes.py): with bash available, each rank runs inside a bash wrapper that
reports its start and end to the agent over UDP; that is how the supervisor knows whether a
failed launch ran, and when a prterun outlives its ranks. The notes' token (their proof of
origin) goes in the ranks' environment, exported by name (`-x PILOTFISH_NOTE_TOKEN`). Without
bash (or notes=False) the payload is run as before and only stderr evidence makes a launch
retryable.

One world: a multi-rank task whose program is of the MPICH ABI (it speaks PMI, not PMIx: its
ranks would not form one world here) is refused at build, before it reaches the DVM; a Python
program that did not choose its library gets MPI4PY_LIBMPI=<its prefix>/lib/libmpi.so.40,
exported by name like every task variable (launch/mpi_route.py).

Slots: the hostfile gives each node its core count (an emulated machine: `localhost
slots=<all declared cores>`). Each rank takes one PRRTE slot whatever its cores, so the DVM
never runs out before the pilot's own accounting does.

options: prte, prterun (commands; default: found in PATH or this Python environment's bin),
prefix (see mpirun), dvm_dir (default: a new temporary directory), start_attempts (times a DVM
that dies before it is ready is started, 3), start_timeout (s a DVM may take to start, 30),
stop_grace (s, 5), notes (bool, default True), launch_retries (5),
recycle_after (launches per DVM before a fresh one replaces it, 500), hang_grace (s a prterun
may outlive all its ranks, 10), launch_timeout (s a launch may wait for its first rank while
its DVM starts nothing at all, 30), max_strikes (launches in a row that failed before running
or hung before a DVM counts as wedged, 3).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time

from .._wire import RankSlot, TaskSpec
from .base import (
    Daemon,
    LaunchError,
    LaunchHandle,
    ProcSpec,
    SupervisedLaunchMethod,
    Spawn,
    by_node,
    command_text,
    compose_env,
    needs_shell,
    payload_script,
    rank_prelude,
    rank_wrapped,
)
from .mpi_check import one_world
from .mpirun import MCA_DEFAULTS, OMPI_RANK, PRRTE_IN_SLURM, host_list, openmpi_env, prted_nodelist
from .rank_notes import RankNotes, address_from_uri

log = logging.getLogger("pilotfish.launch")

READY = "DVM ready"  # what prte prints once all its daemons are up
EXIT_DID_NOT_FIT = 77  # the DVM had no free slots for the job: it did not run
EXIT_NO_EXECUTABLE = 75  # not retryable: the same launch fails again


def proc_status(pid: int) -> tuple[str, str] | None:
    """(name, state) of a process from /proc/PID/stat, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces or parentheses; the state follows the last ')'
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :][:1]


def process_alive(pid: int, comm: str | None = None) -> bool:
    """Is pid a live (not zombie) process, named comm when comm is given?"""
    status = proc_status(pid)
    if status is None or status[1] in ("Z", "X"):
        return False
    return comm is None or status[0] == comm[:15]


class DiedBeforeReady(LaunchError):
    """prte exited before it was ready: nothing ran on it, starting it again is safe."""


class Dvm(Daemon):
    """One PRRTE DVM (see Daemon for state and counters): its directory D/N and files."""

    def __init__(self, number: int, directory: str, now: float | None = None):
        super().__init__(number)
        self.dir = directory
        self.uri_file = os.path.join(directory, "dvm.uri")
        self.log = os.path.join(directory, "prte.log")  # stdout: says "DVM ready"
        self.err = os.path.join(directory, "prte.err")  # apart: the executor opens with O_TRUNC
        self.last_start = time.monotonic() if now is None else now  # (the launcher's clock)
        self.kill_at: float | None = None  # terminating: SIGKILL after this
        self.attempt = 0  # starts made (one that dies before it is ready is started again)
        self.start_deadline = 0.0  # monotonic: not ready by then -> it cannot be started

    def __repr__(self) -> str:
        return f"<DVM {self.number} pid {self.pid} {self.state}{'' if self.ready else ' starting'}>"


class Prrte(SupervisedLaunchMethod):
    name = "prrte"
    mpi_world = "openmpi"  # (mpi_abi.OPENMPI)
    # > max_strikes: a task whose launches failed on a DVM that went bad gets launches on the
    # fresh DVM that replaces it
    launch_retries = 5

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.prte = self.locate_tool("prte", ("prte",))
        self.prterun = self.locate_tool("prterun", ("prterun",))
        self.required_env = openmpi_env(self.prterun, self.options.get("prefix"))
        if getattr(resources, "source", None) == "slurm":
            self.required_env.update(PRRTE_IN_SLURM)
        self.comm = os.path.basename(self.prte)  # the DVM's name in /proc/PID/comm
        self.dvm_dir = self.options.get("dvm_dir")
        opt = self.options.get
        self.recycle_after = int(opt("recycle_after", 500))
        self.hang_grace = float(opt("hang_grace", 10.0))
        self.launch_timeout = float(opt("launch_timeout", 30.0))
        self.max_strikes = int(opt("max_strikes", 3))
        self.bash = shutil.which("bash") if opt("notes", True) else None
        self.notes: RankNotes | None = None
        self.dvms: list[Dvm] = []  # every DVM not yet gone; the last one is current
        self._spawn: Spawn | None = None
        self._launch_seq = 0
        if self.dvm_dir:  # the first DVM's place is known before start() (for build checks)
            self.dvms.append(Dvm(1, os.path.join(self.dvm_dir, "1"), self.mono()))

    # -- the current DVM ---------------------------------------------------------------------
    @property
    def daemons(self) -> list[Dvm]:  # type: ignore[override]  # Dvm: the supervised daemon, narrowed
        return self.dvms

    @property
    def dvm(self) -> Dvm:
        if not self.dvms or self.dvms[-1].state != "live":
            raise LaunchError("launcher 'prrte': the DVM was not started (call start())")
        if not self.dvms[-1].ready:
            raise LaunchError("launcher 'prrte': the DVM is still starting")
        return self.dvms[-1]

    @property
    def uri_file(self) -> str:
        return self.dvm.uri_file

    @property
    def pid(self) -> int | None:
        return self.dvms[-1].pid if self.dvms else None

    def hostfile_text(self) -> str:
        if self.emulated:
            return f"localhost slots={sum(n.cores for n in self.resources.nodes)}\n"
        return "".join(f"{n.name} slots={n.cores}\n" for n in self.resources.nodes)

    # -- starting and stopping -----------------------------------------------------------------
    def begin(self, spawn: Spawn | None = None) -> None:
        """Spawn the first DVM and return at once (poll_ready() says when it is ready)."""
        if spawn is None:
            raise LaunchError("launcher 'prrte' starts a DVM: start() needs the spawn callable")
        self._spawn = spawn
        if not self.dvm_dir:
            self.dvm_dir = tempfile.mkdtemp(prefix="pilotfish-dvm-")
        first = self.dvms[0] if self.dvms else Dvm(1, os.path.join(self.dvm_dir, "1"), self.mono())
        self.dvms = [first]
        self._spawn_dvm(first)

    def poll_ready(self) -> bool:
        """Is the current DVM ready? A DVM that dies before it is ready is started again
        (start_attempts); one that is not ready within start_timeout, or dies on its last
        attempt, raises LaunchError."""
        if not self.dvms:
            raise LaunchError("launcher 'prrte': the DVM was not started (call start())")
        d = self.dvms[-1]
        if d.ready:
            return True
        if d.state == "dead":
            raise LaunchError(f"launcher 'prrte': DVM {d.number} was stopped before it was ready")
        uri = _read(d.uri_file)
        # "DVM ready": every daemon is up (the URI file alone comes earlier, and a first
        # launch then can fail to initialize); the URI file complete
        if "://" in uri and uri.endswith("\n") and READY in _read(d.log):
            d.ready = True
            d.last_start = self.mono()
            if self.bash and self.notes is None:
                address = "127.0.0.1" if self.emulated else address_from_uri(uri)
                if address:
                    self.notes = RankNotes(address)
            return True
        if d.pid is not None and not process_alive(d.pid):
            # ~0.5 % of starts here die at once ("The PMIx server's listener thread failed
            # to start"): nothing ran on such a DVM, so starting it again is safe.
            attempts = max(1, int(self.options.get("start_attempts", 3)))
            why = (
                f"launcher 'prrte': the DVM (pid {d.pid}) exited before it was ready: "
                f"{_read(d.err)[-500:]!r}"
            )
            if d.attempt >= attempts:
                d.state = "dead"
                raise DiedBeforeReady(why)
            log.warning("%s; starting it again (attempt %d of %d)", why, d.attempt + 1, attempts)
            self._spawn_dvm(d)
            return False
        if self.mono() > d.start_deadline:
            d.state = "dead"
            self._stop_now(d)
            raise LaunchError(
                f"launcher 'prrte': the DVM was not ready ({d.uri_file} "
                f"and {READY!r} in {d.log}) within "
                f"{float(self.options.get('start_timeout', 30.0)):g} s"
            )
        return False

    def replace(self, old: Dvm, retire: bool) -> Dvm:  # type: ignore[override]  # Dvm: the supervised daemon, narrowed
        """Take `old` out of service and return the current DVM -- a new one, starting, when
        old was the current DVM. retire=True: old keeps its running launches and stops when
        they are gone (recycling); False: old is stopped now (it died or wedged; the
        supervisor deals with its launches)."""
        was_current = bool(self.dvms) and self.dvms[-1] is old and old.state == "live"
        if old.state == "live":
            old.state = "retiring" if retire else "dead"
        if not retire:
            self.terminate(old)
        if not was_current:
            return self.dvms[-1]
        number = old.number + 1
        new = Dvm(
            number, os.path.join(self.dvm_dir or tempfile.gettempdir(), str(number)), self.mono()
        )
        self.dvms.append(new)
        self._spawn_dvm(new)
        return new

    def alive(self, d: Dvm) -> bool:  # type: ignore[override]  # Dvm: the supervised daemon, narrowed
        return d.pid is not None and process_alive(d.pid, self.comm)

    def _spawn_dvm(self, d: Dvm) -> None:
        if self._spawn is None:
            raise LaunchError("launcher 'prrte': start() first")
        os.makedirs(d.dir, exist_ok=True)
        for stale in ("dvm.uri", "dvm.pid"):
            try:
                os.unlink(os.path.join(d.dir, stale))
            except FileNotFoundError:
                pass
        hostfile = os.path.join(d.dir, "hostfile")
        with open(hostfile, "w") as f:
            f.write(self.hostfile_text())
        argv = [
            self.prte,
            "--hostfile",
            hostfile,
            "--report-uri",
            d.uri_file,
            "--report-pid",
            os.path.join(d.dir, "dvm.pid"),
        ]
        d.state = "live"
        d.ready = False
        d.attempt += 1
        if "PRTE_MCA_ras" in self.required_env and not self.emulated:  # inside Slurm
            argv[1:1] = prted_nodelist(n.name for n in self.resources.nodes)
        d.pid = self._spawn(argv, dict(self.required_env), stdout=d.log, stderr=d.err)
        d.last_start = self.mono()
        d.start_deadline = d.last_start + float(self.options.get("start_timeout", 30.0))

    def terminate(self, d: Dvm) -> None:
        """Ask a DVM to stop (SIGTERM) without waiting; `reap_dvms` SIGKILLs it later."""
        d.state = "dead"
        if d.pid is not None and process_alive(d.pid, self.comm):
            os.kill(d.pid, signal.SIGTERM)
            d.kill_at = self.mono() + float(self.options.get("stop_grace", 5.0))
        else:
            d.kill_at = 0.0

    def reap_daemons(self) -> None:
        """Stop retiring DVMs whose launches are gone; SIGKILL terminated ones past their grace;
        forget DVMs that are gone. Called by the supervisor now and then."""
        now = self.mono()
        keep = []
        for d in self.dvms:
            if d.state == "retiring" and d.running <= 0:
                self.terminate(d)
            if d.state == "dead":
                alive = d.pid is not None and process_alive(d.pid, self.comm)
                if alive and d.pid is not None and d.kill_at is not None and now >= d.kill_at:
                    _killpg(d.pid, signal.SIGKILL)
                    alive = False
                if not alive and d is not self.dvms[-1]:
                    continue
            keep.append(d)
        self.dvms = keep

    def stop_begin(self) -> None:
        for d in self.dvms:
            if d.pid is not None and process_alive(d.pid, self.comm):
                os.kill(d.pid, signal.SIGTERM)

    def stop(self) -> None:
        for d in self.dvms:
            d.state = "dead"
            self._stop_now(d)
        if self.notes is not None:
            self.notes.close()
            self.notes = None

    def _stop_now(self, d: Dvm) -> None:
        pid, d.pid = d.pid, None
        if pid is None or not process_alive(pid, self.comm):
            return
        os.kill(pid, signal.SIGTERM)
        # a real wait, with sleeps, at the pilot's end: real time, whatever the agent's clock
        deadline = time.monotonic() + float(self.options.get("stop_grace", 5.0))
        while time.monotonic() < deadline:
            if not process_alive(pid, self.comm):
                return
            time.sleep(0.05)
        if process_alive(pid, self.comm):
            _killpg(pid, signal.SIGKILL)

    # -- launching -----------------------------------------------------------------------------
    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        task = one_world(self, task, sandbox)  # (before the DVM: mpi_route.py)
        d = self.dvm
        ordered = by_node(slots)
        self._launch_seq += 1
        key = f"{task.uid}/{d.number}.{self._launch_seq}"
        if self.notes is not None:
            prelude, placement = rank_prelude(task, ordered, OMPI_RANK)
            body = f"(\n{payload_script(task)}\n)" if needs_shell(task) else command_text(task)
            script = "\n".join([*prelude, *self.notes.wrap(key, body)])
            payload = [self.bash or "bash", "-c", script]
        else:
            payload, placement = rank_wrapped(task, ordered, OMPI_RANK)
        env = compose_env(task, placement, MCA_DEFAULTS, self.required_env)
        if self.notes is not None:  # the notes' secret: by name on the command line only
            env.update(self.notes.env)
        exports = [a for k in env if k not in self.required_env for a in ("-x", k)]
        argv = [
            self.prterun,
            "--dvm",
            f"uri:file:{d.uri_file}",
            "-n",
            str(len(slots)),
            "--map-by",
            "slot",
            "--bind-to",
            "none",
            "--host",
            host_list(ordered, self.emulated),
            *exports,
            *payload,
        ]
        return [ProcSpec(argv, env, None, LaunchHandle(d, key))]

    def signal_remote(self, host: str, pids: list[int], sig: int) -> bool:
        """Signal rank process groups on another node of the allocation: inside Slurm, a
        one-off `srun --overlap` step on that node runs kill(1). False where there is no way."""
        jobid = os.environ.get("SLURM_JOB_ID")
        if self._spawn is None or not jobid or getattr(self.resources, "source", "") != "slurm":
            return False
        argv = [
            self._tool("srun", "srun"),
            f"--jobid={jobid}",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={host}",
            "kill",
            f"-{int(sig)}",
            "--",
            *[f"-{p}" for p in pids],
        ]
        self._spawn(argv, {})
        return True

    def retryable(self, exit_code: int, stderr: str | None = None) -> bool:
        """True when prterun failed before the task ran: "failed to initialize" (exit 1) or
        the DVM had no slots (exit 77). Tasks pass their own exit codes through prterun, so
        a bare 1 or 77 proves nothing: the launcher's message on stderr must be there too."""
        if not stderr:
            return False
        text = stderr.lower()
        if exit_code == 1:
            return "failed to initialize" in text
        if exit_code == EXIT_DID_NOT_FIT:
            return "not enough slots" in text or "failed_to_map" in text
        return False


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the executor gave the DVM its own process group
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)
