"""Session directories and files against a co-located user, and sessions that must not
collide: real sessions, real local pilots, a real second uid (nobody) as the attacker who
plants directories and symbolic links beforehand, real processes racing for one path."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import pilotfish as pf
from pilotfish._util import write_private
from substrate_helpers import python_script, start_pilot  # tests/substrates (on the path: conftest)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def shared():
    """A directory the second user can reach, holding `sessions`: world-writable with the
    sticky bit, like /tmp (where a shared $PILOTFISH_SESSIONS would live)."""
    root = tempfile.mkdtemp(prefix="pf-shared-")
    os.chmod(root, 0o755)
    base = os.path.join(root, "sessions")
    os.mkdir(base)
    os.chmod(base, 0o1777)
    yield root, base
    shutil.rmtree(root, ignore_errors=True)


def _as_nobody(script: str) -> None:
    n = _nobody()
    subprocess.run(["/bin/sh", "-c", script], user=n, group=n, check=True, timeout=30)


# -- item 3: files that follow what another user planted ----------------------------------

@needs_root
def test_directory_planted_by_another_user_is_refused(shared):
    root, base = shared
    victim = os.path.join(root, "victim")
    with open(victim, "w") as f:
        f.write("root's own file\n")
    planted = os.path.join(base, "session")
    _as_nobody(f"mkdir -m 0777 {planted} && ln -s {victim} {planted}/journal")
    with pytest.raises(pf.PilotfishError, match=re.escape(planted)) as e:
        with pf.Session(path=planted) as s:  # (the code before: used it as is)
            pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="5m"))
    assert "owned by" in str(e.value) and "nobody" in str(e.value)
    assert isinstance(e.value, pf.SessionError)
    with open(victim) as f:
        assert f.read() == "root's own file\n"  # nothing appended through the link
    st = os.stat(planted)
    assert st.st_uid == _nobody() and stat.S_IMODE(st.st_mode) == 0o777  # left alone
    assert sorted(os.listdir(planted)) == ["journal"]


@needs_root
def test_our_own_directory_writable_by_others_is_refused(shared):
    _, base = shared
    path = os.path.join(base, "mine")
    os.mkdir(path)
    os.chmod(path, 0o777)  # anyone may have put something in it
    with pytest.raises(pf.PilotfishError, match=re.escape(path) + ".*writable by"):
        pf.Session(path=path)
    assert os.listdir(path) == []


@needs_root
def test_sessions_directory_another_user_controls_is_refused(shared):
    """A sessions directory made by the other user: they could swap our directory in it."""
    root, base = shared
    theirs = os.path.join(base, "theirs")
    _as_nobody(f"mkdir -m 0755 {theirs}")
    with pytest.raises(pf.PilotfishError, match=re.escape(theirs) + ".*owned by"):
        pf.Session(path=os.path.join(theirs, "s"))
    assert os.listdir(theirs) == []
    open_base = os.path.join(root, "open")
    os.mkdir(open_base)
    os.chmod(open_base, 0o777)  # no sticky bit: anyone may rename what is in it
    with pytest.raises(pf.PilotfishError, match=re.escape(open_base) + ".*sticky"):
        pf.Session(path=os.path.join(open_base, "s"))


@pytest.mark.parametrize("name", ["journal", "client.events", "session.key", "session.json",
                                  "session.lock"])
def test_a_link_inside_the_session_directory_is_never_followed(tmp_path, name):
    """Our own directory (made 0755 beforehand, as a user would) holding a symbolic link
    where a session file goes: refused, the link's target untouched."""
    path = tmp_path / "s"
    path.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text('{"public": "x", "secret": "y", "uid": "pf.old", "created": 0}')
    os.symlink(victim, path / name)
    with pytest.raises(pf.PilotfishError, match=re.escape(str(path / name)) + ".*link"):
        with pf.Session(path=path) as s:
            pf.PilotManager(s).submit_pilots(pf.PilotDescription(runtime="5m"))
    assert victim.read_text() == '{"public": "x", "secret": "y", "uid": "pf.old", "created": 0}'
    assert os.path.islink(path / name)


def test_write_private_does_not_follow_a_planted_tmp_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "agent.json"
    os.symlink(victim, str(target) + ".tmp")
    os.symlink(victim, target)  # the name itself: replaced, not written through
    write_private(str(target), b"secret")
    assert victim.read_text() == "keep"
    assert not os.path.islink(target) and target.read_bytes() == b"secret"
    assert _mode(target) == 0o600
    assert os.path.islink(str(target) + ".tmp")  # another's name: not ours to remove
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("agent.json.")] == \
        ["agent.json.tmp"]  # no temporary left behind


def test_every_file_the_client_writes_is_private(tmp_path):
    """umask 022 (files 0644 by default): the client's own files are 0600 all the same."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "s"
        with pf.Session(path=path) as s:
            pilot, tmgr = start_pilot(s, runtime="5m")
            assert tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true")).wait(
                timeout=60) == pf.DONE
    finally:
        os.umask(old)
    assert _mode(path) == 0o700 and _mode(pilot.sandbox) == 0o700
    for name in ("journal", "client.events", "tasks.msgpack", "session.json", "session.key",
                 "session.lock"):
        assert _mode(path / name) == 0o600, name
    for name in ("pilot.json", "agent.json", "agent.out", "agent.err"):
        assert _mode(os.path.join(pilot.sandbox, name)) == 0o600, name
    assert not [n for n in os.listdir(path) if ".tmp" in n]


def test_a_directory_of_our_own_made_beforehand_is_used_and_made_private(tmp_path):
    path = tmp_path / "mine"
    path.mkdir(mode=0o755)
    with pf.Session(path=path) as s:
        assert s.path == str(path)
    assert _mode(path) == 0o700


def test_empty_path_is_refused_and_the_current_directory_left_alone(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir(mode=0o755)
    monkeypatch.chdir(cwd)
    with pytest.raises(pf.PilotfishError, match="path"):
        pf.Session(path="")
    assert _mode(cwd) == 0o755 and os.listdir(cwd) == []


# -- item 5: sessions collide --------------------------------------------------------------

def test_sessions_opened_in_the_same_second_get_their_own_uid(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(tmp_path))
    a = pf.Session()
    b = pf.Session()  # the first still open
    a.close()
    c = pf.Session()  # the first closed
    b.close()
    c.close()
    assert len({a.uid, b.uid, c.uid}) == 3 and len({a.path, b.path, c.path}) == 3
    for s in (a, b, c):
        # readable: the time it was made comes first
        assert re.fullmatch(r"pf\.\d{8}\.\d{6}\.\d{3}\.[0-9a-z]+", s.uid), s.uid
        assert os.path.basename(s.path) == s.uid


def test_session_uids_are_unique_and_sort_by_time():
    from pilotfish.client.session import new_session_uid

    uids = [new_session_uid() for _ in range(20000)]
    assert len(set(uids)) == len(uids)
    first = new_session_uid()
    time.sleep(0.01)
    assert new_session_uid() > first


RACER = textwrap.dedent("""
    import os, sys, time
    import pilotfish as pf
    paths = sys.argv[1:]
    for path in paths:
        r, w = os.pipe()
        kids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:  # both wait for the same byte, then open the same path
                os.close(w)
                os.read(r, 1)
                try:
                    s = pf.Session(path=path, heartbeat_s=0.5)
                except pf.PilotfishError as e:
                    print("refused", type(e).__name__, str(e).replace(chr(10), " "), flush=True)
                    os._exit(0)
                except BaseException as e:
                    print("raw", type(e).__name__, e, flush=True)
                    os._exit(0)
                print("opened", s.address, flush=True)
                time.sleep(0.5)
                s.close()
                os._exit(0)
            kids.append(pid)
        os.close(r)
        time.sleep(0.2)
        os.write(w, b"go")
        os.close(w)
        for pid in kids:
            os.waitpid(pid, 0)
        print("--", flush=True)
""")


@pytest.mark.slow
def test_two_processes_racing_for_one_path_exactly_one_opens(tmp_path):
    paths = [str(tmp_path / f"s{i}") for i in range(12)]
    r = subprocess.run([sys.executable, "-c", RACER, *paths], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    rounds = [b.strip().splitlines() for b in r.stdout.split("--")[:-1]]
    assert len(rounds) == len(paths), r.stdout
    for path, lines in zip(paths, rounds):
        assert sorted(line.split()[0] for line in lines) == ["opened", "refused"], (path, lines)
        refused = next(line for line in lines if line.startswith("refused"))
        assert path in refused, refused


HOLDER = textwrap.dedent("""
    import sys, time, pilotfish as pf
    s = pf.Session(path=sys.argv[1], heartbeat_s=0.5)
    print("open", flush=True)
    time.sleep(600)
""")


def test_a_live_session_cannot_be_opened_twice_and_a_dead_one_resumes(tmp_path):
    path = tmp_path / "s"
    holder = python_script(HOLDER, path)
    try:
        assert holder.stdout.readline().strip() == "open", holder.stderr.read()
        with pytest.raises(pf.PilotfishError, match=re.escape(str(path)) + f".*{holder.pid}"):
            pf.Session(path=path, resume=True)  # (the code before: both open)
        with pytest.raises(pf.PilotfishError, match="in use"):
            pf.Session(path=path)
    finally:
        holder.send_signal(signal.SIGKILL)  # no close: its lock goes with it
        holder.wait()
    with pf.Session(path=path, resume=True) as s:
        assert s.path == str(path)


def test_one_process_cannot_hold_one_path_twice(tmp_path):
    path = tmp_path / "s"
    first = pf.Session(path=path)
    try:
        with pytest.raises(pf.PilotfishError, match="in use"):
            pf.Session(path=path, resume=True)
    finally:
        first.close()
    with pf.Session(path=path, resume=True) as s:
        assert s.uid == first.uid


def test_a_forked_child_does_not_keep_the_session_locked(tmp_path):
    """A child forked while a session is open (multiprocessing's fork) does not hold it: once
    the parent closes it, it resumes at once."""
    path = tmp_path / "s"
    s = pf.Session(path=path)
    pid = os.fork()
    if pid == 0:  # the child lives on, doing nothing with the session
        time.sleep(5)
        os._exit(0)
    # (the parent goes on at once; under load the child's after-fork hook had not yet run
    # when the parent reopened -- the lock must go with the parent's close, not the child's)
    try:
        s.close()
        with pf.Session(path=path, resume=True) as again:
            assert again.uid == s.uid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_lock_goes_with_close_whatever_copies_remain(tmp_path):
    """The deterministic form of the fork race: a copy of the lock's descriptor that is still
    open (a child's, before its after-fork hook ran) does not keep a closed session locked."""
    from pilotfish.client import session as S

    path = tmp_path / "s"
    s = pf.Session(path=path)
    (fd,) = [f for f in S._LOCK_FDS if os.readlink(f"/proc/self/fd/{f}").startswith(str(path))]
    copy = os.dup(fd)
    try:
        s.close()
        with pf.Session(path=path, resume=True) as again:
            assert again.uid == s.uid
    finally:
        os.close(copy)


@needs_root
def test_a_sessions_link_another_user_owns_is_refused(shared, monkeypatch):
    """$PILOTFISH_SESSIONS=/tmp/pf-sessions, made beforehand by the other user as a link to
    a directory of ours: they could point it at theirs at any moment."""
    root, base = shared
    ours = os.path.join(root, "ours")
    os.mkdir(ours, 0o700)
    link = os.path.join(base, "pf-sessions")
    _as_nobody(f"ln -s {ours} {link}")
    monkeypatch.setenv("PILOTFISH_SESSIONS", link)
    with pytest.raises(pf.PilotfishError, match=re.escape(link) + ".*link owned by"):
        pf.Session()
    assert os.listdir(ours) == []


# -- issue 42, row 11: private all the way down ----------------------------------------------

def not_private(root) -> list[str]:
    """Everything under root (root too) that group or others may use: 'path mode kind' each,
    for a directory not 0700 or anything else with a group/other bit; links are listed too
    (pilotfish makes none)."""
    bad = []
    for top, dirs, files in os.walk(root):
        for name in [None] + dirs + files:
            p = top if name is None else os.path.join(top, name)
            if name is None and top != str(root):
                continue  # (each directory is checked from its parent's listing)
            st = os.lstat(p)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                bad.append(f"{p} link")
            elif stat.S_ISDIR(st.st_mode) and mode != 0o700:
                bad.append(f"{p} {mode:04o} dir")
            elif not stat.S_ISDIR(st.st_mode) and mode & 0o077:
                bad.append(f"{p} {mode:04o} {'file' if stat.S_ISREG(st.st_mode) else 'other'}")
    return bad


def _big(n):
    return b"x" * n


def test_the_whole_session_is_private_and_big_results_go_with_it(tmp_path):
    """umask 022, a local pilot: tasks (their own files and directories too), a function call
    with a large result (a file of its own), one whose result nobody reads. Every file under
    the session directory -- the agent's log, the keeper's files, spool, task sandboxes, the
    function pool's -- is 0600 or stricter, every directory 0700; once the session is closed
    no functions/*.result is left. (Before: agent.log, the tasks' and the pool's files 0644
    in 0755 directories, and the results stayed.)"""
    old = os.umask(0o022)
    try:
        path = tmp_path / "s"
        with pf.Session(path=path) as s:
            pilot, tmgr = start_pilot(s, runtime="5m")
            tasks = tmgr.submit_tasks([pf.TaskDescription(
                executable="/bin/sh",
                arguments=["-c", "echo out; echo err >&2; mkdir -p made/deeper; echo x > made/f"])
                for _ in range(4)])
            read, unread = tmgr.submit_tasks([
                pf.TaskDescription(function=_big, args=(1 << 20,)),
                pf.TaskDescription(function=_big, args=(2 << 20,))])
            assert tmgr.wait_tasks([t.uid for t in tasks + [read, unread]], timeout=60) == \
                [pf.DONE] * 6, [t.reason for t in tasks + [read, unread]]
            assert read.result == b"x" * (1 << 20)
            results = list(Path(pilot.sandbox).rglob("*.result"))
            assert len(results) == 2, results  # (the large results did go by file)
            bad = not_private(path)
            assert bad == [], "\n".join(bad)
    finally:
        os.umask(old)
    bad = not_private(path)
    assert bad == [], "\n".join(bad)
    assert list(path.rglob("*.result")) == []
    assert read.result == b"x" * (1 << 20)  # (read before the close: still there)
