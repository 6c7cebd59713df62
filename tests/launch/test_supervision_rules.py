"""The supervisor's decision table and the rank-notes format, as units (agent/supervisor.py,
launch/rank_notes.py). The same rules run for real against PRRTE in test_prrte_supervision.py;
here each row is pinned with stand-ins for the agent, its tasks and a DVM."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from launch_cases import SLURM

from pilotfish import _mpi
from pilotfish._wire import TaskSpec
from pilotfish.agent.tasks import AgentTask
from pilotfish.agent.supervisor import LaunchRecord, Supervisor
from pilotfish.launch import get_launcher
from pilotfish.launch.base import LaunchHandle, SupervisedLaunchMethod
from pilotfish.launch.prrte import Dvm
from pilotfish.launch.rank_notes import Note, RankNotes, address_from_uri, parse, wrap_lines


class Events:
    def __init__(self):
        self.seen = []
        self.times = {}

    def record(self, uid, name, detail=None, t=None):
        self.seen.append((uid, name, detail))
        self.times[name] = t

    def record_many(self, events):
        self.seen.extend((uid, name, detail) for _, uid, name, detail in events)


class Agent:
    """What the supervisor uses of its host (agent/ports.Host)."""

    uid = "pilot.0000"

    def __init__(self):
        self.events = Events()
        self.relaunched = []
        self.killed = []

    def relaunch(self, tasks):
        self.relaunched.extend(tasks)

    def signal(self, tasks, sig):
        self.killed.extend((t.spec.uid, sig) for t in tasks)

    def cancel(self, uids, reason="canceled by the user", running_state="CANCELED",
               waiting_state="CANCELED"):
        self.canceled = getattr(self, "canceled", []) + [(u, running_state, reason) for u in uids]


class NoNotes:
    """Rank notes on, none arrived."""

    def read(self):
        return []


class Prrte(SupervisedLaunchMethod):
    """A prrte launch method without processes: a DVM list, notes on, thresholds."""

    name = "prrte"
    launch_retries = 2
    max_strikes = 3
    hang_grace = 10.0
    launch_timeout = 30.0
    recycle_after = 1000
    notes = NoNotes()

    def __init__(self):
        self.dvms = [Dvm(1, "/nowhere/1")]
        self.replaced = []
        self.remote_signals = []

    def alive(self, d):
        return d.state != "dead"

    @property
    def daemons(self):
        return self.dvms

    def daemon_of_pid(self, pid):
        return next((d for d in self.dvms if d.pid == pid), None)

    def signal_remote(self, host, pids, sig):
        self.remote_signals.append((host, sorted(pids), sig))
        return True

    def replace(self, old, retire):
        self.replaced.append((old.number, retire))
        old.state = "retiring" if retire else "dead"
        new = Dvm(old.number + 1, "/nowhere")
        self.dvms.append(new)
        return new

    def retryable(self, code, stderr=None):
        return False

    def reap_daemons(self):
        pass


def launched_task(sup, lm, ranks=1, n=0):
    t = AgentTask(TaskSpec(uid=f"task.{n:06d}", executable="x", ranks=ranks), n)
    t.lm = lm
    t.procs = [1000 + n]
    t.running = 1
    t.launch = LaunchRecord()
    t.launch.new_attempt(LaunchHandle(lm.dvms[-1], f"task.{n:06d}/1.{n}"))
    sup.launched([t])
    return t


def ended(t, code=None, sig=None):
    t.running = 0
    t.exit_code, t.signal = code, sig


@pytest.fixture
def setup():
    agent = Agent()
    sup = Supervisor(agent)
    lm = Prrte()
    sup.watch(lm)
    return agent, sup, lm


def test_success_is_final(setup):
    agent, sup, lm = setup
    t = launched_task(sup, lm)
    t.launch.started[0] = ("h", 1)
    ended(t, 0)
    assert sup.exited([t]) == [t] and not agent.relaunched
    assert lm.dvms[0].running == 0


def test_failure_before_any_rank_started_is_relaunched_then_given_up(setup):
    agent, sup, lm = setup
    t = launched_task(sup, lm)
    ended(t, 1)
    assert sup.exited([t]) == [] and agent.relaunched == [t]
    assert agent.events.seen[-1][1] == "launch_retry"
    assert "before any rank started" in agent.events.seen[-1][2]
    t.launch.new_attempt(LaunchHandle(lm.dvms[-1], "k2"))
    t.launch.attempt = lm.launch_retries + 1  # out of retries
    ended(t, 1)
    assert sup.exited([t]) == [t]
    assert "gave up after 3 launches" in t.reason


def test_a_rank_that_started_makes_a_failure_final(setup):
    agent, sup, lm = setup
    t = launched_task(sup, lm, ranks=2)
    t.launch.started[0] = ("h", 1)
    ended(t, 255)
    assert sup.exited([t]) == [t] and not agent.relaunched
    assert t.exit_code == 255


def test_ranks_exit_codes_win_over_the_launchers(setup):
    """Every rank noted its end: a launcher failure after that does not change the result."""
    _, sup, lm = setup
    ok = launched_task(sup, lm, ranks=2, n=1)
    ok.launch.started.update({0: ("h", 1), 1: ("h", 2)})
    ok.launch.ended.update({0: 0, 1: 0})
    ended(ok, 255)
    bad = launched_task(sup, lm, ranks=2, n=2)
    bad.launch.started.update({0: ("h", 1), 1: ("h", 2)})
    bad.launch.ended.update({0: 0, 1: 7})
    ended(bad, 255)
    assert sup.exited([ok, bad]) == [ok, bad]
    assert (ok.exit_code, bad.exit_code) == (0, 7)


def test_strikes_in_a_row_bring_a_fresh_dvm(setup):
    agent, sup, lm = setup
    tasks = [launched_task(sup, lm, n=i) for i in range(3)]
    for t in tasks:
        ended(t, 1)
    sup.exited(tasks)
    assert lm.replaced == [(1, True)]  # retired: what still runs there may finish
    assert [e[1] for e in agent.events.seen].count("launcher_restart") == 1


def test_a_started_launch_resets_the_strikes(setup):
    _, sup, lm = setup
    a, b, c = (launched_task(sup, lm, n=i) for i in range(3))
    ended(a, 1)
    sup.exited([a])
    b.launch.started[0] = ("h", 1)
    ended(b, 0)
    sup.exited([b])
    ended(c, 1)
    sup.exited([c])
    assert lm.dvms[0].strikes == 1 and not lm.replaced


def test_dvm_death_kills_its_launches_and_judges_them(setup):
    agent, sup, lm = setup
    d = lm.dvms[0]
    d.pid = 4242
    waiting = launched_task(sup, lm, n=1)
    running = launched_task(sup, lm, n=2, ranks=2)
    running.launch.started.update({0: ("elsewhere", 77), 1: ("elsewhere", 78)})
    done = launched_task(sup, lm, n=3)
    done.launch.started[0] = ("elsewhere", 79)
    done.launch.ended[0] = 0
    sup.daemon_exited(4242, -1, 9)
    assert lm.replaced == [(1, False)] and d.state == "dead"
    assert {uid for uid, _ in agent.killed} == {"task.000001", "task.000002", "task.000003"}
    for t in (waiting, running, done):
        ended(t, None, 9)
    assert sup.exited([waiting, running, done]) == [running, done]
    assert agent.relaunched == [waiting]
    assert "was lost while the task ran (2 of 2 ranks started, 0 ended)" in running.reason
    assert lm.remote_signals == [("elsewhere", [77, 78], 9)]  # its ranks on other nodes
    assert (done.exit_code, done.signal) == (0, None)


def test_hung_launch_is_killed_after_the_grace(setup):
    agent, sup, lm = setup
    t = launched_task(sup, lm, ranks=2)
    key = t.launch.handle.key

    class NotesIn:
        def read(self):
            return [Note("S", key, 0, 11, "h", 1700000000.5), Note("S", key, 1, 12, "h", 1.0),
                    Note("E", key, 0, 0, ""), Note("E", key, 1, 3, "")]
    lm.notes = NotesIn()
    sup.read_notes(lm)
    # the payload runs from the first rank's start: launch_ok at the time its note carries
    assert [e for e in agent.events.seen if e[1] == "launch_ok"] == [(t.spec.uid, "launch_ok", "h")]
    assert agent.events.times["launch_ok"] == 1700000000.5
    sup.tick(sup._hang_checks[0][0] - 1)
    assert not t.launch.hung
    sup.tick(sup._hang_checks[0][0] + 0.1)
    assert t.launch.hung and agent.killed == [(t.spec.uid, 9)]
    assert agent.events.seen[-1][1] == "launch_hung"
    ended(t, None, 9)
    assert sup.exited([t]) == [t] and (t.exit_code, t.signal) == (3, None)


def test_a_rank_that_never_starts_fails_the_launch_after_the_timeout(setup):
    """Across hosts a rank may never start while the others wait for it (in MPI_Init): once
    launch_timeout has passed since the first rank started, the task is stopped and FAILS
    with which ranks never started -- not held until its own timeout (or for ever)."""
    agent, sup, lm = setup
    t = launched_task(sup, lm, ranks=3)
    t.slots = [type("Slot", (), {"node": n})() for n in ("n1", "n2", "n2")]
    key = t.launch.handle.key

    class NotesIn:
        def read(self):
            return [Note("S", key, 0, 11, "n1", 1.0)]
    lm.notes = NotesIn()
    sup.read_notes(lm)
    lm.notes = NoNotes()
    first = sup._start_checks[0][0]
    sup.tick(first - 1)
    assert not getattr(agent, "canceled", [])
    sup.tick(first + 0.1)
    (uid, state, why), = agent.canceled
    assert (uid, state) == (t.spec.uid, "FAILED")
    assert why.startswith("launch failed: ranks 1, 2 of 3 never started (n2)"), why
    assert [e[1] for e in agent.events.seen][-1] == "launch_partial"
    # all ranks started in time: nothing happens
    t2 = launched_task(sup, lm, ranks=2, n=1)
    key2 = t2.launch.handle.key

    class BothIn:
        def read(self):
            return [Note("S", key2, 0, 11, "n1", 1.0), Note("S", key2, 1, 12, "n2", 1.0)]
    lm.notes = BothIn()
    sup.read_notes(lm)
    sup.tick(sup._start_checks[-1][0] + 1)
    assert len(agent.canceled) == 1


def test_canceled_launch_is_final_as_asked(setup):
    agent, sup, lm = setup
    t = launched_task(sup, lm)
    t.kill_reason = ("CANCELED", "canceled by the user")
    ended(t, None, 9)
    assert sup.exited([t]) == [t] and not agent.relaunched


# -- rank notes -----------------------------------------------------------------------------------

def test_note_format():
    tok = "5d41402abc4b2a76b9719d911017c592"
    assert parse(f"S {tok} task.000001/1.5 3 4242 n7", tok) == \
        Note("S", "task.000001/1.5", 3, 4242, "n7")
    assert parse(f"E {tok} task.000001/1.5 3 137", tok) == Note("E", "task.000001/1.5", 3, 137, "")
    assert parse(f"E {tok} task 3 x", tok) is None and parse("garbage", tok) is None
    assert parse("", tok) is None and parse(tok, tok) is None
    assert parse(f"S {tok} k/1.1 0 42 n7 1700000000.25", tok).t == 1700000000.25  # $EPOCHREALTIME
    assert parse(f"S {tok} k/1.1 0 42 n7 1700000000,25", tok).t == 1700000000.25  # comma locale
    assert parse(f"S {tok} k/1.1 0 42 n7 x", tok).t == 0.0
    # a note without the token, or with another, is no note (forged: issue 32, item 2)
    assert parse("E task.000001/1.5 3 0", tok) is None
    assert parse("E 00000000000000000000000000000000 task.000001/1.5 3 0", tok) is None
    assert parse(f"E {tok[:-1]} task.000001/1.5 3 0", tok) is None
    assert address_from_uri("prte-vm-1@0.0;tcp4://10.1.2.3,10.9.9.9:4567\n") == "10.1.2.3"
    assert address_from_uri("prte-vm-1@0.0;tcp6://[::1]:4567") is None


def test_notes_travel_from_bash_to_the_socket(tmp_path):
    notes = RankNotes("127.0.0.1")
    try:
        script = "\n".join(wrap_lines(notes.address, notes.port, "task.000009/2.7",
                                      "(echo hi; exit 5)"))  # a subshell, as build() does
        r = subprocess.run(["bash", "-c", script], env={"PILOTFISH_RANK": "1", "PATH": "/bin",
                                                        "PILOTFISH_NODE": "n7", **notes.env},
                           capture_output=True, text=True, timeout=30)
        # (the failed rank says so, as FAIL_FAST's shells do: the reason leads with it)
        assert (r.returncode, r.stdout, r.stderr) == (5, "hi\n",
                                                      "pilotfish: rank 1 exited with 5 on n7\n")
        assert _mpi.RANK_FAILED.search(r.stderr).groups() == ("1", "5", "n7")
        got = notes.read()
        assert [(n.kind, n.key, n.rank) for n in got] == [("S", "task.000009/2.7", 1),
                                                           ("E", "task.000009/2.7", 1)]
        assert got[0].host == socket.gethostname() and got[1].value == 5
        assert notes.token not in script  # never on a command line
        # the task itself does not see the token (the wrapper unset it)
        script = "\n".join(wrap_lines(notes.address, notes.port, "k/1.1",
                                      'echo "[${PILOTFISH_NOTE_TOKEN-}]"'))
        r = subprocess.run(["bash", "-c", script], env={"PATH": "/bin", **notes.env},
                           capture_output=True, text=True, timeout=30)
        assert r.stdout == "[]\n" and len(notes.read()) == 2
    finally:
        notes.close()


def test_forged_notes_are_dropped_and_counted():
    """What anyone who read the wrapper's command line in `ps` (address, port, launch key)
    can send: notes without the token -- the end of every rank with exit code 0 -- are no
    notes; the genuine ones still are."""
    notes = RankNotes("127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for rank in range(4):
                s.sendto(f"E task.000001/1.1 {rank} 0\n".encode(), (notes.address, notes.port))
                s.sendto(f"E {'0' * 32} task.000001/1.1 {rank} 0\n".encode(),
                         (notes.address, notes.port))
            s.sendto(f"E {notes.token} task.000001/1.1 0 3\n".encode(),
                     (notes.address, notes.port))
        deadline = time.monotonic() + 5
        got = []
        while len(got) < 1 and time.monotonic() < deadline:
            got += notes.read()
            time.sleep(0.01)
        got += notes.read()
        assert got == [Note("E", "task.000001/1.1", 0, 3, "")] and notes.dropped == 8
    finally:
        notes.close()


def test_srun_retries_only_steps_that_were_never_created():
    lm = get_launcher("srun", SLURM, {"jobid": "7"})
    assert lm.launch_retries == 2
    assert lm.retryable(1, "srun: error: Unable to create step for job 7: Socket timed out")
    assert not lm.retryable(1, "srun: error: Unable to create step for job 7: Job/step "
                               "already completing or completed")
    assert not lm.retryable(1, "Traceback: the task's own failure")
    assert not lm.retryable(1)


def test_noted_exit_prefers_the_rank_that_failed_by_itself():
    """One rank exits 1, PRRTE aborts the others (rank 0 dies of SIGPIPE: 141): the task's
    exit code is the 1 (seen: 'PMIx_Spawn failed' after a rank exited early)."""
    rec = LaunchRecord()
    rec.ended = {0: 141, 1: 0, 2: 1}
    assert rec.noted_exit() == 1
    rec.ended = {0: 0, 1: 143}
    assert rec.noted_exit() == 143
    rec.ended = {0: 0, 1: 0}
    assert rec.noted_exit() == 0
