"""The dashboard's costs, each beside its baseline in one run (issue 30, "Measure").

    .venv/bin/python bench/bench_dashboard.py [--big 1000000] [--live 100000] [--null 3000]
                                              [--rounds 3] [--only CASE] [--json OUT]

Cases:
  finished  a finished --big-task session (synthetic: analytics/synthetic.py, written as the
            agent and client write, 2 pilots x 1,024 nodes): time to the first /api/summary
            and to first paint (every endpoint the page fetches on its first poll), then the
            cost of a refresh when nothing was appended (what each 1 s poll costs from then
            on); beside it, load_session (what `pilotfish report` reads) of the same session
  live      a --live-task run appended to a session directory as it happens: a synthetic
            session's frames replayed by another process over ~30 s (in time order, as the
            writers flush them), schedule_ok carrying each rank's node so the 2,048-node
            heatmap is live; the dashboard attaches at the start and a second one half way;
            per refresh (every 1 s: read what was appended + answer every endpoint): median
            and max; time to first paint of the one attaching half way
  null      the null-task rate (N x /bin/true on a local pilot, emulated 4 x 64 cores) with
            a dashboard attached (its own process, polled every second as the page does) and
            without, alternating rounds in one run: the client's rate (submit -> all DONE)
            and the agent's (first AGENT_SCHEDULING -> last final, from its events)
  flood     `pilotfish dashboard` (its own process, a 1,024-descriptor limit) while 8
            threads of another process hold 1,200 connections that each send one byte and
            open new ones as fast as they can (the oldest closed past 150 each): the owner's
            request latency (median, max of 20), the server's CPU share, the connections
            opened per second, the server's descriptors (issue 42, row 8)

Timings are wall clock on whatever machine runs this; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import msgspec  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish import _events as E  # noqa: E402
from pilotfish.analytics.dashboard import make_server, url  # noqa: E402
from pilotfish.analytics.dashboard.server import Dashboard  # noqa: E402

ENDPOINTS = ("summary", "timeline", "nodes", "queue", "failed", "pilots", "services", "pools")


def _synthetic(root: str, n: int, nodes: int) -> str:
    from pilotfish.analytics.synthetic import write_synthetic_session

    stamp = os.path.join(root, f".complete-{n}-{nodes}")
    if not os.path.exists(stamp):
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        write_synthetic_session(root, n_tasks=n, nodes=nodes, cores_per_node=16,
                                gpus_per_node=4, n_pilots=2, fail_share=0.01)
        print(f"  (wrote a synthetic {n:,}-task session in {time.perf_counter() - t:.1f} s)",
              file=sys.stderr)
        open(stamp, "w").close()
    return root


def first_paint(dash: Dashboard) -> tuple[float, float, float]:
    """(seconds to the first summary, to every endpoint of the first poll -- the first
    paint, of what the first refresh read --, and until everything there is was read and
    answered)."""
    t = time.perf_counter()
    dash.answer("summary")
    t_summary = time.perf_counter() - t
    for e in ENDPOINTS[1:]:
        dash.answer(e)
    t_paint = time.perf_counter() - t
    dash.catch_up()
    for e in ENDPOINTS:
        dash.answer(e)
    return t_summary, t_paint, time.perf_counter() - t


def one_refresh(dash: Dashboard) -> float:
    t = time.perf_counter()
    dash.refresh(force=True)
    for e in ENDPOINTS:
        dash.answer(e)
    return time.perf_counter() - t


def finished(n: int, base: str) -> dict:
    root = _synthetic(os.path.join(base, f"finished-{n}"), n, 1024)
    dash = Dashboard(root)
    t_sum, t_paint, t_all = first_paint(dash)
    refresh = [one_refresh(dash) for _ in range(5)]
    s = json.loads(dash.answer("summary"))
    from pilotfish.analytics.session import load_session

    t = time.perf_counter()
    load_session(root)
    t_load = time.perf_counter() - t
    return {"tasks": n, "events": s["events_read"], "bytes": s["bytes_read"],
            "first_summary_s": t_sum, "first_paint_s": t_paint, "all_read_and_answered_s": t_all,
            "refresh_idle_ms_median": 1000 * statistics.median(refresh),
            "load_session_s": t_load, "all_read_over_load_session": t_all / t_load,
            "states": s["states"]}


# ----------------------------------------------------------------------------- live replay

def _replay(src: str, dst: str, seconds: float) -> None:
    """Append src's events to dst as a run writes them: frames in time order, paced so the
    whole run takes `seconds`; schedule_ok gets each rank's node ("RxC/G @n,..")."""
    dec = msgspec.msgpack.Decoder(list[tuple[float, str, str, object]])
    enc = msgspec.msgpack.Encoder()
    files = []
    for rel in ["client.events"] + [os.path.join(p, "agent.events") for p in sorted(os.listdir(src))
                                     if p.startswith("pilot.")]:
        data = open(os.path.join(src, rel), "rb").read()
        frames, pos = [], 0
        nodes = 1
        if rel != "client.events":
            pj = json.load(open(os.path.join(src, os.path.dirname(rel), "pilot.json")))
            nodes = len(pj["nodes"])
        while pos + 4 <= len(data):
            end = pos + 4 + int.from_bytes(data[pos:pos + 4], "little")
            events = dec.decode(data[pos + 4:end])
            if rel != "client.events":
                for k, (t, uid, name, det) in enumerate(events):
                    if name == E.SCHEDULE_OK and det:
                        ranks = int(str(det).split("x", 1)[0])
                        i = int(uid.rsplit(".", 1)[1])
                        events[k] = (t, uid, name, f"{det} @" + ",".join(
                            str((i + r) % nodes) for r in range(ranks)))
            payload = enc.encode(events)
            frames.append((events[-1][0], len(payload).to_bytes(4, "little") + payload))
            pos = end
        files.append((os.path.join(dst, rel), frames))
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "session.json"), dst)
    for p in os.listdir(src):
        if p.startswith("pilot."):
            os.makedirs(os.path.join(dst, p), exist_ok=True)
            shutil.copy(os.path.join(src, p, "pilot.json"), os.path.join(dst, p))
    t_first = min(f[0][0] for _, f in files if f)
    t_last = max(f[-1][0] for _, f in files if f)
    fhs = [open(path, "ab") for path, _ in files]
    at = [0] * len(files)
    start = time.time()
    while any(a < len(f) for a, (_, f) in zip(at, files)):
        virtual = t_first + (time.time() - start) / seconds * (t_last - t_first)
        for k, (path, frames) in enumerate(files):
            j = at[k]
            while j < len(frames) and frames[j][0] <= virtual:
                j += 1
            if j > at[k]:
                fhs[k].write(b"".join(fr for _, fr in frames[at[k]:j]))
                fhs[k].flush()
                at[k] = j
        time.sleep(0.25)   # a writer flushes every 0.5 s
    for fh in fhs:
        fh.close()
    shutil.copy(os.path.join(src, "tasks.msgpack"), dst)


def live(n: int, base: str, seconds: float = 30.0) -> dict:
    src = _synthetic(os.path.join(base, f"live-src-{n}"), n, 1024)
    dst = os.path.join(base, f"live-{n}")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "session.json"), dst)
    proc = subprocess.Popen([sys.executable, __file__, "_replay", src, dst, str(seconds)])
    dash = Dashboard(dst)
    t_sum, t_paint, _ = first_paint(dash)
    costs, late = [], None
    t_start = time.time()
    while proc.poll() is None:
        time.sleep(max(0.0, 1.0 - (time.time() - t_start) % 1.0))
        if late is None and time.time() - t_start >= seconds / 2:
            late = Dashboard(dst)
            late_sum, late_paint, late_all = first_paint(late)
            late_events = late.watch.events_read
        costs.append(one_refresh(dash))
    proc.wait()
    costs.append(one_refresh(dash))
    s = json.loads(dash.answer("summary"))
    nodes = json.loads(dash.answer("nodes"))
    return {"tasks": n, "replay_s": seconds, "refreshes": len(costs),
            "first_summary_at_start_s": t_sum, "first_paint_at_start_s": t_paint,
            "refresh_ms_median": 1000 * statistics.median(costs),
            "refresh_ms_p90": 1000 * sorted(costs)[int(0.9 * (len(costs) - 1))],
            "refresh_ms_max": 1000 * max(costs),
            "attach_half_way": {"events_then": late_events, "first_summary_s": late_sum,
                                "first_paint_s": late_paint, "all_read_s": late_all}
            if late else None,
            "nodes_in_heatmap": sum(len(p["names"]) for p in nodes["pilots"]),
            "heatmap_mode": sorted({p["mode"] for p in nodes["pilots"]}),
            "final_states": s["states"], "events": s["events_read"]}


# ----------------------------------------------------------------------------- null tasks

def _attach(session_dir: str, stop_file: str, out: str) -> None:
    """A dashboard on session_dir, polled every second as the page does, until stop_file."""
    server, dash = make_server(session_dir)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    link = url(server, dash)
    base, query = link.split("/?", 1)
    costs = []
    while not os.path.exists(stop_file):
        t = time.perf_counter()
        for e in ENDPOINTS:
            with urllib.request.urlopen(f"{base}/api/{e}?{query}", timeout=30) as r:
                r.read()
        costs.append(time.perf_counter() - t)
        time.sleep(max(0.0, 1.0 - costs[-1]))
    server.shutdown()
    json.dump({"polls": len(costs), "poll_ms_median": 1000 * statistics.median(costs) if costs else None},
              open(out, "w"))


def _agent_rate(session_dir: str, n: int) -> float:
    from pilotfish.analytics._load import read_event_columns
    import numpy as np

    pilots = [p for p in os.listdir(session_dir) if p.startswith("pilot.")]
    ev = read_event_columns([os.path.join(session_dir, p, "agent.events") for p in pilots])
    first = ev.t[ev.name == ev.name_code("AGENT_SCHEDULING")].min()
    last = ev.t[np.isin(ev.name, [ev.name_code(s) for s in ("DONE", "FAILED") if s in ev.names])].max()
    return n / (last - first)


def null_round(n: int, attached: bool, base: str) -> dict:
    with tempfile.TemporaryDirectory(dir=base) as d:
        path = os.path.join(d, "s")
        with pf.Session(path=path) as s:
            pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
                resource="local", nodes=4, cores_per_node=64, runtime="1h"))
            tmgr = pf.TaskManager(s)
            tmgr.add_pilots(pilot)
            assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
            proc = None
            stop, out = os.path.join(d, "stop"), os.path.join(d, "attach.json")
            if attached:
                proc = subprocess.Popen([sys.executable, __file__, "_attach", path, stop, out])
                time.sleep(1.5)  # its first paint before the run starts
            descs = [pf.TaskDescription(executable="/bin/true", stdout=False, stderr=False)
                     for _ in range(n)]
            t0 = time.time()
            tasks = tmgr.submit_tasks(descs)
            tmgr.wait_tasks()
            dt = time.time() - t0
            done = sum(t.state == pf.DONE for t in tasks)
        agent = _agent_rate(path, n)
        polls = None
        if proc is not None:
            open(stop, "w").close()
            proc.wait(timeout=60)
            polls = json.load(open(out))
    return {"attached": attached, "done": done, "client_rate": n / dt, "agent_rate": agent,
            "dashboard": polls}


def null(n: int, rounds: int, base: str) -> dict:
    runs = []
    for r in range(rounds):  # ABBA: off, on, on, off, ...
        order = (False, True) if r % 2 == 0 else (True, False)
        for attached in order:
            runs.append(null_round(n, attached, base))
            print(f"  null round {r} attached={attached}: client {runs[-1]['client_rate']:.0f}/s "
                  f"agent {runs[-1]['agent_rate']:.0f}/s", file=sys.stderr)
    on = [x for x in runs if x["attached"]]
    off = [x for x in runs if not x["attached"]]
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return {"tasks": n, "rounds": rounds,
            "client_rate_off": med(off, "client_rate"), "client_rate_on": med(on, "client_rate"),
            "agent_rate_off": med(off, "agent_rate"), "agent_rate_on": med(on, "agent_rate"),
            "client_on_over_off": med(on, "client_rate") / med(off, "client_rate"),
            "agent_on_over_off": med(on, "agent_rate") / med(off, "agent_rate"),
            "client_spread_off": [round(x["client_rate"]) for x in off],
            "client_spread_on": [round(x["client_rate"]) for x in on],
            "polls": [x["dashboard"] for x in on]}


# ---------------------------------------------------------------------------------- flood

def flood(root: str, seconds: float = 10.0) -> dict:
    """The owner's latency and the server's CPU while idle connections flood it."""
    import collections
    import resource
    import socket

    from pilotfish.analytics.synthetic import write_synthetic_session

    session = os.path.join(root, "flood")
    if not os.path.isdir(session):
        write_synthetic_session(session, n_tasks=1000, nodes=4)

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    dash = subprocess.Popen([sys.executable, "-m", "pilotfish.analytics.dashboard", session],
                            stdout=subprocess.PIPE, text=True, preexec_fn=limit)
    line = ""
    while "open: " not in line:
        line = dash.stdout.readline()
    link = line.split("open: ", 1)[1].strip().replace("/?", "/api/summary?")
    port = int(link.split(":")[2].split("/")[0])
    stop = threading.Event()
    opened = [0]

    def attacker():
        held = collections.deque()
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.send(b"G")
                held.append(s)
                opened[0] += 1
            except OSError:
                pass
            if len(held) > 150:
                held.popleft().close()
        for s in held:
            s.close()

    def cpu() -> float:
        with open(f"/proc/{dash.pid}/stat") as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")

    ths = [threading.Thread(target=attacker, daemon=True) for _ in range(8)]
    for t in ths:
        t.start()
    time.sleep(2.0)
    c0, t0, n0 = cpu(), time.monotonic(), opened[0]
    took, codes = [], []
    while time.monotonic() - t0 < seconds or len(took) < 20:
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(link, timeout=10) as r:
                r.read()
                codes.append(r.status)
        except OSError as e:
            codes.append(str(e))
        took.append(time.perf_counter() - t)
        time.sleep(max(0.0, seconds / 20 - took[-1]))
    wall = time.monotonic() - t0
    out = {"owner_ms_median": round(1000 * statistics.median(took), 1),
           "owner_ms_max": round(1000 * max(took), 1),
           "owner_ok": sum(c == 200 for c in codes), "owner_asked": len(codes),
           "server_cpu_share": round((cpu() - c0) / wall, 3),
           "connects_per_s": round((opened[0] - n0) / wall),
           "server_fds": len(os.listdir(f"/proc/{dash.pid}/fd"))}
    stop.set()
    for t in ths:
        t.join()
    dash.terminate()
    dash.wait()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_replay":
        return _replay(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "_attach":
        return _attach(*sys.argv[2:5])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--live", type=int, default=100_000)
    ap.add_argument("--null", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("finished", "live", "null", "flood"), action="append")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "pilotfish-bench-dashboard"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    only = set(a.only or ("finished", "live", "null", "flood"))
    res = {}
    if "finished" in only:
        res["finished"] = finished(a.big, a.dir)
        print(json.dumps({"finished": res["finished"]}, indent=1), flush=True)
    if "live" in only:
        res["live"] = live(a.live, a.dir)
        print(json.dumps({"live": res["live"]}, indent=1), flush=True)
    if "null" in only:
        res["null"] = null(a.null, a.rounds, a.dir)
        print(json.dumps({"null": res["null"]}, indent=1), flush=True)
    if "flood" in only:
        res["flood"] = flood(a.dir)
        print(json.dumps({"flood": res["flood"]}, indent=1), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
