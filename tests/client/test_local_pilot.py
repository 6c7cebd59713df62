"""End to end on real local pilots: agent process, ZeroMQ, Rust placer and spawner."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events


@pytest.mark.slow
def test_thousand_true_tasks_all_done(session):
    pmgr = pf.PilotManager(session)
    pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="10m"))
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(1000)])
    states = tmgr.wait_tasks(timeout=240)
    assert states.count(pf.DONE) == 1000, {s: states.count(s) for s in set(states)}
    assert all(t.exit_code == 0 for t in tasks)
    assert pilot.state == pf.ACTIVE


def test_history_slots_and_states(emulated):
    _, pilot, tmgr = emulated
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo", arguments=["hi"]))
    assert t.wait(timeout=60) == pf.DONE
    assert t.stdout == "hi\n" and t.stderr == "" and t.exit_code == 0
    names = [s for s, _ in t.history]
    assert names == [pf.NEW, pf.SCHEDULING, pf.STAGING_INPUT, pf.AGENT_SCHEDULING, pf.EXECUTING, pf.DONE]
    times = [ts for _, ts in t.history]
    assert times == sorted(times)
    assert len(t.slots) == 1 and len(t.slots[0].cores) == 1 and t.slots[0].gpus == ()
    assert t.slots[0].node in [n.name for n in pilot.nodes]


def test_placement_environment(emulated):
    _, _, tmgr = emulated
    script = ('echo "$PILOTFISH_RANK/$PILOTFISH_RANKS $PILOTFISH_NODE $PILOTFISH_CORES '
              'gpus=$CUDA_VISIBLE_DEVICES omp=$OMP_NUM_THREADS uid=$PILOTFISH_TASK_UID"')
    gpu = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh", arguments=["-c", script],
                                               cores_per_rank=3, gpus_per_rank=2))
    multi = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sh", arguments=["-c", script],
                                                 ranks=3, cores_per_rank=2))
    tmgr.wait_tasks([gpu.uid, multi.uid], timeout=60)
    assert gpu.state == pf.DONE, gpu.reason
    slot = gpu.slots[0]
    assert gpu.stdout.split() == [
        "0/1", slot.node, ",".join(map(str, slot.cores)),
        "gpus=" + ",".join(map(str, slot.gpus)), "omp=3", f"uid={gpu.uid}"]
    assert len(slot.gpus) == 2
    assert multi.state == pf.DONE, multi.reason
    assert len(multi.slots) == 3


def test_failing_task_fails_alone(emulated):
    _, _, tmgr = emulated
    good = [pf.TaskDescription(executable="/bin/true") for _ in range(20)]
    bad = pf.TaskDescription(executable="/bin/sh", arguments=["-c", "echo oops >&2; exit 3"], name="bad")
    sig = pf.TaskDescription(executable="/bin/sh", arguments=["-c", "kill -9 $$"], name="sig")
    missing = pf.TaskDescription(executable="/no/such/program", name="missing")
    tasks = tmgr.submit_tasks(good[:10] + [bad, sig, missing] + good[10:])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=60)
    by_name = {t.name: t for t in tasks if t.name}
    assert [t.state for t in tasks if not t.name] == [pf.DONE] * 20
    b = by_name["bad"]
    assert (b.state, b.exit_code, b.signal) == (pf.FAILED, 3, None)
    assert "oops" in b.stderr and "exit code 3" in b.reason and "oops" in b.reason
    s = by_name["sig"]
    assert (s.state, s.signal, s.exit_code) == (pf.FAILED, 9, -9)
    assert "SIGKILL" in s.reason
    m = by_name["missing"]
    assert m.state == pf.FAILED
    assert "/no/such/program" in m.reason and "No such file" in m.reason


def test_timeout_kills_process_group(emulated):
    _, _, tmgr = emulated
    # the child sleep would outlive a kill of the shell alone: the group must die
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", "sleep 60 & sleep 60; wait"], timeout="1s"))
    t0 = time.time()
    assert t.wait(timeout=30) == pf.FAILED
    assert time.time() - t0 < 10
    assert "timed out after 1s" in t.reason
    assert t.signal == signal.SIGTERM


def test_cancel_running_and_queued(emulated):
    _, _, tmgr = emulated
    running = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"]))
    # (running first: arriving together, the bigger task would start first)
    assert tmgr.wait_tasks([running.uid], state=pf.EXECUTING, timeout=30) == [pf.EXECUTING]
    # a full-pilot task queued behind it cannot start while `running` holds a core
    queued = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["60"],
                                                  ranks=64))
    time.sleep(0.2)
    tmgr.cancel_tasks([running.uid, queued.uid])
    assert tmgr.wait_tasks([running.uid, queued.uid], timeout=30) == [pf.CANCELED, pf.CANCELED]
    assert pf.EXECUTING not in [s for s, _ in queued.history]
    assert running.signal == signal.SIGTERM


def test_outputs_discarded_or_to_files_and_pre_post_exec(emulated, tmp_path):
    _, _, tmgr = emulated
    out = tmp_path / "out.txt"
    a = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo", arguments=["x"], stdout=False))
    b = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo", arguments=["y"], stdout=str(out)))
    c = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/echo", arguments=["main"], pre_exec=["echo pre"], post_exec=["echo post"]))
    d = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", "exit 4"], post_exec=["echo post"]))
    tmgr.wait_tasks([a.uid, b.uid, c.uid, d.uid], timeout=60)
    assert a.state == pf.DONE and a.stdout is None
    assert b.state == pf.DONE and out.read_text() == "y\n"
    assert c.state == pf.DONE and c.stdout.split() == ["pre", "main", "post"]
    assert d.state == pf.FAILED and d.exit_code == 4 and d.stdout.strip() == "post"


def test_staging_and_sandbox(emulated, tmp_path):
    _, _, tmgr = emulated
    src = tmp_path / "input.txt"
    src.write_text("payload\n")
    result = tmp_path / "result.txt"
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", "cat input.txt > output.txt; pwd"],
        sandbox="staged-task", input_staging=[str(src)],
        output_staging=[{"source": "output.txt", "target": str(result)}]))
    assert t.wait(timeout=60) == pf.DONE, t.reason
    assert result.read_text() == "payload\n"
    assert t.stdout.strip().endswith("staged-task")


def test_wait_any_and_timeout(emulated):
    _, _, tmgr = emulated
    fast = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    slow = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["30"]))
    states = tmgr.wait_tasks([fast.uid, slow.uid], return_when="any", timeout=30)
    assert states[0] == pf.DONE and states[1] not in pf.FINAL
    t0 = time.time()
    assert tmgr.wait_tasks([slow.uid], timeout=0.3) == [pf.EXECUTING]
    assert time.time() - t0 < 5
    slow.cancel()
    assert slow.wait(timeout=30) == pf.CANCELED


def test_callbacks_see_every_state(emulated):
    _, _, tmgr = emulated
    seen = []
    tmgr.register_callback(lambda task, state: seen.append((task.uid, state)))
    t = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    t.wait(timeout=60)
    mine = [s for uid, s in seen if uid == t.uid]
    assert mine[-1] == pf.DONE and pf.EXECUTING in mine


@pytest.mark.slow
def test_large_task_not_starved_by_stream_of_small(emulated):
    """A whole-node task among a steady stream of 1-core tasks must start (reservation)."""
    _, _, tmgr = emulated
    small = [pf.TaskDescription(executable="/bin/sleep", arguments=["0.3"]) for _ in range(64)]
    tmgr.submit_tasks(small)
    big = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", ranks=4, cores_per_rank=16))
    deadline = time.time() + 60
    while big.state not in pf.FINAL and time.time() < deadline:
        tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["0.3"])
                           for _ in range(16)])
        time.sleep(0.1)
    assert big.wait(timeout=30) == pf.DONE, big.reason
    tmgr.wait_tasks(timeout=120)


@pytest.mark.slow
def test_mixed_300_never_oversubscribes(emulated):
    """300 tasks of mixed ranks/cores/GPUs; recorded placements and times prove that no node
    ever had more cores or GPUs in use than it has, and no core/GPU was given twice at once."""
    session, pilot, tmgr = emulated
    rng = random.Random(7)
    descs = []
    for i in range(300):
        ranks = rng.choice([1, 1, 1, 2, 4])
        cores = rng.choice([1, 2, 3, 4, 8])
        gpus = rng.choice([0, 0, 0, 1]) if ranks <= 2 else 0
        descs.append(pf.TaskDescription(executable="/bin/sleep", arguments=[f"{rng.uniform(0.05, 0.3):.2f}"],
                                        ranks=ranks, cores_per_rank=cores, gpus_per_rank=gpus,
                                        name=f"mix-{i}"))
    tasks = tmgr.submit_tasks(descs)
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=300)
    assert states == [pf.DONE] * 300, [t.reason for t in tasks if t.state != pf.DONE][:3]

    # intervals in which each task held its slots: placed (schedule_ok) -> released (unschedule)
    # (the agent flushes its events in batches, at least every 0.5 s while busy or each second)
    want = {t.uid for t in tasks}
    deadline = time.time() + 20
    while True:
        start, end = {}, {}
        for t, uid, name, _ in read_all_events(os.path.join(pilot.sandbox, "agent.events")):
            if name == "schedule_ok":
                start[uid] = t
            elif name == "unschedule":
                end[uid] = t
        if want <= set(end) or time.time() > deadline:
            break
        time.sleep(0.2)
    cap = {n.name: (n.cores, n.gpus) for n in pilot.nodes}
    points = []
    for task in tasks:
        assert task.slots, task.uid
        assert start[task.uid] <= end[task.uid]
        points.append((start[task.uid], 1, task))
        points.append((end[task.uid], 0, task))
    points.sort(key=lambda p: (p[0], p[1]))  # releases before placements at equal times
    held_cores, held_gpus = {}, {}
    max_seen = 0
    for _, kind, task in points:
        for s in task.slots:
            for c in s.cores:
                k = (s.node, c)
                if kind:
                    assert k not in held_cores, f"core {k} given to {task.uid} and {held_cores[k]}"
                    held_cores[k] = task.uid
                else:
                    del held_cores[k]
            for g in s.gpus:
                k = (s.node, g)
                if kind:
                    assert k not in held_gpus, f"GPU {k} given twice"
                    held_gpus[k] = task.uid
                else:
                    del held_gpus[k]
        for node, (ncores, ngpus) in cap.items():
            used_c = sum(1 for (n, _) in held_cores if n == node)
            used_g = sum(1 for (n, _) in held_gpus if n == node)
            assert used_c <= ncores and used_g <= ngpus
        max_seen = max(max_seen, len(held_cores))
        for s in task.slots:
            assert all(0 <= c < cap[s.node][0] for c in s.cores)
            assert all(0 <= g < cap[s.node][1] for g in s.gpus)
    assert max_seen > 16  # the test really ran tasks side by side on several nodes


def test_live_progress_bar(emulated):
    """wait_with_progress draws done/failed/running and rate while tasks run."""
    import io

    from rich.console import Console

    from pilotfish.client.progress import wait_with_progress

    session, pilot, _ = emulated
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots(pilot)
    tmgr.submit_tasks([pf.TaskDescription(executable="/bin/sleep", arguments=["0.2"]) for _ in range(40)]
                      + [pf.TaskDescription(executable="/bin/false")])
    out = io.StringIO()
    states = wait_with_progress(tmgr, timeout=120, refresh=0.05,
                                console=Console(file=out, force_terminal=True, width=150))
    assert states.count(pf.DONE) == 40 and states.count(pf.FAILED) == 1
    text = out.getvalue()
    assert "41/41" in text and "40 done" in text and "1 failed" in text and "/s" in text


@pytest.mark.slow
def test_captured_outputs_reuse_spool_files_and_never_mix(emulated):
    """Captured outputs go to spool files that are reused (no new file per task): 300 tasks
    leave far fewer spool files than 600, and each task gets its own output. A task that
    leaves a process behind holding its stdout retires its spool file: what that process
    keeps writing (for ~3 s) never lands in another task's output.

    What such a task's output is (README, Results and failures): what was written to it until
    the agent read it, just after the task's own process ended -- so a line or two the
    leftover process wrote in that moment may be in it (that race failed this test now and
    then), nothing written after it, and never anything in another task's output."""
    _, pilot, tmgr = emulated
    spool = os.path.join(pilot.sandbox, "spool")
    before = set(os.listdir(spool))
    leaky = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", "echo first; (for i in $(seq 100); do "
                                              "echo LEAK; echo LEAK >&2; sleep 0.03; done) &"]))
    assert leaky.wait(timeout=30) == pf.DONE
    first, *rest = leaky.stdout.splitlines()
    assert first == "first" and set(rest) <= {"LEAK"} and len(rest) < 100, leaky.stdout
    seen = leaky.stdout
    # lengths vary up and down: a reused spool file (opened without O_TRUNC, emptied when
    # read) must never show the tail of a longer output before it
    pad = ["." * ((37 * i) % 50) for i in range(300)]
    tasks = tmgr.submit_tasks([pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", f"echo out{i}{pad[i]}; echo err{i}{pad[i]} >&2; sleep 0.01"])
        for i in range(300)])
    tmgr.wait_tasks([t.uid for t in tasks], timeout=120)
    time.sleep(1)
    more = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/echo", arguments=[f"m{i}"])
                              for i in range(100)])
    tmgr.wait_tasks([t.uid for t in more], timeout=120)
    assert leaky.stdout == seen  # read once, at its end: nothing the leftover wrote since
    for i, t in enumerate(tasks):
        assert (t.state, t.stdout, t.stderr) == (pf.DONE, f"out{i}{pad[i]}\n", f"err{i}{pad[i]}\n")
    for i, t in enumerate(more):
        assert (t.state, t.stdout, t.stderr) == (pf.DONE, f"m{i}\n", "")
    new = set(os.listdir(spool)) - before
    assert len(new) < 300, len(new)  # reused: about 2 per task running at once, not 2 per task


def test_callback_that_calls_sys_exit_never_stops_the_client(tmp_path, caplog):
    """RADICAL-Pilot's examples call sys.exit() in callbacks: it killed the client's IO
    thread (no more updates, wait hung, close took 30 s). Reported, and the client goes on."""
    import sys

    seen = []

    def cb(task, state):
        seen.append((task.uid, state))
        if state == pf.FAILED:
            sys.exit(1)
        if state == pf.DONE and len(seen) % 2:
            raise KeyboardInterrupt

    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        tmgr.register_callback(cb)
        bad = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/false"))
        assert bad.wait(timeout=30) == pf.FAILED
        good = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(10)])
        tmgr.wait_tasks(timeout=30)
        assert {t.state for t in good} == {pf.DONE}
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 15  # close is not held up by a dead IO thread
    assert (bad.uid, pf.FAILED) in seen and all((t.uid, pf.DONE) in seen for t in good)
    assert any("SystemExit" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_tasks_with_colliding_relative_names_each_have_their_own_directory(tmp_path):
    """Every task stages `input.dat` in, writes `output.dat` and stages it out: with one
    shared directory 0-3 of 128 tasks failed at random ('File exists'). Each task has its own
    directory now (task.sandbox): 128 tasks, 20 rounds in a row, all DONE, every output its
    own."""
    src = tmp_path / "in"
    src.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=16,
                                                       runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        for r in range(20):
            descs = []
            for i in range(128):
                f = src / f"{r}.{i}"
                f.write_text(f"{r} {i}\n")
                descs.append(pf.TaskDescription(
                    executable="/bin/sh", arguments=["-c", "cp input.dat output.dat"],
                    input_staging=[{"source": str(f), "target": "input.dat"}],
                    output_staging=[{"source": "output.dat", "target": str(out / f"{r}.{i}")}]))
            tasks = tmgr.submit_tasks(descs)
            tmgr.wait_tasks(timeout=120)
            bad = [(t.uid, t.reason) for t in tasks if t.state != pf.DONE]
            assert not bad, (r, bad[:3])
            for i, t in enumerate(tasks):
                assert (out / f"{r}.{i}").read_text() == f"{r} {i}\n"
                assert t.sandbox == os.path.join(pilot.sandbox, "tasks", t.uid)
                assert os.path.isdir(t.sandbox)


def test_every_ranks_output_is_captured_with_direct_launch(emulated):
    """direct launch runs a process per rank: the task's stdout is all ranks' output, in rank
    order (only rank 0's was returned)."""
    _, pilot, tmgr = emulated
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", ranks=4, launcher="direct",
        arguments=["-c", 'echo "rank $PILOTFISH_RANK"; echo "err $PILOTFISH_RANK" >&2']))
    assert t.wait(timeout=60) == pf.DONE
    assert t.stdout.split("\n")[:4] == [f"rank {r}" for r in range(4)]
    assert t.stderr.split("\n")[:4] == [f"err {r}" for r in range(4)]


def test_staging_urls_and_the_pilots_shared_directory(tmp_path, monkeypatch):
    """RADICAL-Pilot's staging URLs: client:/// (where the client runs), pilot:/// (the
    pilot's shared directory, filled by pilot.stage_in), task:/// (the task's own directory),
    file:///abs; unknown schemes and task:// on the wrong side are rejected at submit."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local.dat").write_text("from the client\n")
    (tmp_path / "big.dat").write_text("shared input\n")
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=4, runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        written = pilot.stage_in([{"source": "client:///big.dat", "target": "pilot:///big.dat"}])
        assert written == [os.path.join(pilot.shared, "big.dat")]
        tasks = tmgr.submit_tasks([pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", "cat local.dat big.dat > out.dat"],
            input_staging=[{"source": "client:///local.dat", "target": "task:///local.dat"},
                           {"source": "pilot:///big.dat", "target": "big.dat",
                            "action": "link"}],
            output_staging=[{"source": "task:///out.dat",
                             "target": f"client:///out.{i}.dat", "action": "transfer"},
                            {"source": "out.dat", "target": f"pilot:///out.{i}.dat"}])
            for i in range(3)])
        tmgr.wait_tasks(timeout=60)
        assert {t.state for t in tasks} == {pf.DONE}, [t.reason for t in tasks]
        for i in range(3):
            assert (tmp_path / f"out.{i}.dat").read_text() == "from the client\nshared input\n"
        pilot.stage_out([{"source": "pilot:///out.1.dat", "target": str(tmp_path / "back.dat")}])
        assert (tmp_path / "back.dat").read_text() == "from the client\nshared input\n"
        for bad, why in ((["srm:///x"], "URL scheme 'srm' is not supported"),
                         ([{"source": "task:///x", "target": "y"}], "other side")):
            with pytest.raises(pf.DescriptionError) as e:
                tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", input_staging=bad))
            assert e.value.field == "input_staging" and why in str(e.value)


def test_callbacks_get_every_state_in_order_and_per_task(tmp_path):
    """NEW, SCHEDULING and STAGING_INPUT are reported too (they never were), each task's
    states in their order; task.register_callback sees only its task."""
    from pilotfish import states as S

    seen: dict[str, list[str]] = {}
    mine = []
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=2, runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        tmgr.register_callback(lambda t, state: seen.setdefault(t.uid, []).append(state))
        tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(5)])
        tasks[2].register_callback(lambda t, state: mine.append((t.uid, state)))
        tmgr.wait_tasks(timeout=60)
    for t in tasks:
        states = seen[t.uid]
        assert states[:3] == [S.NEW, S.SCHEDULING, S.STAGING_INPUT], states
        assert states[-1] == S.DONE and S.EXECUTING in states
        ranks = [S.TASK_RANK[x] for x in states]
        assert ranks == sorted(ranks), states
    assert mine and {u for u, _ in mine} == {tasks[2].uid} and mine[-1][1] == S.DONE
