"""TTX, RU shares and per-task durations of hand-built sessions with known timings.

Every expected number below is worked out by hand from the timelines in the comments (see
the phase model in pilotfish/analytics/utilization.py), not by re-running the algorithm.
"""

import json
import os

import numpy as np
import pytest

from pilotfish._events import EventWriter, TaskRecord, write_task_records
from pilotfish.analytics import analyze, load_session
from pilotfish.analytics.utilization import PHASE_KEYS

T0 = 1_700_000_000.0      # epoch of the session; all times below are relative to it
EXACT = dict(rel=1e-9, abs=1e-9)


def write_session(root, client, agents, records, pilots):
    """client: [(t, uid, name, detail)]; agents: {pilot: [...]}; pilots: {pilot: pilot.json}."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "session.json"), "w") as fh:
        json.dump({"uid": os.path.basename(root), "created": T0}, fh)
    files = [(os.path.join(root, "client.events"), client)]
    for pid, events in agents.items():
        os.makedirs(os.path.join(root, pid), exist_ok=True)
        files.append((os.path.join(root, pid, "agent.events"), events))
    for path, events in files:
        w = EventWriter(path)
        for k in range(0, len(events), 5):  # several frames
            w.record_many([(T0 + t, u, n, d) for t, u, n, d in events[k:k + 5]])
        w.close()
    for pid, pj in pilots.items():
        os.makedirs(os.path.join(root, pid), exist_ok=True)
        with open(os.path.join(root, pid, "pilot.json"), "w") as fh:
            json.dump({"uid": pid, "description": {}, "launcher": "direct", **pj}, fh)
    if records is not None:
        write_task_records(os.path.join(root, "tasks.msgpack"), records)


def task_events(uid, **times):
    """Events of one task from name=time keywords (detail None); order does not matter."""
    return [(t, uid, name, None) for name, t in times.items()]


# ----------------------------------------------------------------------------- pilot A
# 2 nodes x 4 cores x 1 GPU: R = 8 cores, 2 GPUs, no agent cores.
# bootstrap_start 10, ACTIVE 20, agent_stop 100, DONE 110 (client; the agent's own DONE at 112
# is later and must not count).
#
#   task  cores gpus  schedule_ok exec_start exec_ok launch_ok exec_stop unschedule  final
#   a.1     4    1        22         23        24       -         54        55       DONE 56
#   a.2  2x2=4   0        30         31        31.5     -         61.5      62       DONE 63
#   a.3  2x4=8  2x1=2     62         62.5      63       64        84        85       FAILED 86
#   a.4     1    0      (never placed: AGENT_SCHEDULING 21, CANCELED 95)
#   a.5     2    0        86         87       (spawn failed)      -         88       FAILED 88.5
PILOT_A = "pilot.0000"


def pilot_a_events():
    client = [(0, PILOT_A, "NEW", None), (1, PILOT_A, "LAUNCHING", None),
              (110, PILOT_A, "DONE", None)]
    agent = [(10, PILOT_A, "bootstrap_start", None), (11, PILOT_A, "resources_ok", "2x4/1"),
             (12, PILOT_A, "launcher_start", "direct p0"), (13, PILOT_A, "launcher_ready", "direct p0"),
             (20, PILOT_A, "ACTIVE", None), (90, PILOT_A, "drain_start", None),
             (95, PILOT_A, "drain_stop", None), (99, PILOT_A, "launcher_stop", "direct p0"),
             (100, PILOT_A, "agent_stop", None), (112, PILOT_A, "DONE", None)]
    tasks = {
        "task.a.1": dict(schedule_ok=22, EXECUTING=22, exec_start=23, exec_ok=24, exec_stop=54,
                         unschedule=55, STAGING_OUTPUT=55, DONE=56),
        "task.a.2": dict(schedule_ok=30, EXECUTING=30, exec_start=31, exec_ok=31.5,
                         exec_stop=61.5, unschedule=62, STAGING_OUTPUT=62, DONE=63),
        "task.a.3": dict(schedule_ok=62, EXECUTING=62, exec_start=62.5, exec_ok=63, launch_ok=64,
                         exec_stop=84, unschedule=85, STAGING_OUTPUT=85, FAILED=86),
        "task.a.4": dict(CANCELED=95),
        "task.a.5": dict(schedule_ok=86, EXECUTING=86, exec_start=87, unschedule=88, FAILED=88.5),
    }
    for uid, times in tasks.items():
        agent += task_events(uid, AGENT_SCHEDULING=21, **times)
        client += task_events(uid, NEW=0, SCHEDULING=0.5, STAGING_INPUT=1)
        final = next(n for n in ("DONE", "FAILED", "CANCELED") if n in times)
        client.append((times[final] + 0.25, uid, final, None))  # the client learns it later
    records = [
        TaskRecord("task.a.1", None, PILOT_A, 1, 4, 1, "DONE", 0, [0]),
        TaskRecord("task.a.2", None, PILOT_A, 2, 2, 0, "DONE", 0, [0, 0]),
        TaskRecord("task.a.3", "mpi", PILOT_A, 2, 4, 1, "FAILED", 1, [0, 1]),
        TaskRecord("task.a.4", None, PILOT_A, 1, 1, 0, "CANCELED", None, []),
        TaskRecord("task.a.5", None, PILOT_A, 1, 2, 0, "FAILED", None, [1]),
    ]
    pj = {"nodes": [["n0", 4, 1, 0], ["n1", 4, 1, 0]], "agent_cores": 0, "agent_gpus": 0}
    return client, agent, records, pj


# Pilot A by hand, cores (R = Rt = 8; active window 20..100 = 80 s):
#   startup 8*10 = 80; termination 8*10 = 80; agent 0; available 8*100 = 800
#   prepare  a1 1*4 + a2 1*4 + a3 .5*8 + a5 1*2 = 14
#   runtime  a1 1*4 + a2 .5*4 + a3 .5*8 + a5 (87..88: no exec_ok/exec_stop) 1*2 = 12
#   launcher a3 1*8 = 8
#   cmd      a1 30*4 + a2 30*4 + a3 20*8 = 400
#   unsched  a1 1*4 + a2 .5*4 + a3 1*8 = 14                       busy = 448
#   busy(t): 20-22:0 22-30:4 30-55:8 55-62:4 62-85:8 85-86:0 86-88:2 88-100:0; peak 8
#   warmup   (8-0)*2 + (8-4)*8 = 48
#   draining max busy from t on: <85: 8, 85-88: 2, 88-: 0 -> (8-2)*3 + 8*12 = 114
#   idle     8*80 - 448 - 48 - 114 = 30   (= 4 free cores 55..62 + 2 cores 85..86)
CORES_A = dict(agent_nodes=0, pilot_startup=80, warmup=48, prepare_execution=14,
               exec_runtime=12, exec_launcher=8, exec_cmd=400, unschedule=14, draining=114,
               pilot_termination=80, idle=30)
# GPUs (R = 2): startup 20, termination 20, available 200
#   a1: prep 1, runtime 1, cmd 30, unsched 1; a3 (2 GPUs): prep 1, runtime 1, launcher 2,
#   cmd 40, unsched 2                                              busy = 79
#   busy(t): 22-55:1 55-62:0 62-85:2; peak 2 -> warmup 2*2 + 1*40 = 44; draining 2*15 = 30
#   idle 2*80 - 79 - 44 - 30 = 7
GPUS_A = dict(agent_nodes=0, pilot_startup=20, warmup=44, prepare_execution=2,
              exec_runtime=2, exec_launcher=2, exec_cmd=70, unschedule=3, draining=30,
              pilot_termination=20, idle=7)

# ----------------------------------------------------------------------------- pilot B
# 1 node x 4 cores, 1 core reserved for the agent, no GPUs; bootstrap 50, ACTIVE 55,
# agent_stop 70, CANCELED 80. One task of 3 cores: placed/spawned at 56, exits 66.
#   available 4*30 = 120; agent 1*30 = 30; startup 3*5 = 15; termination 3*10 = 30
#   cmd 3*10 = 30; warmup 3*1 = 3; draining 3*4 = 12; idle 3*15 - 30 - 3 - 12 = 0
PILOT_B = "pilot.0001"
CORES_B = dict(agent_nodes=30, pilot_startup=15, warmup=3, prepare_execution=0,
               exec_runtime=0, exec_launcher=0, exec_cmd=30, unschedule=0, draining=12,
               pilot_termination=30, idle=0)


def pilot_b_events():
    client = [(40, PILOT_B, "NEW", None), (41, PILOT_B, "LAUNCHING", None),
              (80, PILOT_B, "CANCELED", None)]
    agent = [(50, PILOT_B, "bootstrap_start", None), (55, PILOT_B, "ACTIVE", None),
             (70, PILOT_B, "agent_stop", None)]
    agent += task_events("task.b.1", AGENT_SCHEDULING=55.5, schedule_ok=56, EXECUTING=56,
                         exec_start=56, exec_ok=56, exec_stop=66, unschedule=66, DONE=67)
    client += task_events("task.b.1", NEW=45, SCHEDULING=45, STAGING_INPUT=46)
    records = [TaskRecord("task.b.1", None, PILOT_B, 1, 3, 0, "DONE", 0, [0])]
    pj = {"nodes": [["m0", 4, 0, 0]], "agent_cores": 1, "agent_gpus": 0}
    return client, agent, records, pj


@pytest.fixture
def session_a(tmp_path):
    client, agent, records, pj = pilot_a_events()
    root = str(tmp_path / "s.a")
    write_session(root, client, {PILOT_A: agent}, records, {PILOT_A: pj})
    return root


@pytest.fixture
def session_ab(tmp_path):
    ca, aa, ra, pa = pilot_a_events()
    cb, ab, rb, pb = pilot_b_events()
    root = str(tmp_path / "s.ab")
    write_session(root, ca + cb, {PILOT_A: aa, PILOT_B: ab}, ra + rb, {PILOT_A: pa, PILOT_B: pb})
    return root


def assert_phases(u, expected, available):
    assert u.available == pytest.approx(available, **EXACT)
    for k in PHASE_KEYS:
        assert u.phases[k] == pytest.approx(expected[k], **EXACT), k
        assert u.shares[k] == pytest.approx(expected[k] / available, **EXACT), k
    assert sum(u.shares.values()) == pytest.approx(1.0, **EXACT)
    assert sum(expected.values()) == pytest.approx(available, **EXACT)  # the test's own sums


def test_single_pilot_cores_and_gpus(session_a):
    a = analyze(session_a)
    assert_phases(a.utilization["cores"], CORES_A, 800)
    assert_phases(a.utilization["gpus"], GPUS_A, 200)
    assert a.utilization["cores"].oversubscribed == 0


def test_ttx_makespan_and_counts(session_a):
    a = analyze(session_a)
    assert a.ttx == pytest.approx(84 - 23, **EXACT)            # first exec_start .. last exec_stop
    assert a.makespan == pytest.approx(95 - 0, **EXACT)        # first NEW .. last final (a.4)
    assert a.state_counts == {"DONE": 2, "FAILED": 2, "CANCELED": 1}


def test_task_durations(session_a):
    a = analyze(session_a)
    d = a.durations
    # setup = schedule_ok -> payload start (launch_ok if any, else exec_ok)
    assert d.loc["task.a.1", "setup"] == pytest.approx(2)
    assert d.loc["task.a.2", "setup"] == pytest.approx(1.5)
    assert d.loc["task.a.3", "setup"] == pytest.approx(2)      # to launch_ok 64
    assert np.isnan(d.loc["task.a.5", "setup"])                # never started
    assert np.isnan(d.loc["task.a.4", "scheduling"])           # never placed
    assert d.loc["task.a.3", "run"] == pytest.approx(20)
    assert d.loc["task.a.1", "queue_wait"] == pytest.approx(21)
    assert d.loc["task.a.2", "scheduling"] == pytest.approx(9)
    # output ends at the *first* final state: the agent's, not the client's later copy
    assert d.loc["task.a.1", "output"] == pytest.approx(2)
    s = a.duration_stats.loc["setup"]
    assert s["count"] == 3
    assert s["mean"] == pytest.approx(5.5 / 3, **EXACT)
    assert s["median"] == pytest.approx(2, **EXACT)
    assert s["q3"] == pytest.approx(2, **EXACT)
    assert s["max"] == pytest.approx(2, **EXACT)


def test_waits_by_task_shape(session_a):
    """Scheduler waits (AGENT_SCHEDULING 21 -> schedule_ok) per shape: a.4 was never placed
    and waited until it was canceled at 95; the longest total first."""
    w = analyze(session_a).waits_by_shape
    assert list(w["shape"]) == ["1 × 1 core", "1 × 2 cores", "2 × 4 cores + 1 GPU",
                                "2 × 2 cores", "1 × 4 cores + 1 GPU"]
    assert list(w["total"]) == pytest.approx([74, 65, 41, 9, 1])
    assert list(w["never_placed"]) == [1, 0, 0, 0, 0]
    assert w["share"].sum() == pytest.approx(1, **EXACT)
    assert w["share"].iloc[0] == pytest.approx(74 / 190, **EXACT)
    from pilotfish.analytics.durations import waits_by_shape
    top2 = waits_by_shape(load_session(session_a).tasks, top=2)
    assert list(top2["shape"]) == ["1 × 1 core", "1 × 2 cores", "other shapes (3)"]
    assert top2.iloc[2]["tasks"] == 3 and top2.iloc[2]["total"] == pytest.approx(51)
    assert top2.iloc[2]["max"] == pytest.approx(41) and np.isnan(top2.iloc[2]["median"])


def test_two_pilots_sum(session_ab):
    a = analyze(session_ab)
    u = a.utilization["cores"]
    assert u.per_pilot[PILOT_A] == pytest.approx(CORES_A, **EXACT)
    assert u.per_pilot[PILOT_B] == pytest.approx(CORES_B, **EXACT)
    both = {k: CORES_A[k] + CORES_B[k] for k in PHASE_KEYS}
    assert_phases(u, both, 800 + 120)
    # pilot B has no GPUs: the GPU picture is pilot A's alone
    assert_phases(a.utilization["gpus"], GPUS_A, 200)
    assert a.ttx == pytest.approx(84 - 23, **EXACT)


def test_loaded_frames(session_ab):
    data = load_session(session_ab)
    t = data.tasks
    assert len(t) == 6
    assert t.loc["task.a.3", "cores"] == 8 and t.loc["task.a.3", "gpus"] == 2
    assert t.loc["task.a.1", "schedule_ok"] == pytest.approx(22, abs=1e-6)
    assert t.loc["task.a.1", "DONE"] == pytest.approx(56, abs=1e-6)   # first of 56 / 56.25
    assert str(t.loc["task.b.1", "pilot"]) == PILOT_B
    assert t.loc["task.a.3", "exit_code"] == 1
    p = data.pilots
    assert p.loc[PILOT_A, "cores"] == 8 and p.loc[PILOT_A, "gpus"] == 2
    assert p.loc[PILOT_A, "t_final"] == pytest.approx(110, abs=1e-6)
    assert p.loc[PILOT_B, "state"] == "CANCELED"
    launchers = data.launchers
    assert len(launchers) == 1
    row = launchers.iloc[0]
    assert (row["pilot"], row["launcher"], row["partition"]) == (PILOT_A, "direct", "p0")
    assert (row["launcher_start"], row["launcher_ready"], row["launcher_stop"]) == \
        pytest.approx((12, 13, 99), abs=1e-6)


def test_without_task_records(tmp_path):
    """No tasks.msgpack (a session that died): shapes come from schedule_ok details."""
    client, agent, _, pj = pilot_a_events()
    shapes = {"task.a.1": "1x4/1", "task.a.2": "2x2/0", "task.a.3": "2x4/1", "task.a.5": "1x2/0"}
    agent = [(t, u, n, shapes[u] if n == "schedule_ok" else d) for t, u, n, d in agent]
    root = str(tmp_path / "s.norec")
    write_session(root, client, {PILOT_A: agent}, None, {PILOT_A: pj})
    a = analyze(root)
    assert_phases(a.utilization["cores"], CORES_A, 800)
    assert_phases(a.utilization["gpus"], GPUS_A, 200)
    assert any("tasks.msgpack" in w for w in a.data.warnings)


def test_agent_killed_while_tasks_ran(tmp_path):
    """No unschedule, no agent_stop, no final state of the pilot: tasks hold their cores to
    the pilot's last event, which is also its end (no termination phase)."""
    client = [(0, PILOT_A, "NEW", None)]
    agent = [(10, PILOT_A, "bootstrap_start", None), (20, PILOT_A, "ACTIVE", None)]
    agent += task_events("task.k.1", AGENT_SCHEDULING=20, schedule_ok=20, exec_start=20,
                         exec_ok=21)
    agent += [(50, PILOT_A, "heartbeat", None)]
    records = [TaskRecord("task.k.1", None, PILOT_A, 1, 2, 0, "EXECUTING", None, [0])]
    pj = {"nodes": [["n0", 4, 0, 0]]}
    root = str(tmp_path / "s.killed")
    write_session(root, client, {PILOT_A: agent}, records, {PILOT_A: pj})
    u = analyze(root).utilization["cores"]
    # window 10..50: available 4*40 = 160; startup 4*10 = 40; runtime 2*1; cmd 2*29;
    # busy 2 from 20 on: peak 2, warmup 0, draining 0, idle 2*30 = 60
    expected = dict.fromkeys(PHASE_KEYS, 0.0)
    expected.update(pilot_startup=40, exec_runtime=2, exec_cmd=58, idle=60)
    assert_phases(u, expected, 160)


def test_json_metrics(session_ab):
    m = analyze(session_ab).to_json()
    json.dumps(m)  # serializable, no NaN
    assert m["ttx_s"] == pytest.approx(61)
    cores = m["utilization"]["cores"]
    assert cores["phases"]["exec_cmd"]["share"] == pytest.approx(430 / 920, **EXACT)
    assert sum(p["share"] for p in cores["phases"].values()) == pytest.approx(1, **EXACT)
    assert m["tasks"]["by_state"] == {"DONE": 3, "FAILED": 2, "CANCELED": 1}
    assert m["durations"]["setup"]["median"] == pytest.approx(1.75)  # [2, 1.5, 2, 0]
    assert [p["uid"] for p in m["pilots"]] == [PILOT_A, PILOT_B]


def test_waits_by_shape_edges():
    """No task reached an agent: no rows (and no warning); tasks still waiting at the end
    waited until the session's end (default: its tasks' last event)."""
    import pandas as pd
    import warnings

    from pilotfish.analytics.durations import waits_by_shape

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        none = pd.DataFrame({"ranks": [1], "cores_per_rank": [1], "gpus_per_rank": [0],
                             "AGENT_SCHEDULING": [np.nan], "t_final": [3.0]})
        assert len(waits_by_shape(none)) == 0
        waiting = pd.DataFrame({"ranks": [1, 1], "cores_per_rank": [1, 1],
                                "gpus_per_rank": [0, 0], "AGENT_SCHEDULING": [1.0, 4.0],
                                "schedule_ok": [2.0, np.nan], "t_final": [5.0, np.nan]})
        w = waits_by_shape(waiting)
    assert list(w["tasks"]) == [2] and list(w["never_placed"]) == [1]
    assert w["total"].iloc[0] == pytest.approx(1.0 + 1.0)   # 1 -> 2 placed; 4 -> 5 (last event)
    # with the session's end given (analyze() passes the pilots' end): waited until then
    assert waits_by_shape(waiting, end=9.0)["total"].iloc[0] == pytest.approx(1.0 + 5.0)
