"""The agent's environment knobs, read once at its start into one typed value.

PILOTFISH_SCHEDULER     placement policy of every partition (scheduler.py): "utilization"
                        (default) or "plan"
PILOTFISH_REBALANCE     "0": waiting tasks are not moved between partitions (elastic.py)
PILOTFISH_FN_PARK_S     how long a function call whose callable never came waits (functions.py)
PILOTFISH_KEEP_RESULTS  "1": large function results stay in the sandbox when the pilot ends

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


def read_knobs(env: Mapping[str, str]) -> Knobs:
    """The knobs; ValueError naming the variable, its value and why if one is not valid."""
    park = env.get("PILOTFISH_FN_PARK_S", "")
    try:
        park_s = float(park) if park else PARK_S
    except ValueError:
        raise ValueError(f"PILOTFISH_FN_PARK_S={park[:100]!r}: not a number of seconds") from None
    return Knobs(
        scheduler=env.get("PILOTFISH_SCHEDULER", "utilization"),
        rebalance=env.get("PILOTFISH_REBALANCE", "1") != "0",
        fn_park_s=park_s,
        keep_results=env.get("PILOTFISH_KEEP_RESULTS") == "1",
    )
