"""pilotfish._core.Executor through Python: spawn, reap, kill; no fd per task."""

import gc
import os
import select
import signal
import stat
import sys
import threading
import time

import pytest

from pilotfish._core import Executor

BASE_ENV = ["PATH=/usr/bin:/bin", "BASE=1"]


def spec(key, argv, env=None, cwd=None, stdout=None, stderr=None):
    return (key, argv, env, cwd, stdout, stderr)


def collect(ex, n, timeout=60.0, ours_only=False):
    """Waits for n exits of ex, through notify_fd as the agent would.

    ours_only: skip exits of children this process had before (key -1: e.g. a helper the
    test runner's launcher left behind), which the reaper reports too."""
    deadline = time.monotonic() + timeout
    out = []
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {n} exits"
        r, _, _ = select.select([ex.notify_fd], [], [], min(left, 1.0))
        if r:
            out.extend(e for e in ex.reap() if not (ours_only and e[0] == -1))
    return out


@pytest.fixture
def ex():
    ex = Executor(base_env=BASE_ENV)
    yield ex
    # Leave no children behind for other tests (the reaper is process-wide).
    if ex.running:
        deadline = time.monotonic() + 30
        while ex.running and time.monotonic() < deadline:
            ex.wait(0.2)


def spawn_one(ex, *args, **kw):
    (res,) = ex.spawn_batch([spec(*args, **kw)])
    return res


@pytest.mark.slow
def test_many_true_in_batches(ex):
    pids = {}
    for b in range(10):
        res = ex.spawn_batch([spec(b * 200 + i, ["/bin/true"]) for i in range(200)])
        for i, (pid, t) in enumerate(res):
            assert pid > 0 and isinstance(t, float), (pid, t)
            pids[b * 200 + i] = pid
    exits = collect(ex, 2000, ours_only=True)
    assert sorted(e[0] for e in exits) == list(range(2000))
    for key, pid, code, sig, t_exit, utime, stime, maxrss in exits:
        assert pids[key] == pid and code == 0 and sig == 0
        assert t_exit > 1e9 and utime >= 0 and stime >= 0 and maxrss >= 0
    assert ex.running == 0
    assert ex.reap() == []


def test_errors_are_results_not_exceptions(ex, tmp_path):
    noexec = tmp_path / "noexec"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(stat.S_IRUSR)
    res = ex.spawn_batch([
        spec(1, ["no-such-program-pilotfish"]),
        spec(2, ["/no/such/file"]),
        spec(3, [str(noexec)]),
        spec(4, ["true"], cwd="/no/such/dir"),
        spec(5, ["true", "a\0b"]),
        spec(6, []),
        spec(7, ["true"], env=["PATH=/nonexistent"]),
    ])
    assert [r[0] for r in res] == [-2, -2, -13, -2, -22, -22, -2]
    assert all(isinstance(r[1], str) and r[1] for r in res)
    assert "no-such-program-pilotfish" in res[0][1]
    time.sleep(0.2)
    assert ex.reap() == [] and ex.running == 0  # failed spawns leave no exit records


def test_exit_code_and_signal(ex):
    p1, _ = spawn_one(ex, 1, ["sh", "-c", "exit 7"])
    p2, _ = spawn_one(ex, 2, ["sleep", "100"])
    assert ex.running >= 1
    ex.kill([p2], signal.SIGKILL)
    exits = {e[0]: e for e in collect(ex, 2)}
    assert exits[1][1:4] == (p1, 7, 0)
    assert exits[2][1:4] == (p2, -1, signal.SIGKILL)
    ex.kill([p2], signal.SIGKILL)  # gone: ESRCH is ignored
    with pytest.raises(ValueError):
        ex.kill([0], signal.SIGTERM)  # would signal our own group


def test_kill_reaches_the_whole_group(ex):
    pid, _ = spawn_one(ex, 1, ["sh", "-c", "sleep 100 & wait"])
    deadline = time.monotonic() + 10
    while len(group_members(pid)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ex.kill([pid], signal.SIGKILL)
    (e,) = collect(ex, 1)
    assert e[3] == signal.SIGKILL
    deadline = time.monotonic() + 10
    while group_members(pid):  # the orphaned sleep was killed too
        assert time.monotonic() < deadline, group_members(pid)
        time.sleep(0.02)


def group_members(pgid):
    """Live (non-zombie) processes in a process group."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d))
    return out


def test_stdout_stderr_files(ex, tmp_path):
    out, err, both = tmp_path / "out", tmp_path / "err", tmp_path / "both"
    out.write_text("old content that must be truncated\n" * 10)
    script = "echo to-out; echo to-err >&2"
    ex.spawn_batch([
        spec(1, ["sh", "-c", script], stdout=str(out), stderr=str(err)),
        spec(2, ["sh", "-c", script], stdout=both, stderr=both),  # os.PathLike works too
        spec(3, ["sh", "-c", script]),  # /dev/null
    ])
    collect(ex, 3)
    assert out.read_text() == "to-out\n"
    assert err.read_text() == "to-err\n"
    assert both.read_text() == "to-out\nto-err\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 & ~current_umask()


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_cwd_and_relative_output(ex, tmp_path):
    spawn_one(ex, 1, ["pwd"], cwd=str(tmp_path), stdout="pwd.txt")
    collect(ex, 1)
    assert (tmp_path / "pwd.txt").read_text().strip() == str(tmp_path)


def test_env_overlay(ex, tmp_path):
    out = tmp_path / "env"
    spawn_one(ex, 1, ["env"], env=["BASE=2", "EXTRA=x=y"], stdout=str(out))
    spawn_one(ex, 2, ["env"], stdout=str(tmp_path / "base"))
    collect(ex, 2)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env == {"PATH": "/usr/bin:/bin", "BASE": "2", "EXTRA": "x=y"}
    base = dict(line.split("=", 1) for line in (tmp_path / "base").read_text().splitlines())
    assert base == {"PATH": "/usr/bin:/bin", "BASE": "1"}


def test_default_env_is_ours():
    ex = Executor()
    os.environ["PILOTFISH_CORE_PROBE"] = "1"  # set after creation: not seen
    try:
        r, w = os.pipe()
        os.close(w)
        pid, _ = spawn_one(ex, 1, ["sh", "-c", 'test "$HOME" = "$0" && test -z "$PILOTFISH_CORE_PROBE"',
                                   os.environ.get("HOME", "")])
        os.close(r)
        (e,) = collect(ex, 1)
        assert e[2] == 0
    finally:
        del os.environ["PILOTFISH_CORE_PROBE"]


def test_own_process_group_and_default_signals(ex, tmp_path):
    # The spawned process is `cat` itself, so /proc/self is the child.
    pid, _ = spawn_one(ex, 1, ["cat", "/proc/self/stat"], stdout=str(tmp_path / "stat"))
    spawn_one(ex, 2, ["cat", "/proc/self/status"], stdout=str(tmp_path / "status"))
    collect(ex, 2)
    fields = (tmp_path / "stat").read_text().rsplit(")", 1)[1].split()
    assert int(fields[2]) == pid  # pgrp == pid
    status = dict(
        line.split(":\t", 1) for line in (tmp_path / "status").read_text().splitlines() if ":\t" in line
    )
    # Python ignores SIGPIPE; children must get default dispositions and an empty mask.
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    assert int(status["SigIgn"], 16) == 0
    assert int(status["SigBlk"], 16) == 0


def test_outputs_empty_opens_without_truncating(ex, tmp_path):
    """The 7th spec field says the output files are known empty (the agent's reused spool
    files): the child opens them without O_TRUNC; without it they are truncated."""
    kept, cut = tmp_path / "kept", tmp_path / "cut"
    for f in (kept, cut):
        f.write_text("0123456789")
    ex.spawn_batch([
        (1, ["printf", "ab"], None, None, str(kept), None, True),
        (2, ["printf", "ab"], None, None, str(cut), None, False),
    ])
    collect(ex, 2)
    assert kept.read_text() == "ab23456789"
    assert cut.read_text() == "ab"


def open_fds():
    gc.collect()  # executors of earlier tests close their notify fd when collected
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
def test_no_fd_per_running_task(ex, tmp_path):
    before = open_fds()
    res = ex.spawn_batch([spec(i, ["sleep", "30"], stdout=str(tmp_path / f"{i}.out")) for i in range(1000)])
    pids = [pid for pid, _ in res]
    assert all(pid > 0 for pid in pids)
    try:
        assert ex.running == 1000
        assert open_fds() == before
    finally:
        ex.kill(pids, signal.SIGKILL)
    exits = collect(ex, 1000)
    assert {e[3] for e in exits} == {signal.SIGKILL}
    assert open_fds() == before
    assert ex.running == 0


def test_foreign_children_are_reported_with_key_minus_1(ex):
    pid, _ = spawn_one(ex, 1, ["sleep", "30"])  # the reaper only runs while we have children
    foreign = os.posix_spawn("/bin/true", ["true"], dict(os.environ))
    (e,) = collect(ex, 1)
    assert e[:3] == (-1, foreign, 0)
    ex.kill([pid], signal.SIGKILL)
    assert collect(ex, 1)[0][:2] == (1, pid)


def test_executors_get_only_their_own_exits(ex):
    other = Executor(base_env=BASE_ENV)
    ex.spawn_batch([spec(k, ["true"]) for k in range(20)])
    other.spawn_batch([spec(100 + k, ["true"]) for k in range(20)])
    assert sorted(e[0] for e in collect(ex, 20)) == list(range(20))
    assert sorted(e[0] for e in collect(other, 20)) == list(range(100, 120))
    # A foreign child's exit goes to both.
    pid, _ = spawn_one(ex, 1, ["sleep", "30"])
    foreign = os.posix_spawn("/bin/true", ["true"], dict(os.environ))
    assert collect(other, 1)[0][:2] == (-1, foreign)
    ex.kill([pid], signal.SIGKILL)
    assert sorted(e[:2] for e in collect(ex, 2)) == [(-1, foreign), (1, pid)]


def test_notify_fd_and_wait(ex):
    t0 = time.monotonic()
    assert ex.wait(0.2) == []
    assert 0.15 < time.monotonic() - t0 < 5
    spawn_one(ex, 1, ["true"])
    r, _, _ = select.select([ex.notify_fd], [], [], 10)
    assert r
    assert len(ex.reap()) == 1
    r, _, _ = select.select([ex.notify_fd], [], [], 0)
    assert not r  # drained


def test_wait_releases_the_gil(ex):
    got = []
    t = threading.Thread(target=lambda: got.extend(ex.wait(20)))
    t.start()
    time.sleep(0.2)  # the waiting thread must not block this one
    spawn_one(ex, 1, ["true"])
    t.join(20)
    assert [e[0] for e in got] == [1]


def test_python_executable_runs(ex, tmp_path):
    out = tmp_path / "py"
    spawn_one(ex, 1, [sys.executable, "-c", "import os; print(os.getpgrp() == os.getpid())"], stdout=str(out))
    (e,) = collect(ex, 1)
    assert e[2] == 0 and out.read_text() == "True\n"


def test_exit_log_has_every_exit_before_reap_returns_it(tmp_path):
    import struct

    log = tmp_path / "exits"
    ex = Executor(None, exit_log=str(log))
    ex.spawn_batch([(11, ["/bin/sh", "-c", "exit 5"], None, None, None, None),
                    (12, ["/bin/sh", "-c", "kill -TERM $$"], None, None, None, None)])
    got = []
    while len(got) < 2:
        got += ex.wait(10)
        data = log.read_bytes()
        records = [struct.unpack_from("<qii", data, i) for i in range(0, len(data), 24)]
        logged = {r for r in records if r[2] >= 0}
        for key, _pid, code, sig, *_ in got:  # whatever reap returned is in the log already
            assert (key, code, sig) in logged
    assert logged == {(11, 5, 0), (12, -1, 15)}
    # and each child's spawn record (signal field -1, pid in the code field) comes first
    pids = {key: pid for key, pid, *_ in got}
    spawns = [(i, r) for i, r in enumerate(records) if r[2] == -1]
    assert sorted(r[:2] for _, r in spawns) == sorted(pids.items())
    for i, (key, _, _) in spawns:  # preceded only by its intent record (just before spawn)
        assert [r for r in records[:i] if r[0] == key] == [(key, 0, -2)]
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_read_outputs_caps_skips_empty_and_tells_reusable(tmp_path):
    """The core's batch reader of spool files: head of stdout, tail of stderr past the cap,
    "" for an empty file, None for no path or no file, and a file another process still has
    open is not reusable."""
    import subprocess

    from pilotfish._core import read_outputs

    (tmp_path / "a.out").write_text("0123456789")
    (tmp_path / "a.err").write_text("abcdefghij")
    (tmp_path / "b.out").write_text("")
    held = tmp_path / "c.out"
    held.write_text("x")
    with open(held, "a") as f:
        child = subprocess.Popen(["sleep", "30"], stdout=f)
    try:
        rows = read_outputs([(str(tmp_path / "a.out"), str(tmp_path / "a.err")),
                             (str(tmp_path / "b.out"), None),
                             (str(tmp_path / "nothing"), None),
                             (str(held), None)], 4)
    finally:
        child.kill()
        child.wait()
    assert rows == [("0123\n[...truncated...]", "[...truncated...]\nghij", True),
                    ("", None, True), (None, None, True), ("x", None, False)]
    # reusable files are empty again (the next child opens them without O_TRUNC); the one
    # still held keeps its output until it is free
    assert [(tmp_path / f).stat().st_size for f in ("a.out", "a.err", "b.out")] == [0, 0, 0]
    assert held.read_text() == "x"
    assert read_outputs([(str(held), None)], 4) == [("x", None, True)]
    assert held.read_text() == ""
    # a file that cannot be opened for writing: its output is read, the file never handed
    # out again (made read-only; immutable where we are root, who may write anyway)
    locked = tmp_path / "locked.out"
    locked.write_text("kept")
    locked.chmod(0o444)
    immutable = os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(locked)],
                                                     capture_output=True).returncode == 0
    try:
        if os.geteuid() != 0 or immutable:
            assert read_outputs([(str(locked), None)], 4) == [("kept", None, False)]
            assert locked.read_text() == "kept"
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(locked)], check=True)


def test_read_outputs_large_batch_keeps_order_and_releases_leases(tmp_path):
    """A large batch is read by several threads: rows stay in the order of the pairs, a held
    file in the middle is told apart, and reading takes no lease that outlives the call (the
    same files read again are reusable)."""
    import subprocess

    from pilotfish._core import read_outputs

    pairs = []
    for i in range(300):
        o, e = tmp_path / f"{i}.out", tmp_path / f"{i}.err"
        o.write_text(f"out {i}")
        e.write_text(f"err {i}" if i % 3 else "")
        pairs.append((str(o), str(e) if i % 5 else None))
    held = 150
    with open(pairs[held][0], "a") as f:
        child = subprocess.Popen(["sleep", "30"], stdout=f)
    try:
        rows = read_outputs(pairs, 1 << 20)
    finally:
        child.kill()
        child.wait()
    want = [(f"out {i}", (f"err {i}" if i % 3 else "") if i % 5 else None, i != held)
            for i in range(300)]
    assert rows == want
    again = read_outputs(pairs, 1 << 20)
    assert [r[2] for r in again] == [True] * 300
