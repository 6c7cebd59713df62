"""prrte: a persistent PRRTE DVM per launcher instance; one `prterun --dvm` per task.

start() starts the DVM through the agent's executor:
    prte --hostfile D/hostfile --report-uri D/dvm.uri --report-pid D/dvm.pid --no-ready-msg
and waits (bounded) for the URI file. build():
    prterun --dvm uri:file:D/dvm.uri -n R --map-by slot --bind-to none --host h1:n1,...
            -x VAR ... <payload>
stop(): SIGTERM to the DVM, SIGKILL to its process group after a grace period; the PID is
checked against /proc/PID/comm first (PIDs wrap quickly here).

Facts this relies on (shared/notes/substrates.md, Open MPI 5.0.9 wheel):
  - the wheel has no `prun`/`pterm`: `prterun --dvm uri:file:...` stands in for prun;
  - `--map-by slot --bind-to none` on every prterun (as DVM defaults some launches hang);
  - the DVM never queues: a job that does not fit exits 77 at once; a missing executable
    gives 75; task exit codes pass through;
  - 0.5-2.5 % of prterun calls exit 1 "failed to initialize" without running the task (safe
    to retry) or hang after the task ran: the agent must bound every call with a SIGKILL
    timeout (prterun ignores SIGTERM);
  - DVM memory grows ~90 KB per launch: recycle long-lived DVMs (stop + start).
Several DVMs side by side work, each with its own slot budget: one per partition.

Slots: the hostfile gives each node its core count (an emulated machine: `localhost
slots=<all declared cores>`). Each rank takes one PRRTE slot whatever its cores, so the DVM
never runs out before the pilot's own accounting does.

options: prte, prterun (commands), prefix (see mpirun), dvm_dir (default: a new temporary
directory), start_timeout (s, default 30), stop_grace (s, default 5).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

from .._wire import RankSlot, TaskSpec
from .base import LaunchError, LaunchMethod, ProcSpec, Spawn, by_node, compose_env, rank_wrapped
from .mpirun import MCA_DEFAULTS, OMPI_RANK, host_list, openmpi_env

EXIT_DID_NOT_FIT = 77      # the DVM had no free slots for the job: it did not run
EXIT_NO_EXECUTABLE = 75    # not retryable: the same launch fails again


def proc_status(pid: int) -> tuple[str, str] | None:
    """(name, state) of a process from /proc/PID/stat, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces or parentheses; the state follows the last ')'
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:][:1]


def process_alive(pid: int, comm: str | None = None) -> bool:
    """Is pid a live (not zombie) process, named comm when comm is given?"""
    status = proc_status(pid)
    if status is None or status[1] in ("Z", "X"):
        return False
    return comm is None or status[0] == comm[:15]


class Prrte(LaunchMethod):
    name = "prrte"

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.prte = self._tool("prte", "prte")
        self.prterun = self._tool("prterun", "prterun")
        self.required_env = openmpi_env(self.prterun, self.options.get("prefix"))
        self.comm = os.path.basename(self.prte)  # the DVM's name in /proc/PID/comm
        self.dvm_dir = self.options.get("dvm_dir")
        self.pid: int | None = None

    @property
    def uri_file(self) -> str:
        if not self.dvm_dir:
            raise LaunchError("launcher 'prrte': the DVM was not started (call start())")
        return os.path.join(self.dvm_dir, "dvm.uri")

    def hostfile_text(self) -> str:
        if self.emulated:
            return f"localhost slots={sum(n.cores for n in self.resources.nodes)}\n"
        return "".join(f"{n.name} slots={n.cores}\n" for n in self.resources.nodes)

    def start(self, spawn: Spawn | None = None) -> None:
        if spawn is None:
            raise LaunchError("launcher 'prrte' starts a DVM: start() needs the spawn callable")
        if not self.dvm_dir:
            self.dvm_dir = tempfile.mkdtemp(prefix="pilotfish-dvm-")
        os.makedirs(self.dvm_dir, exist_ok=True)
        for stale in ("dvm.uri", "dvm.pid"):
            try:
                os.unlink(os.path.join(self.dvm_dir, stale))
            except FileNotFoundError:
                pass
        hostfile = os.path.join(self.dvm_dir, "hostfile")
        with open(hostfile, "w") as f:
            f.write(self.hostfile_text())
        argv = [self.prte, "--hostfile", hostfile,
                "--report-uri", self.uri_file,
                "--report-pid", os.path.join(self.dvm_dir, "dvm.pid"),
                "--no-ready-msg"]
        self.pid = spawn(argv, dict(self.required_env))
        self._wait_ready(float(self.options.get("start_timeout", 30.0)))

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            try:
                with open(self.uri_file) as f:
                    uri = f.read()
                if "://" in uri and uri.endswith("\n"):  # written completely
                    return
            except FileNotFoundError:
                pass
            if self.pid is not None and not process_alive(self.pid):
                raise LaunchError(f"launcher 'prrte': the DVM (pid {self.pid}) exited before "
                                  f"it was ready; see its output")
            if time.monotonic() > deadline:
                self.stop()
                raise LaunchError(f"launcher 'prrte': the DVM did not write {self.uri_file} "
                                  f"within {timeout:g} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def stop(self) -> None:
        pid, self.pid = self.pid, None
        if pid is None or not process_alive(pid, self.comm):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + float(self.options.get("stop_grace", 5.0))
        while time.monotonic() < deadline:
            if not process_alive(pid, self.comm):
                return
            time.sleep(0.05)
        if process_alive(pid, self.comm):
            try:
                os.killpg(pid, signal.SIGKILL)  # the executor gave it its own process group
            except ProcessLookupError:
                pass
            except PermissionError:
                os.kill(pid, signal.SIGKILL)

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        ordered = by_node(slots)
        payload, placement = rank_wrapped(task, ordered, OMPI_RANK)
        env = compose_env(task, placement, MCA_DEFAULTS, self.required_env)
        exports = [a for k in env if k not in self.required_env for a in ("-x", k)]
        argv = [self.prterun, "--dvm", f"uri:file:{self.uri_file}", "-n", str(len(slots)),
                "--map-by", "slot", "--bind-to", "none",
                "--host", host_list(ordered, self.emulated), *exports, *payload]
        return [ProcSpec(argv, env, None)]

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
