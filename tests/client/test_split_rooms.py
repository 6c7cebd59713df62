"""The rooms PilotManager's concerns were split into (issue 40): client/launching.py (an
agent's configuration, its batch job, the thread that follows batch jobs) and
client/resume.py (what a resumed session's journal says, which journaled pilot a
description submitted again matches). Each is used here through what it declares, with
real parts: real sessions and journals, real batch jobs (local processes), the watcher's
real thread; the host a JobWatcher is handed is the interface it declares (WatchHost).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import pilotfish as pf
from pilotfish._journal import Journal, task_record
from pilotfish.batch import LocalJob
from pilotfish.client.launching import Followed, JobWatcher, WatchHost, agent_config
from pilotfish.client.resume import Resumed, changed_fields

SIM = {"resource": "simulated", "nodes": 1, "cores_per_node": 4, "runtime": "10m"}


def _until(cond, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


# -- launching.agent_config ------------------------------------------------------------------
def test_each_agent_of_a_secure_session_gets_a_key_pair_of_its_own(tmp_path):
    d = pf.PilotDescription(SIM)
    with pf.Session(path=tmp_path / "s") as s:
        one, public_one = agent_config(s, "pilot.0000", d, str(tmp_path / "a"))
        two, public_two = agent_config(s, "pilot.0001", d, str(tmp_path / "b"))
        assert one.curve is not None and two.curve is not None
        assert public_one == one.curve.public.encode() != public_two
        assert one.curve.secret != two.curve.secret
        assert one.curve.server == s.plane.bridge.public_key.decode()
        assert (one.pilot_uid, one.sandbox, one.address) == (
            "pilot.0000",
            str(tmp_path / "a"),
            s.address,
        )
        assert one.description == d.as_dict()
    with pf.Session(path=tmp_path / "open", secure=False) as s:
        config, public = agent_config(s, "pilot.0000", d, str(tmp_path / "c"))
        assert config.curve is None and public is None


# -- launching.JobWatcher --------------------------------------------------------------------
class _Pilot:
    """What the watcher follows: a uid, a state, a sandbox, a job (as a manager keeps them)."""

    def __init__(self, uid, sandbox, job=None, state="LAUNCHING", bye=False):
        self.uid, self.sandbox, self.job, self.state, self.bye = uid, sandbox, job, state, bye


class _Host:
    """A WatchHost's parts, recording what the watcher says."""

    def __init__(self, pilots, last_seen=None, agent_timeout=60.0):
        self.pilots = pilots
        self.said: list[tuple] = []
        self.last_seen = last_seen or {}
        self.agent_timeout = agent_timeout
        self.lock = threading.Lock()

    def host(self) -> WatchHost:
        return WatchHost(
            pilots=lambda: list(self.pilots),
            view=lambda p: Followed(p.uid, p.state, p.sandbox, p.job, p.bye, False),
            finish=lambda p, state, msg: self._say("finish", p, state, msg),
            lost=lambda p, why: self._say("lost", p, why),
            last_seen=lambda: self.last_seen,
            agent_timeout=self.agent_timeout,
            intervals=lambda: (0.05, 0.05),
        )

    def _say(self, what, pilot, *args):
        with self.lock:
            self.said.append((what, pilot.uid, *args))
            pilot.state = "FAILED" if what == "lost" or args[0] == "FAILED" else args[0]


def test_the_watcher_says_a_batch_job_ended_without_its_agent(tmp_path):
    d = pf.PilotDescription({"resource": "local", "nodes": 1, "runtime": "10m"})
    running = LocalJob("pilot.0000", d, str(tmp_path / "a"), ["/bin/sh", "-c", "sleep 30"])
    ended = LocalJob("pilot.0001", d, str(tmp_path / "b"), ["/bin/sh", "-c", "exit 3"])
    running.submit()
    ended.submit()
    rec = _Host(
        [_Pilot("pilot.0000", running.sandbox, running), _Pilot("pilot.0001", ended.sandbox, ended)]
    )
    watcher = JobWatcher(rec.host())
    watcher.start()
    watcher.start()  # (once)
    try:
        assert _until(lambda: rec.said), "the watcher said nothing of a job that ended"
        time.sleep(0.3)  # (more looks: the running job is not reported)
        assert len(rec.said) == 1, rec.said
        what, uid, state, message = rec.said[0]
        assert (what, uid, state) == ("finish", "pilot.0001", "FAILED")
        assert message.startswith("agent process ended with exit code 3"), message
    finally:
        watcher.stop()
        running.cancel()


def test_the_watcher_says_a_silent_agent_is_lost_and_a_reattached_ones_bye_ends_it(tmp_path):
    silent = _Pilot("pilot.0000", str(tmp_path), job=None, state="ACTIVE")
    gone = _Pilot("pilot.0001", str(tmp_path), job=None, state="ACTIVE", bye=True)
    rec = _Host(
        [silent, gone],
        last_seen={"pilot.0000": time.monotonic() - 100, "pilot.0001": time.monotonic() + 1000},
        agent_timeout=10.0,
    )
    watcher = JobWatcher(rec.host())
    watcher.start()
    try:
        assert _until(lambda: len(rec.said) >= 2), rec.said
    finally:
        watcher.stop()
    said = sorted(rec.said)
    assert said[0] == ("finish", "pilot.0001", "DONE", None)
    assert said[1][:2] == ("lost", "pilot.0000")
    assert said[1][2].startswith("agent silent for 1") and "(bound 10s)" in said[1][2]


# -- resume.Resumed ----------------------------------------------------------------------------
def test_a_resumed_journal_matches_pilots_in_order_as_submitted(tmp_path):
    path = tmp_path / "s"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        tmgr = pf.TaskManager(s)
        (p0, p1) = pmgr.submit_pilots([pf.PilotDescription(SIM), pf.PilotDescription(SIM)])
        tmgr.add_pilots([p0, p1])
        done = tmgr.submit_tasks(
            pf.TaskDescription(executable="/bin/true", pilot=p0.uid, duration=0.1)
        )
        done.wait(timeout=60)
        uids = (p0.uid, p1.uid, done.uid, "task.000001")
    # a task sent to the second pilot as the client was killed: journaled, no final
    journal = Journal(str(path / "journal"), repair=True)
    journal.write([task_record(uids[3], uids[1], {})])
    journal.close()
    r = Resumed.load(str(path))
    assert [u for u, _, _ in r.pilots] == [uids[0], uids[1]]
    assert r.unfinished_on(uids[0]) == [] and r.unfinished_on(uids[1]) == [uids[3]]
    assert r.next_pilot == 2 and r.next_task == 2

    longer = pf.PilotDescription({**SIM, "runtime": "20m"})
    m, replaced = r.match_pilot(longer)
    assert replaced is None and m is not None
    assert (m.uid, m.sandbox) == (uids[0], str(path / uids[0]))
    assert m.description.runtime == 600.0  # as it was submitted: a live agent runs that
    assert (
        m.changed
        == "runtime: 600.0 -> 1200.0"
        == changed_fields(pf.PilotDescription(SIM).as_dict(), longer.as_dict())
    )
    assert m.public_key is not None  # (a secure session's agent key, from its agent.json)

    os.unlink(path / uids[1] / "agent.json")  # its agent cannot be known: a new one replaces it
    assert r.match_pilot(pf.PilotDescription(SIM)) == (None, uids[1])
    assert r.match_pilot(pf.PilotDescription(SIM)) == (None, None)  # all matched: new pilots
    assert r.pilots_used == 2


def test_resumed_pilot_keys_are_the_agents_public_keys(tmp_path):
    path = tmp_path / "s"
    with pf.Session(path=path) as s:
        p = pf.PilotManager(s).submit_pilots(pf.PilotDescription(SIM))
        p.wait(pf.ACTIVE, timeout=60)
    r = Resumed.load(str(path))
    m, _ = r.match_pilot(pf.PilotDescription(SIM))
    assert r.pilot_keys() == {p.uid: m.public_key}


def test_an_open_session_journals_pilots_without_keys(tmp_path):
    path = tmp_path / "s"
    with pf.Session(path=path, secure=False) as s:
        pf.PilotManager(s).submit_pilots(pf.PilotDescription(SIM)).wait(pf.ACTIVE, timeout=60)
    r = Resumed.load(str(path))
    assert r.pilot_keys() == {}
    m, replaced = r.match_pilot(pf.PilotDescription(SIM))
    assert m is not None and m.public_key is None and m.changed is None and replaced is None


# -- elastic.GrownUnits --------------------------------------------------------------------------
def _units(*sizes):
    from pilotfish import _wire
    from pilotfish.client.elastic import GrownUnits

    g = GrownUnits("pilot.0000")
    for size in sizes:
        unit = g.name_next()
        g.add(unit, [_wire.NodeInfo(f"{unit}.n{i}", 4, 0, 1024) for i in range(size)], None)
    return g


def test_grown_units_are_given_back_whole_newest_first():
    from pilotfish._errors import DescriptionError

    g = _units(1, 2)
    assert g.select(2, set()) == ["grow1"] and g.select(3, set()) == ["grow1", "grow0"]
    assert g.select(["grow0.n0"], set()) == ["grow0"]
    with pytest.raises(DescriptionError, match=r"in units of \[2, 1\] \(newest first\)"):
        g.select(1, set())
    with pytest.raises(DescriptionError, match=r"given back whole: also name \['grow1.n1'\]"):
        g.select(["grow1.n0"], set())
    with pytest.raises(DescriptionError, match="are the pilot's own nodes"):
        g.select(["n7"], {"n7"})
    with pytest.raises(DescriptionError, match="no such node in pilot.0000"):
        g.select(["n8"], {"n7"})
    with pytest.raises(DescriptionError, match="has no grown nodes"):
        _units().select(1, set())


def test_a_unit_the_agent_no_longer_lists_leaves_and_its_job_ends(tmp_path):
    from pilotfish import _wire
    from pilotfish.client.elastic import GrownUnits

    d = pf.PilotDescription({"resource": "local", "nodes": 1, "runtime": "10m"})
    job = LocalJob("pilot.0000.grow0", d, str(tmp_path), ["/bin/sh", "-c", "sleep 30"])
    job.submit()
    g = GrownUnits("pilot.0000")
    unit = g.name_next()
    g.add(unit, [_wire.NodeInfo("g.n0", 4, 0, 1024)], job)
    got: list = []
    state = ["ACTIVE"]
    waiter = threading.Thread(target=lambda: got.append(g.wait(unit, None, lambda: state[0])))
    g.expect([unit])
    waiter.start()
    msg = _wire.Resized(unit, [_wire.NodeInfo("n0", 4, 0, 1024)], 1.0)
    g.resized(msg)  # its node is no longer listed: it left
    assert g.node_lists() == [] and g.nodes_of(unit) == []
    assert _until(lambda: job.poll()[0] == "CANCELED")
    g.answered(msg)
    waiter.join(10)
    assert got == [msg]
    # a pilot that ends wakes whoever waits for a resize, with why
    errors: list = []

    def wait_in_vain():
        try:
            g.wait("grow9", None, lambda: state[0])
        except pf.PilotfishError as e:
            errors.append(str(e))

    waiter = threading.Thread(target=wait_in_vain)
    waiter.start()
    state[0] = "FAILED"
    g.end()
    waiter.join(10)
    assert errors == ["pilot.0000 ended (FAILED) during a resize"]
