"""The agent's environment knobs, read once at its start into one typed value.

PILOTFISH_SCHEDULER     placement policy of every partition (scheduler.py): "utilization"
                        (default) or "plan"
PILOTFISH_REBALANCE     "0": waiting tasks are not moved between partitions (elastic.py)
PILOTFISH_FN_PARK_S     how long a function call whose callable never came waits (functions.py)
PILOTFISH_KEEP_RESULTS  "1": large function results stay in the sandbox when the pilot ends
PILOTFISH_NODE_EXECUTORS  "0" (or false, no, off): no node executors (node_link.wanted)

(PILOTFISH_AGENT_CPROFILE is the profiler's, read where it wraps the loop: _util.run_profiled.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .function_workers import PARK_S


@dataclass(frozen=True)
class Knobs:
    scheduler: str = "utilization"
    rebalance: bool = True
    fn_park_s: float = PARK_S
    keep_results: bool = False
    node_executors: bool = True
    # a bad PILOTFISH_FN_PARK_S fails what needs it (the function calls, with this why), not
    # the pilot
    fn_park_problem: str | None = None


def read_knobs(env: Mapping[str, str]) -> Knobs:
    """The knobs; a bad one's problem names the variable, its value and why."""
    park = env.get("PILOTFISH_FN_PARK_S")
    park_s, problem = PARK_S, None
    if park is not None:
        try:
            park_s = float(park)
        except ValueError:
            problem = f"PILOTFISH_FN_PARK_S={park[:100]!r}: not a number of seconds"
    return Knobs(
        scheduler=env.get("PILOTFISH_SCHEDULER", "utilization"),
        rebalance=env.get("PILOTFISH_REBALANCE", "1") != "0",
        fn_park_s=park_s,
        keep_results=env.get("PILOTFISH_KEEP_RESULTS") == "1",
        node_executors=env.get("PILOTFISH_NODE_EXECUTORS", "").strip()
        not in ("0", "false", "no", "off"),
        fn_park_problem=problem,
    )
