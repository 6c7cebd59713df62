"""Floods before login against every socket a pilot listens on (issue 42 rows 1-3), as user
nobody, with the figures BENCHMARKS reports: what the agent's and the client's memory and
descriptors do, and the task rate with and without a flood, in one run.

    .venv/bin/python bench/bench_floods.py [--tasks 2000] [--seconds 20]
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_floods.py --slurm

local    a local pilot, the session on TCP: the client's control plane (TCP), the agent's
         service registry and function pool (abstract unix sockets, found in /proc/net/unix)
--slurm  a 2-node Slurm pilot on the test cluster (agent on n1, a node executor on n2): the
         client's TCP port on the login host, and the agent's node port, service registry
         and function pool TCP endpoints on n1 (found as an attacker finds them: ss in n1's
         namespace), attacked from the login host
Phases: (1) --tasks null tasks, no flood; (2) `big`: 4 connections per socket declaring an
8 GiB frame, streaming zeros for 3 s -- RSS before/after; (3) `hold`: 6 processes x 1,000
half-open connections for --seconds while --tasks null tasks run -- peak descriptors of the
agent, tasks/s; (4) `refuse`: refused handshakes for 5 s -- REFUSED events written.
Needs root (the attackers run as nobody). Exit status 1 if a task failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "agent"))

import pilotfish as pf  # noqa: E402
from pilotfish import _events as E  # noqa: E402
from pilotfish._events import read_all_events  # noqa: E402
from test_floods import _abstract, _fn, _rss_mb, attack, finished  # noqa: E402


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _tcp_ports(pid: int, netns: str | None) -> list[str]:
    """The TCP ports pid listens on (ss, in that host's namespace)."""
    cmd = ["ss", "-ltnpH"]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return [f"tcp://{line.split()[3]}" for line in out.splitlines() if f"pid={pid}," in line]


def _run(tmgr, n: int) -> tuple[float, collections.Counter]:
    t0 = time.monotonic()
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true") for _ in range(n)])
    states = tmgr.wait_tasks([t.uid for t in tasks], timeout=600)
    return n / (time.monotonic() - t0), collections.Counter(states)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--slurm", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="pf-floods-")
    os.chmod(d, 0o755)
    bad = 0
    rows = []
    kw = dict(bind="tcp") if a.slurm else dict(bind="tcp", interface="127.0.0.1")
    with pf.Session(path=os.path.join(d, "s"), **kw) as s:
        pmgr = pf.PilotManager(s)
        desc = (pf.PilotDescription(resource="slurm", nodes=2, runtime="15m") if a.slurm
                else pf.PilotDescription(runtime="15m"))
        pilot = pmgr.submit_pilots(desc)
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=120) == pf.ACTIVE, pilot.reason
        assert tmgr.submit_tasks(pf.TaskDescription(function=_fn, args=(1,))).wait(
            timeout=60) == pf.DONE
        agent = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]
        if a.slurm:
            targets = [s.address] + _tcp_ports(agent, f"{os.environ.get('PILOTFISH_NETNS', 'pilotfish')}-n1")
        else:
            targets = [s.address, _abstract(agent, "services"), _abstract(agent, "functions")]
        print(f"sockets attacked: {targets}", flush=True)
        rate0, st = _run(tmgr, a.tasks)
        bad += a.tasks - st[pf.DONE]
        rows.append(("no flood", f"{rate0:.0f} tasks/s", dict(st)))
        a0, c0 = _rss_mb(agent), _rss_mb(os.getpid())
        big = finished(attack("big", 3, targets))
        a1, c1 = _rss_mb(agent), _rss_mb(os.getpid())
        rows.append(("big frames", f"agent RSS {a0:.0f} -> {a1:.0f} MB, client {c0:.0f} -> "
                     f"{c1:.0f} MB", big))
        floods = [attack("hold:1000", a.seconds, targets) for _ in range(6)]
        peak = [0]
        stop = threading.Event()

        def watch():
            while not stop.wait(0.2):
                peak[0] = max(peak[0], _fds(agent))
        w = threading.Thread(target=watch)
        w.start()
        time.sleep(2)
        rate1, st = _run(tmgr, a.tasks)
        bad += a.tasks - st[pf.DONE]
        got = [finished(f, timeout=a.seconds + 120) for f in floods]
        stop.set()
        w.join()
        rows.append(("6 x 1,000 half-open", f"{rate1:.0f} tasks/s ({rate1 / rate0:.2f} x no "
                     f"flood), agent peak {peak[0]} descriptors",
                     {"opened": sum(g["opened"] for g in got), "tasks": dict(st)}))
        ev0 = len(read_all_events(os.path.join(pilot.sandbox, "agent.events")))
        ref = finished(attack("refuse", 5, targets))
        time.sleep(1.5)
        ev1 = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
        refused = [e for e in ev1[ev0:] if e[2] == E.REFUSED]
        rows.append(("refused handshakes", f"{ref['per_s']}/s for 5 s -> {len(refused)} "
                     f"REFUSED events in the agent", ref))
        pilot.cancel()
    print(f"\n{'phase':<22} figure")
    for name, fig, raw in rows:
        print(f"{name:<22} {fig}\n{'':<22} {raw}")
    print(f"\npilot {pilot.state}; tasks not DONE: {bad}")
    return 1 if bad or pilot.state != pf.CANCELED else 0


if __name__ == "__main__":
    sys.exit(main())
