"""Fuzz a live agent with wire frames: at least N messages (task specs count one each).

    .venv/bin/python bench/bench_wire_fuzz.py --messages 100000

Frames come from tests/agent/wire_fuzz.py (plausible task specs with garbage fields,
truncated and overlong specs, random cancels, resyncs, heartbeats and junk), sent through the
session's bridge to one local pilot, paced so the agent is never more than a few thousand
messages behind. At the end: the agent must be alive, the pilot ACTIVE, and a normal task
must run; printed are the counts and how the agent answered (its events).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "agent"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import pilotfish as pf  # noqa: E402
import wire_fuzz  # noqa: E402  (the strategies, shared with the test)
from pilotfish._events import read_all_events  # noqa: E402


class Enough(Exception):
    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sent = collections.Counter()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d, pf.Session(path=os.path.join(d, "s")) as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=4,
                                                                     runtime="2h"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        pid = json.load(open(os.path.join(pilot.sandbox, "pilot.json")))["agent_pid"]

        @seed(args.seed)
        @settings(max_examples=10 ** 9, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(wire_fuzz.frame)
        def blast(frame):
            data = wire_fuzz.encode(frame)
            if data is None:
                sent["not encodable (not sent)"] += 1
                return
            kind = frame[0] if isinstance(frame, list) and frame and isinstance(frame[0], str) else "junk"
            sent[kind if kind in ("submit", "cancel", "resync", "beat") else "junk"] += 1
            sent["messages"] += wire_fuzz.count(frame)
            s._bridge.send(pilot.uid, data)
            if sent["frames"] % 500 == 0:  # pace: a round trip, so the agent keeps up
                probe = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
                if probe.wait(timeout=120) != pf.DONE:
                    raise AssertionError(f"probe task {probe.state}: {probe.reason}")
            sent["frames"] += 1
            if sent["messages"] >= args.messages:
                raise Enough

        try:
            blast()
        except Enough:
            pass
        alive = os.path.exists(f"/proc/{pid}")
        last = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/echo", arguments=["alive"]))
        state = last.wait(timeout=120)
        events = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
        answers = collections.Counter(e[2] for e in events if e[1] != pilot.uid)
        pilot_events = collections.Counter(e[2] for e in events if e[1] == pilot.uid)
        result = {"messages": sent["messages"], "frames": dict(sent), "seconds": round(time.time() - t0, 1),
                  "agent_alive": alive, "pilot": pilot.state, "task_after": state,
                  "task_events": dict(answers.most_common(8)),
                  "pilot_events": {k: v for k, v in pilot_events.items() if k in ("bad_frame", "client_reattach")}}
    print(json.dumps(result, indent=1))
    return 0 if alive and state == pf.DONE else 1


if __name__ == "__main__":
    sys.exit(main())
