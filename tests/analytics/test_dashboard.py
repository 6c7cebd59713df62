"""The dashboard's reader and server, without a browser: the token guards every path, the
incremental reader reads each byte of a file once and waits for a frame still being
written, and its running aggregates agree with load_session on a multi-pilot session.

(tests/analytics/test_dashboard_browser.py opens the page in headless Chromium on a live run.)
"""

import json
import os
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from pilotfish import _events as E
from pilotfish._events import EventWriter
from pilotfish.analytics.dashboard import SessionWatch, make_server, url
from pilotfish.analytics.dashboard.tail import FrameTail, decode_events
from pilotfish.analytics.session import load_session
from pilotfish.analytics.synthetic import write_synthetic_session


def _events(tail: FrameTail) -> list[tuple]:
    out = []
    while True:
        data = tail.read()
        if not data:
            return out
        for b in decode_events(data, {E.SCHEDULE_OK, "FAILED"}):
            uids = b.uid_texts(np.arange(b.n_uids))
            out += [(float(t), uids[u], b.names[n], b.details.get(k))
                    for k, (t, u, n) in enumerate(zip(b.t, b.uid, b.name))]


def test_tail_reads_only_appended_bytes(tmp_path):
    path = str(tmp_path / "agent.events")
    w = EventWriter(path, flush_every=10**9)
    tail = FrameTail(path)
    assert _events(tail) == [] and tail.bytes_read == 0          # not there yet
    seen = []
    for step in range(5):
        batch = [(1000.0 + step + k / 100, f"task.{step:03d}{k:03d}", "EXECUTING", None)
                 for k in range(50 * (step + 1))]
        w.record_many(batch)
        w.flush()
        got = _events(tail)
        assert got == batch                                       # exactly the new events
        seen += got
        assert tail.bytes_read == os.path.getsize(path)           # each byte read once
    assert _events(tail) == [] and tail.bytes_read == os.path.getsize(path)
    w.close()
    assert len(seen) == sum(50 * (s + 1) for s in range(5))


def test_tail_waits_for_a_frame_being_written(tmp_path):
    """A writer's frame appended in two writes: the half is not decoded (nor lost); once
    whole, it is -- and no byte is read twice."""
    whole = str(tmp_path / "whole.events")
    w = EventWriter(whole)
    w.record_many([(5.0, "task.000001", "DONE", None), (6.0, "task.000002", "FAILED", "exit 3")])
    w.close()
    w = EventWriter(whole)
    w.record_many([(7.0, "task.000003", E.SCHEDULE_OK, "1x2/0 @0")])
    w.close()
    data = open(whole, "rb").read()
    first_end = 4 + int.from_bytes(data[:4], "little")
    path = str(tmp_path / "agent.events")
    tail = FrameTail(path)
    cuts = [first_end - 7, first_end + 2, first_end + 9, len(data) - 1, len(data)]
    got, done = [], 0
    with open(path, "wb") as fh:
        for cut in cuts:
            fh.write(data[done:cut])
            fh.flush()
            done = cut
            got.append(_events(tail))
    assert got[0] == []                                           # half of the first frame
    assert got[1] == [(5.0, "task.000001", "DONE", None), (6.0, "task.000002", "FAILED", "exit 3")]
    assert got[2] == [] and got[3] == []                          # the second, still torn
    assert got[4] == [(7.0, "task.000003", E.SCHEDULE_OK, "1x2/0 @0")]
    assert tail.bytes_read == len(data) and tail.offset == len(data) and tail.pending == b""


def test_tail_refuses_a_replaced_file(tmp_path):
    path = str(tmp_path / "client.events")
    w = EventWriter(path)
    w.record("task.000001", "NEW", t=1.0)
    w.close()
    tail = FrameTail(path)
    assert len(_events(tail)) == 1
    os.unlink(path)
    w = EventWriter(path)
    w.record("task.000009", "NEW", t=2.0)
    w.close()
    os.truncate(path, 3)
    assert _events(tail) == [] and "replaced or truncated" in tail.problem


def test_watch_agrees_with_load_session(tmp_path):
    """Two pilots, failures and cancels: the running counts equal the report's."""
    root = write_synthetic_session(str(tmp_path / "s"), n_tasks=3000, nodes=4, cores_per_node=8,
                                   gpus_per_node=2, n_pilots=2, fail_share=0.05,
                                   cancel_share=0.02)
    w = SessionWatch(root)
    w.refresh()
    data = load_session(root)
    want = data.tasks["state"].value_counts().to_dict()
    got = w.summary()["states"]
    for s in ("DONE", "FAILED", "CANCELED"):
        assert got[s] == want.get(s, 0)
    assert sum(got.values()) == 3000
    assert w.events_read == len(data.events)
    assert {p["uid"] for p in w.pilots_json()["pilots"]} == {"pilot.0000", "pilot.0001"}
    assert w.failed_json()["count"] == want.get("FAILED", 0)
    # the timeline ends where the counts are
    tl = w.timeline()
    assert {k: v[-1] for k, v in tl["series"].items()} == got
    # nodes from tasks.msgpack (a closed session): mean use over the run, within the
    # pilot's cores (the synthetic records put task i on node i % nodes, whatever its
    # pilot, so single nodes are not checked here)
    nodes = w.nodes_json()["pilots"]
    assert [p["mode"] for p in nodes] == ["mean", "mean"]
    for p in nodes:
        assert len(p["busy_cores"]) == 4
        assert 0.3 * sum(p["cores"]) < sum(p["busy_cores"]) <= sum(p["cores"])
    # read in steps of 256 KiB (as a big session is): partial at first, then the same
    stepped = SessionWatch(root)
    stepped.refresh(budget=256 << 10)
    assert stepped.behind and 0 < stepped.events_read < w.events_read
    steps = 1
    while stepped.behind:
        stepped.refresh(budget=256 << 10)
        steps += 1
    assert steps >= 2 and stepped.summary()["states"] == got
    assert stepped.events_read == w.events_read and stepped.timeline() == tl
    # nothing more to read: a refresh reads no byte
    before = w.summary()["bytes_read"]
    w.refresh()
    assert w.summary()["bytes_read"] == before
    assert w.summary()["states"] == got


def test_watch_follows_appends_and_placements(tmp_path):
    """A session written while it is watched: counts, the queue and per-node use move with
    each refresh; placements named in schedule_ok details make the heatmap live."""
    root = tmp_path / "s"
    pdir = root / "pilot.0000"
    pdir.mkdir(parents=True)
    (pdir / "pilot.json").write_text(json.dumps(
        {"uid": "pilot.0000", "description": {"resource": "local"},
         "nodes": [[f"n{k}", 4, 1, 0] for k in range(3)], "agent_cores": 0}))
    client = EventWriter(str(root / "client.events"))
    agent = EventWriter(str(pdir / "agent.events"))
    w = SessionWatch(str(root))
    w.refresh()
    assert w.summary()["states"]["NEW"] == 0
    t = 1000.0
    client.record("pilot.0000", "LAUNCHING", t=t)
    agent.record("pilot.0000", "ACTIVE", t=t)
    client.record_many([(t, f"task.{i:06d}", "NEW", None) for i in range(10)])
    agent.record_many([(t + 1, f"task.{i:06d}", "AGENT_SCHEDULING", None) for i in range(10)])
    agent.record_many([(t + 2, f"task.{i:06d}", E.SCHEDULE_OK, f"1x4/1 @{i}") for i in range(3)])
    client.flush(), agent.flush()
    w.refresh()
    s = w.summary()["states"]
    assert s["NEW"] == 0 and s["AGENT_SCHEDULING"] == 10
    q = w.queue_json()
    assert [g["count"] for g in q["groups"]] == [7] and q["placed_waiting_launch"] == 3
    assert "the pilot has 0 cores and 0 GPUs free now" in q["groups"][0]["why"]
    nodes = w.nodes_json()["pilots"][0]
    assert nodes["mode"] == "now" and nodes["busy_cores"] == [4, 4, 4] and nodes["busy_gpus"] == [1, 1, 1]
    agent.record_many([(t + 3, f"task.{i:06d}", E.UNSCHEDULE, None) for i in range(2)] +
                      [(t + 3, f"task.{i:06d}", "DONE", None) for i in range(2)] +
                      [(t + 3, "task.000002", "EXECUTING", None),
                       (t + 4, "task.000009", "FAILED", "no node can hold it")])
    agent.flush()
    w.refresh()
    s = w.summary()["states"]
    assert (s["AGENT_SCHEDULING"], s["EXECUTING"], s["DONE"], s["FAILED"]) == (6, 1, 2, 1)
    assert w.nodes_json()["pilots"][0]["busy_cores"] == [0, 0, 4]
    assert w.failed_json()["by_reason"] == [{"reason": "no node can hold it", "count": 1}]
    assert "2 nodes have room" in w.queue_json()["groups"][0]["why"]
    client.close(), agent.close()
    assert w.summary()["bytes_read"] == sum(os.path.getsize(p) for p in
                                            (root / "client.events", pdir / "agent.events"))


def _get(u: str):
    try:
        with urllib.request.urlopen(u, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@pytest.fixture
def served(tmp_path):
    root = write_synthetic_session(str(tmp_path / "s"), n_tasks=500, nodes=2, n_pilots=1)
    server, dash = make_server(root)
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    th.start()
    try:
        yield server, dash
    finally:
        server.shutdown()
        server.server_close()


def test_token_guards_every_path(served):
    server, dash = served
    link = url(server, dash)
    assert link.startswith("http://127.0.0.1:") and f"?token={dash.token}" in link
    base = link.split("?")[0].rstrip("/")
    assert len(dash.token) >= 32
    for path in ("/", "/api/summary", "/api/timeline", "/api/nodes", "/api/queue",
                 "/api/failed", "/api/pilots", "/api/services", "/api/pools", "/nothing"):
        wrong = dash.token[:-1] + ("y" if dash.token.endswith("x") else "x")  # (never the token)
        for query in ("", "?token=", "?token=" + wrong, "?token=" + dash.token[:-1],
                      "?Token=" + dash.token):
            code, body, _ = _get(base + path + query)
            assert code == 403, (path, query, code)
            assert b"states" not in body
    code, body, headers = _get(base + "/api/summary?token=" + dash.token)
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert headers["Cache-Control"] == "no-store" and headers["Referrer-Policy"] == "no-referrer"
    summary = json.loads(body)
    assert sum(summary["states"].values()) == 500 and summary["states"]["DONE"] > 0
    assert summary["live"] is False
    code, page, headers = _get(link)
    assert code == 200 and b"<canvas" in page and "connect-src 'self'" in headers["Content-Security-Policy"]
    assert b"http://" not in page and b"https://" not in page   # nothing from elsewhere


def test_cli_command_prints_a_token_url(tmp_path):
    """The click command (registered in cli.py as `pilotfish dashboard`) starts, prints the
    URL with its token and serves it."""
    import subprocess
    import sys
    import time

    root = write_synthetic_session(str(tmp_path / "s"), n_tasks=50, nodes=1)
    proc = subprocess.Popen([sys.executable, "-m", "pilotfish.analytics.dashboard", root],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "open: " in line:
                break
        link = lines[-1].split("open: ", 1)[1].strip()
        assert link.startswith("http://127.0.0.1:")
        code, body, _ = _get(link.replace("/?", "/api/summary?"))
        assert code == 200 and json.loads(body)["states"]["DONE"] > 0
        assert _get(link.split("?")[0] + "api/summary")[0] == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_watch_reads_partitions_services_and_pools(tmp_path):
    """Partitions, launchers, service groups and function workers, from events in the
    forms the agent records them (agent/_main.py, table.py, partition.py, services.py)."""
    root = tmp_path / "s"
    pdir = root / "pilot.0000"
    pdir.mkdir(parents=True)
    agent = EventWriter(str(pdir / "agent.events"))
    t = 50.0
    agent.record_many([
        (t, "pilot.0000", E.PARTITION, json.dumps({"index": 0, "nodes": ["a", "b"], "launcher": "direct"})),
        (t, "pilot.0000", E.PARTITION, json.dumps({"index": 1, "nodes": ["c"], "launcher": "prterun"})),
        (t, "pilot.0000", E.LAUNCHER_START, "prterun p1"),
        (t + 1, "pilot.0000", E.LAUNCHER_FAILED, "prterun p1: prte exited 1"),
        (t + 1, "pilot.0000", E.PARTITION_CLOSED, "p1 (c): its launcher could not start: prte exited 1"),
        (t + 2, "stage.0000", E.MEMBER_START, "stage"),
        (t + 2, "stage.0001", E.MEMBER_START, "stage"),
        (t + 3, "stage.0000", E.MEMBER_READY, "tcp://10.0.0.1:5555"),
        (t + 3, "stage.0001", E.MEMBER_FAIL, "exit code 2"),
        (t + 3, "stage", E.GROUP_EPOCH, "1 1"),
        (t + 4, "stage", E.GROUP_RESIZE, "3"),
        (t + 4, "worker.0000", "AGENT_SCHEDULING", None),
        (t + 4, "worker.0000", E.SCHEDULE_OK, None),
        (t + 4, "worker.0000", "EXECUTING", None),
    ])
    agent.close()
    w = SessionWatch(str(root))
    w.refresh()
    (p,) = w.pilots_json()["pilots"]
    parts = {x["index"]: x for x in p["partitions"]}
    assert parts[0]["nodes"] == 2 and parts[0]["state"] == "open"
    assert parts[1]["state"] == "closed" and parts[1]["why"] == "its launcher could not start: prte exited 1"
    assert p["launchers"][0]["state"] == "failed" and "prte exited 1" in p["launchers"][0]["detail"]
    (g,) = w.services_json()["groups"]
    assert (g["name"], g["epoch"], g["view"], g["target"]) == ("stage", "1", "1", "3")
    assert g["states"] == {"ready": 1, "failed": 1}
    assert {m["uid"]: m["endpoint"] or m["why"] for m in g["members"]} == \
        {"stage.0000": "tcp://10.0.0.1:5555", "stage.0001": "exit code 2"}
    (pool,) = w.pools_json()["pools"]
    assert pool["workers"]["running"] == 1
    assert sum(w.summary()["states"].values()) == 0      # agent-made tasks are not the user's
