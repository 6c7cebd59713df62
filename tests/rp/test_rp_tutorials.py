"""RADICAL-Pilot's documentation tutorials (RP 1.60 and today's RP, notebooks converted to
scripts) and the scripts of its examples/misc, with only the import line changed
(tests/rp/tutorials/, made by tests/rp/tutorials/convert.py; RP is MIT-licensed, its licence
is there). Each runs in its own process, as tests/rp/test_rp_examples.py runs RP's examples:
with RP's real radical.utils (the same cache, tests/rp/rp_cache.py; skipped without it), RP's
own bin/ scripts on PATH (radical-pilot-hello.sh, which some use as their executable), HOME
a fresh directory (the configuration tutorial writes ~/.radical), and nothing off this
machine: pip only from the cached wheels (PIP_NO_INDEX), any HTTP proxy pointed at a closed
loopback port.

OUTCOMES (docs/rp.md has the table) says what each does today:
  PASS     exits 0, prints no traceback, and its shell lines found what they looked for;
  REFUSED  stops at once with a message naming pilotfish's alternative (the issue's rule
           for what cannot exist here): exit != 0 and that message;
  PENDING  breaks today for a feature pilotfish.rp lacks: xfail(strict=True), the reason
           names the file the fix goes in (../shared/notes/issue41-pending.md says what);
  RP_TOO   breaks in RP itself as well (not run: the reason says why).
Scripts that take more than ~10 s (marker rp_slow) run side by side, SLOW_AT_ONCE at a time,
all started by the first of them to run: mostly they wait (their tasks sleep).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import rp_cache

HERE = Path(__file__).parent / "tutorials"
PASS, REFUSED, PENDING, RP_TOO = "pass", "refused", "pending", "rp_too"
API = "python/pilotfish/rp/_api.py"
DESCRIBE = "python/pilotfish/rp/_describe.py"

# script: (outcome, what breaks / what the refusal names, slow)
OUTCOMES: dict[str, tuple[str, str, bool]] = {
    "tutorials/app_scheduling.py": (REFUSED, "placing a task on the cores its slots name is "
                                     "not supported on pilotfish", False),
    "tutorials/configuration.py": (PASS, "", False),
    "tutorials/debugging.py": (PASS, "", False),
    "tutorials/describing_tasks.py": (PASS, "", False),
    "tutorials/multiple_pilots.py": (PASS, "", True),  # (waits 15 s for a pilot never added)
    "tutorials/profiling.py": (PASS, "", True),
    "tutorials/raptor.py": (PASS, "", False),
    "tutorials/raptor_mpi.py": (PASS, "", False),
    "tutorials/staging_data.py": (PASS, "", False),
    "tutorials_160/configuration.py": (PASS, "", False),
    "tutorials_160/debugging.py": (PASS, "", False),
    "tutorials_160/describing_tasks.py": (PASS, "", False),
    "tutorials_160/multiple_pilots.py": (PASS, "", True),  # (as tutorials/: 15 s)
    "tutorials_160/profiling.py": (PASS, "", True),
    "tutorials_160/raptor.py": (PASS, "", False),
    "tutorials_160/raptor_mpi.py": (PASS, "", False),  # (a venv at /tmp/raptor_ve: VENVS)
    "tutorials_160/staging_data.py": (PASS, "", False),
    "tutorials_160/submission.py": (PASS, "", False),
    "misc/backfilling.py": (PASS, "", True),
    "misc/backfilling_recovery.py": (RP_TOO, "registers callbacks as register_callback(cb, "
                                     "rp.TASK_STATE): since RP 1.x the second argument is "
                                     "cb_data, so RP calls cb(task, state, 'TASK_STATE') and "
                                     "the 2-argument callbacks raise TypeError, in RP as here; "
                                     "and it sleeps 60 s", True),
    "misc/bragg.py": (PASS, "", True),  # (runs until stopped: FOREVER)
    "misc/colocated.py": (PASS, "", False),
    "misc/ddmd.py": (PASS, "", True),  # (runs until stopped: FOREVER)
    "misc/env.py": (PASS, "", True),
    "misc/hello_synapse.py": (RP_TOO, "its task runs `pip install --upgrade radical.synapse` "
                              "from PyPI: needs the network (a retired package)", False),
    "misc/ordered_pipelines.py": (PASS, "", True),
    "misc/pilot_resources.py": (PASS, "", True),  # (RP's slot benchmark: 10 s here)
    "misc/raptor.py": (REFUSED, "a master running a script of its own is not supported on "
                       "pilotfish: name a subclass of rp.raptor.Master with raptor_class", False),
    "misc/restart_0.py": (PASS, "", False),
    "misc/restart_1.py": (PASS, "", False),
    "misc/rp_app_comm.py": (REFUSED, "are not supported on pilotfish: connect tasks through "
                            "a pilot service", False),
    "misc/service_tasks.py": (REFUSED, "tasks naming services (RP 1.90) are not supported",
                              False),
    "misc/task_cancelation.py": (PASS, "", True),
    "misc/task_priorities.py": (PASS, "", False),
    "misc/wl_shape_02.py": (RP_TOO, "stages a ./gromacs/ directory of inputs that RP does not "
                            "ship: FileNotFoundError in RP as here", False),
}
# (misc/raptor_simple.py: run by test_rp_examples.py; raptor_master.py, raptor_worker.py,
# rp_app_master.py and rp_app_worker.py are files the scripts above start, not scripts)

# venvs a script's prepare_env(path=...) names, made before it runs (if not there): RP 1.60's
# raptor_mpi notebook names /tmp/raptor_ve, which RP makes when it is missing (pip-installing
# radical.pilot and mpi4py from PyPI: the network); pilotfish.rp uses an existing venv there
VENVS = {"tutorials_160/raptor_mpi.py": "/tmp/raptor_ve"}

# scripts that print a traceback by design: restart_0 exits with sys.exit(0) inside RP's
# `except (KeyboardInterrupt, SystemExit): ru.print_exception_trace()` (RP prints it too)
TRACE_BY_DESIGN = {"misc/restart_0.py": "exit requested"}
SHELL_MISSES = re.compile(r"No such file or directory|command not found")
# lines of a script's output that SHELL_MISSES would take for a miss but that are expected, why
EXPECTED_MISSES = {
    "tutorials/debugging.py": [
        # its task.000001 runs the unknown executable `data` on purpose: task.stderr and
        # `cat task.000001.err` say so (RP's say "data: command not found")
        r"cannot execute 'data'.*No such file or directory",
        # `ls -l *.out *.err` in the client's session directory: RP's client components
        # (bridges, ...) are processes that write <name>.out/.err there; pilotfish's client
        # runs none (its bridge and router are threads of the client)
        r"ls: cannot access '\*\.(out|err)': No such file or directory",
    ],
}
EXPECTED_MISSES["tutorials_160/debugging.py"] = EXPECTED_MISSES["tutorials/debugging.py"]
# scripts that run until stopped (in RP too: a workflow loop with no end): each runs this many
# seconds, must still be running then, with no failed task and no traceback; then SIGINT (the
# script's `finally` closes its session) and the only traceback is that KeyboardInterrupt's
FOREVER = {"misc/bragg.py": 15.0, "misc/ddmd.py": 15.0}


@pytest.fixture(scope="module")
def rp_tree():
    missing = rp_cache.fetch()  # (scripts/test.sh fetched it before the netns: no network)
    if missing:
        pytest.skip(f"{missing} could not be fetched from the package index into "
                    f"{rp_cache.CACHE}")
    return rp_cache.paths()


def _params():
    for name, (outcome, why, slow) in OUTCOMES.items():
        marks = []
        if slow:
            marks.append(pytest.mark.rp_slow)
        if outcome == PENDING:
            marks.append(pytest.mark.xfail(strict=True, reason=f"issue 41 pending: {why}"))
        if outcome == RP_TOO:
            marks.append(pytest.mark.skip(reason=f"breaks in RP itself: {why}"))
        yield pytest.param(name, marks=marks, id=name)


def _failed_tasks(sessions: Path) -> list[str]:
    """The FAILED tasks of every session the script made (their journals)."""
    from pilotfish.client.reading import task_outputs

    out = []
    for s in sessions.glob("*"):
        if (s / "session.json").exists():
            out += [f"{o.uid}: {o.reason}" for o in task_outputs(str(s)) if o.state == "FAILED"]
    return out


@pytest.fixture(scope="module")
def restart_copy(tmp_path_factory):
    """restart_0 writes restart.dat beside itself and restart_1 reads it: both run from a
    copy (with ../config.json), so a run leaves the tree as it was."""
    root = tmp_path_factory.mktemp("restart")
    (root / "misc").mkdir()
    shutil.copy(HERE / "config.json", root)
    for n in ("restart_0.py", "restart_1.py"):
        shutil.copy(HERE / "misc" / n, root / "misc")
    return root


SLOW_AT_ONCE = 4  # slow scripts run side by side (mostly waiting: their tasks sleep)


def _env(tmp_path: Path, rp_tree) -> dict:
    examples, ru, wheels = rp_tree
    rp_bin = examples.parent / "bin"  # (RP's own scripts: radical-pilot-hello.sh)
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**os.environ,
            "PYTHONPATH": f"{ru}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PATH": f"{rp_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path / "home"),
            "PILOTFISH_SESSIONS": str(tmp_path / "sessions"), "RADICAL_REPORT_ANIME": "0",
            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
            "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}


def _execute(name: str, tmp_path: Path, env: dict, where: Path) -> tuple:
    """Run one script as RP's users do: ("ran", rc, output) or, for FOREVER, ("stopped",
    alive at its time, failed tasks then, rc, output)."""
    if name in FOREVER:
        return _run_forever(name, tmp_path, env)
    if name in VENVS and not os.path.isfile(os.path.join(VENVS[name], "bin", "activate")):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", VENVS[name]], check=True)
    r = subprocess.run([sys.executable, str(where / name)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    return "ran", r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def slow_runs(rp_tree, tmp_path_factory):
    """The slow scripts, all started on first use, SLOW_AT_ONCE at a time (each in its own
    directory): {name: future of _execute's result}. Each test then checks its own."""
    import concurrent.futures
    import signal

    # The FOREVER scripts are stopped with SIGINT, as a user's Ctrl-C: their Python must have
    # its KeyboardInterrupt handler, which it installs only where SIGINT is not ignored at its
    # start -- and a suite started in the background by a non-interactive shell (CI) has it
    # ignored. A handled signal is at its default in an exec'd child; an ignored one stays
    # ignored. (Set here, in the main thread; preexec_fn is not safe with the pool's threads.)
    old_sigint = signal.getsignal(signal.SIGINT)
    if old_sigint == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    futures: dict = {}
    pool = concurrent.futures.ThreadPoolExecutor(SLOW_AT_ONCE, thread_name_prefix="rp-slow")

    def get(name: str):
        if not futures:
            for n, (outcome, _, slow) in OUTCOMES.items():
                if slow and outcome not in (RP_TOO, PENDING):
                    d = tmp_path_factory.mktemp(re.sub(r"\W", "_", n))
                    futures[n] = pool.submit(_execute, n, d, _env(d, rp_tree), HERE)
        return futures[name]

    yield get
    pool.shutdown(wait=True)
    signal.signal(signal.SIGINT, old_sigint)


@pytest.mark.parametrize("name", list(_params()))
def test_rp_tutorial(name, rp_tree, tmp_path, request):
    outcome, why, slow = OUTCOMES[name]
    if slow:
        got = request.getfixturevalue("slow_runs")(name).result(timeout=600)
    else:
        where = request.getfixturevalue("restart_copy") if name.startswith("misc/restart_") \
            else HERE
        got = _execute(name, tmp_path, _env(tmp_path, rp_tree), where)
    if got[0] == "stopped":
        _check_forever(name, *got[1:])
        return
    _, rc, out = got
    if outcome == REFUSED:
        assert rc != 0, out[-3000:]
        assert why in out, out[-3000:]
        return
    assert rc == 0, f"{name} rc={rc}\n{out[-4000:]}"
    if name in TRACE_BY_DESIGN:
        assert TRACE_BY_DESIGN[name] in out, out[-4000:]
    else:
        assert "Traceback" not in out, out[-4000:]
    expected = [re.compile(x) for x in EXPECTED_MISSES.get(name, ())]
    checked = "\n".join(ln for ln in out.splitlines() if not any(x.search(ln) for x in expected))
    assert not SHELL_MISSES.search(checked), out[-4000:]
    if name == "misc/rp_app_comm.py":  # (it prints nothing: its tasks must have run)
        assert not _failed_tasks(tmp_path / "sessions")


def _run_forever(name: str, tmp_path: Path, env: dict) -> tuple:
    import signal
    import time

    log = tmp_path / "out.txt"
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, str(HERE / name)], cwd=tmp_path, env=env,
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(FOREVER[name])
        alive = p.poll() is None
        failed = _failed_tasks(tmp_path / "sessions")
        p.send_signal(signal.SIGINT)
        p.wait(timeout=90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return "stopped", alive, failed, p.returncode, log.read_text(errors="replace")


def _check_forever(name: str, alive: bool, failed: list, rc: int, out: str) -> None:
    assert alive, f"{name} ended before it was stopped (rc={rc})\n{out[-4000:]}"
    assert not failed, failed
    traces = out.split("Traceback (most recent call last):")[1:]
    assert all("KeyboardInterrupt" in t for t in traces), out[-4000:]
    assert "exception caught" not in out and not SHELL_MISSES.search(out), out[-4000:]
