"""A node executor's credential (agent/node_keys.py) as pieces: the step secret it reads from
its stdin, the key it derives, and that a process of the same user cannot read a concealed
process through /proc (what keeps the derived key from the pilot's tasks)."""

from __future__ import annotations

import os
import pwd

import pytest
import zmq

from pilotfish.agent.node_keys import STEP_BYTES, conceal, derive, read_step, step_pipe


def test_the_step_secret_goes_through_a_pipe_and_stdin_is_null_after():
    secret = os.urandom(STEP_BYTES)
    r = step_pipe(secret)
    saved = os.dup(0)
    try:
        os.dup2(r, 0)
        os.close(r)
        assert read_step() == secret
        assert os.path.samestat(os.fstat(0), os.stat(os.devnull))
    finally:
        os.dup2(saved, 0)
        os.close(saved)


@pytest.mark.parametrize(
    "given, says",
    [
        (b"", "none: stdin ended"),
        (b"abc\n", "this one has 3 bytes"),
        (b"zz" * STEP_BYTES + b"\n", f"this one has {2 * STEP_BYTES} bytes"),
        (b"00" * (STEP_BYTES + 1) + b"\n", f"this one has {2 * STEP_BYTES + 2} bytes"),
    ],
)
def test_a_bad_step_secret_is_refused_naming_what_is_wrong_not_what_came(given, says):
    r, w = os.pipe()
    os.write(w, given)
    os.close(w)
    with pytest.raises(ValueError) as e:
        read_step(r)
    assert "step secret" in str(e.value) and says in str(e.value), str(e.value)
    if given.strip():
        assert given.strip().decode() not in str(e.value)  # (a secret is never echoed)
    os.close(r)


def test_no_step_secret_in_time_says_so():
    r, w = os.pipe()
    with pytest.raises(TimeoutError, match="no step secret in 0.2 s"):
        read_step(r, timeout_s=0.2)
    os.close(r)
    os.close(w)


def test_each_node_and_each_step_has_its_own_key():
    a, b = os.urandom(STEP_BYTES), os.urandom(STEP_BYTES)
    pub, sec = derive(a, "n2")
    assert derive(a, "n2") == (pub, sec) and zmq.curve_public(sec) == pub
    assert len({derive(a, "n2")[0], derive(a, "n3")[0], derive(b, "n2")[0]}) == 3


def _as_nobody(then) -> int:
    """Fork a child that becomes user nobody (dumpable, as any process of a user) and runs
    then(); its pid. The caller waits for it."""
    from pilotfish.agent.node_keys import PR_GET_DUMPABLE, PR_SET_DUMPABLE, _prctl

    uid = pwd.getpwnam("nobody").pw_uid
    _prctl(PR_GET_DUMPABLE, 0)  # (ctypes loaded here: nobody cannot read root's site-packages)
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            _prctl(PR_SET_DUMPABLE, 1)  # (a change of user makes a process non-dumpable)
            code = then()
        finally:
            os._exit(code)
    return pid


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as user nobody")
def test_a_process_of_the_same_user_cannot_read_a_concealed_one():
    """The executor conceals itself before it reads its step secret: then no process of its
    user (a task of the pilot) reads its environment, memory or descriptors through /proc. A
    process that did not conceal itself is readable (the control)."""
    import signal
    import time

    def hold(hide):
        def run():
            if hide:
                conceal()
            os.write(w, b"x")
            time.sleep(60)
            return 0

        return run

    r, w = os.pipe()
    plain, hidden = _as_nobody(hold(False)), _as_nobody(hold(True))
    try:
        import select

        ready = b""
        while len(ready) < 2 and select.select([r], [], [], 10)[0]:
            ready += os.read(r, 2)  # (both are nobody's, one concealed)
        assert ready == b"xx", "a child of nobody's did not start"

        def reads(pid):
            def run():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        f.read()
                    with open(f"/proc/{pid}/mem", "rb"):
                        pass
                    os.listdir(f"/proc/{pid}/fd")
                except PermissionError:
                    return 3
                return 0

            return run

        got = {}
        for name, pid in (("plain", plain), ("hidden", hidden)):
            reader = _as_nobody(reads(pid))
            got[name] = os.waitstatus_to_exitcode(os.waitpid(reader, 0)[1])
        assert got == {"plain": 0, "hidden": 3}, got
    finally:
        for pid in (plain, hidden):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
