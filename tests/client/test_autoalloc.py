"""An allocation policy end to end on this machine (client/autoalloc.py): local pilots
requested while tasks wait, fed from the client, ended once idle; a batch system that says
no; its events, explain (the task's and `pilotfish explain`'s), its settings checked. The
rules themselves are tests/client/test_autoalloc_policy.py's; the Slurm end to end is
tests/batch/test_autoalloc_slurm.py."""

from __future__ import annotations

import collections
import json
import os
import time

import pytest
from click.testing import CliRunner

import pilotfish as pf
from pilotfish import _events as E
from pilotfish._events import read_all_events
from pilotfish.cli import main as cli

LOCAL = dict(resource="local", nodes=1, cores_per_node=2, runtime="10m")


def events(s) -> list:
    s.events.flush()
    return read_all_events(os.path.join(s.path, "client.events"))


def test_a_burst_gets_pilots_and_they_end_once_idle(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(
            pf.PilotDescription(**LOCAL), max_pilots=2, idle_timeout="1s", tick="0.2s"
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/sleep", arguments=["0.3"]) for _ in range(16)]
        )
        e = tasks[-1].explain()  # at once: no pilot has room for it yet
        assert e["where"] == "not sent" and "waiting for an allocation (" in str(e), str(e)
        assert tmgr.wait_tasks(timeout=60) == [pf.DONE] * 16
        assert len(pol.pilots) == 2  # at most max_pilots
        for p in pol.pilots:
            assert p.wait(timeout=30) == pf.DONE, p.reason
            assert p.reason.startswith(f"{pol.uid}: idle for "), p.reason
        used = collections.Counter(t.pilot for t in tasks)
        assert set(used) == {p.uid for p in pol.pilots}  # both took work
        evs = events(s)
        mine = [(n, d) for _, u, n, d in evs if u == pol.uid]
        subs = [d for n, d in mine if n == E.ALLOC_SUBMIT]
        assert len(subs) == 2 and all("wait that no pilot will take" in d for d in subs)
        assert sorted(d.split(":")[0] for n, d in mine if n == E.ALLOC_END) == sorted(used)
        routed = {u: d for _, u, n, d in evs if n == E.ROUTED}
        assert routed == {t.uid: t.pilot for t in tasks}  # where each held task went
        assert pol.status["requested"] == 2 and pol.status["waiting"] == 0
    # the dashboard shows the allocations; the report counts the cores allocated but idle
    from pilotfish.analytics.dashboard import SessionWatch
    from pilotfish.analytics.metrics import compute_metrics

    watch = SessionWatch(str(s.path))
    watch.refresh()
    shown = watch.pilots_json()["allocations"][pol.uid]
    assert (shown["requested"], shown["ended"], shown["running"]) == (2, 2, 0), shown
    cores = compute_metrics(str(s.path))["utilization"]["cores"]
    assert 0 < cores["allocated_idle_s"] < cores["available_s"], cores


def test_a_batch_system_that_says_no(tmp_path):
    """Every submission fails (no batch system here that takes it): the error is quoted,
    requests back off and pause after max_failures; the tasks wait, none is lost, and
    explain says why; they end CANCELED only when the session closes."""
    tmpl = pf.PilotDescription(
        resource="slurm", nodes=1, cores_per_node=2, runtime="10m", queue="no-such-partition"
    )
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pol = pmgr.autoalloc(
            tmpl, max_pilots=2, idle_timeout="1s", tick="0.1s", backoff="0.2s", max_failures=3
        )
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(5)])
        deadline = time.monotonic() + 60
        while pol.status["paused"] is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # (paused: nothing more is requested, however long it waits)
        assert pol.status["paused"], pol.status
        assert len(pol.pilots) == 3
        words = pol.pilots[-1].reason
        assert words.startswith("cannot start the pilot: ")
        mine = [(n, d) for _, u, n, d in events(s) if u == pol.uid]
        fails = [d for n, d in mine if n == E.ALLOC_FAIL]
        assert len(fails) == 3 and words in fails[-1]
        assert [n for n, _ in mine].count(E.ALLOC_PAUSE) == 1
        assert all(t.state == pf.SCHEDULING for t in tasks)  # none lost
        text = str(tasks[0].explain())
        assert (
            "waiting for an allocation (0 queued, 0 of 2 running); the policy is paused: "
            "3 submissions failed in a row" in text
        ), text
        out = CliRunner().invoke(cli, ["explain", str(s.path), tasks[0].uid])
        assert out.exit_code == 0, out.output
        assert f"{pol.uid}: waiting for an allocation" in out.output and "paused" in out.output
        with open(os.path.join(s.path, "autoalloc.json")) as f:
            assert json.load(f)[pol.uid]["paused"]
        assert oct(os.stat(os.path.join(s.path, "autoalloc.json")).st_mode & 0o777) == "0o600"
    assert {t.state for t in tasks} == {pf.CANCELED}
    assert tasks[0].reason == "the policy closed before an allocation took it"


def test_settings_and_tasks_it_cannot_take_are_refused_by_name(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        tmpl = pf.PilotDescription(**LOCAL)
        for kw, field in [
            ({"max_pilots": 0}, "max_pilots"),
            ({"idle_timeout": "soon"}, "idle_timeout"),
            ({"max_nodes": 0}, "max_nodes"),
            ({"parallelism": 2}, "parallelism"),
            ({"max_queue": 1}, "max_queue"),
            ({"min_nodes": 2}, "min_nodes"),
        ]:
            with pytest.raises(pf.DescriptionError) as err:
                pmgr.autoalloc(tmpl, **kw)
            assert err.value.field == field, (kw, err.value)
        pol = pmgr.autoalloc(tmpl, max_pilots=1, idle_timeout="1s", max_nodes=1)
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pol)
        for d, field in [
            (dict(executable="/bin/true", ranks=3, cores_per_rank=2), "ranks"),
            (dict(executable="/bin/true", cores_per_rank=3), "cores_per_rank"),
            (dict(executable="/bin/true", pilot="pilot.0000"), "pilot"),
            (dict(executable="/bin/true", duration="1h"), "duration"),
        ]:
            with pytest.raises(pf.DescriptionError) as err:
                tmgr.submit_tasks(
                    [pf.TaskDescription(executable="/bin/true"), pf.TaskDescription(**d)]
                )
            assert err.value.field == field and err.value.index == 1, err.value
        assert len(tmgr) == 0 and pol.pilots == []  # nothing was held, nothing requested


def test_pilotfish_run_takes_the_same_settings(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text(
        "pilot: {resource: local, nodes: 1, cores_per_node: 2, runtime: 10m}\n"
        "autoalloc: {max_pilots: 2, idle_timeout: 1s, max_nodes: 2}\n"
        "tasks:\n  - {name: a, count: 12, executable: /bin/sleep, arguments: ['0.2']}\n"
        "  - {name: wide, count: 1, executable: /bin/true, ranks: 2,"
        " cores_per_rank: 2}\n"
    )
    out = CliRunner().invoke(cli, ["run", "-q", "--sessions", str(tmp_path / "ss"), str(wl)])
    assert out.exit_code == 0, out.output
    assert "tasks: 13 total, 13 done" in out.output
    pilots = [line for line in out.output.splitlines() if line.startswith("pilot ")]
    assert 1 <= len(pilots) <= 2 and all("alloc." in p for p in pilots), out.output
    assert any("(2 nodes," in p for p in pilots), out.output  # the wide task: 2 nodes
    wl.write_text(wl.read_text().replace("max_pilots: 2", "max_pilots: many"))
    out = CliRunner().invoke(cli, ["validate", str(wl)])
    assert out.exit_code == 2 and "autoalloc: AutoAlloc.max_pilots = 'many'" in out.output, (
        out.output
    )
    wl.write_text(
        wl.read_text()
        .replace("max_pilots: many", "max_pilots: 2")
        .replace("max_nodes: 2", "max_nodes: 1")
    )
    out = CliRunner().invoke(cli, ["validate", str(wl)])
    assert out.exit_code == 2 and "ranks" in out.output, out.output  # 2 nodes > max_nodes


def test_simulate_runs_the_policy_on_a_model_of_the_queue(tmp_path):
    """`pilotfish simulate --autoalloc`: the workload's policy, a queue wait, no pilot."""
    wl = tmp_path / "w.yaml"
    wl.write_text(
        "pilot: {resource: slurm, nodes: 2, cores_per_node: 16, runtime: 1h}\n"
        "autoalloc: {max_pilots: 3, idle_timeout: 30s, max_nodes: 4}\n"
        "tasks:\n  - {name: s, count: 600, executable: /bin/true, duration: 20}\n"
        "  - {name: w, count: 20, executable: /bin/true, ranks: 2, cores_per_rank: 16,"
        " duration: 20}\n"
    )
    out = CliRunner().invoke(cli, ["simulate", "--autoalloc", "--queue-wait", "30s", str(wl)])
    assert out.exit_code == 0, out.output
    assert "620 tasks done" in out.output and "2 requested, at most 2 at once" in out.output
    assert "ran 30-" in out.output  # (the queue wait)
    wl.write_text(wl.read_text().replace(", duration: 20}", "}", 1))
    out = CliRunner().invoke(cli, ["simulate", "--autoalloc", str(wl)])
    assert out.exit_code == 2 and "duration is required" in out.output, out.output


def test_the_batch_systems_words_reach_events_and_explain_bounded_and_inert(tmp_path):
    """A rejection's text is the batch system's (or whoever wrote its error): a terminal
    escape or a megabyte of it reaches the events, explain and autoalloc.json escaped and
    cut."""
    from types import SimpleNamespace

    from pilotfish.client.autoalloc import AutoAlloc

    with pf.Session(path=tmp_path / "s") as s:
        pol = AutoAlloc(pf.PilotManager(s), pf.PilotDescription(**LOCAL), 1, "1s")
        evil = "sbatch: error: \x1b]0;owned\x07\x1b[31mred\u202e" + "x" * 1_000_000
        gone = SimpleNamespace(
            uid="pilot.9999",
            state=pf.FAILED,
            reason=evil,
            history=[(pf.NEW, 0.0), (pf.FAILED, 1.0)],
            description=pf.PilotDescription(**LOCAL),
        )
        why = pol._view(gone, 2.0).why
        assert len(why) <= 2100 and "\x1b" not in why and "\x07" not in why
        assert "\u202e" not in why and "sbatch: error: " in why


def test_a_policy_beside_the_users_own_pilot(tmp_path):
    """A TaskManager with a pilot of its own and a policy: the own pilot takes tasks first
    and is never ended by the policy; what it cannot hold gets the policy's allocation, which
    ends once idle. The own pilot's max_pilots is not spent."""
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        own = pmgr.submit_pilots(pf.PilotDescription(**LOCAL))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(own)
        pol = pmgr.autoalloc(
            pf.PilotDescription(**LOCAL), max_pilots=1, idle_timeout="1s", tick="0.2s"
        )
        tmgr.add_pilots(pol)
        assert own.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/sleep", arguments=["1"]) for _ in range(12)]
        )
        assert tmgr.wait_tasks(timeout=60) == [pf.DONE] * 12
        used = collections.Counter(t.pilot for t in tasks)
        assert len(pol.pilots) == 1 and set(used) == {own.uid, pol.pilots[0].uid}, used
        assert pol.pilots[0].wait(timeout=30) == pf.DONE
        time.sleep(1.5)  # past the idle timeout: the user's pilot lives on
        assert own.state == pf.ACTIVE
        t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        assert t.wait(timeout=30) == pf.DONE and t.pilot == own.uid  # no new allocation
        assert len(pol.pilots) == 1
        ends = [d for _, u, n, d in events(s) if u == pol.uid and n == E.ALLOC_END]
        assert ends and all(d.startswith(pol.pilots[0].uid) for d in ends), ends
