"""A simulated pilot's launch model: its costs, their defaults, and the checks and reads of a
model a user gives (a dict, or the path of a JSON file). The contract between the
description (checked at submit, client side) and the simulated agent (agent/simulation.py,
which runs it) -- here so that neither imports the other. What each cost means:
agent/simulation.py's opening docstring. A model's key "cpu" is not a launch method: the
agent's own CPU costs (_cpu_costs.py).
"""

from __future__ import annotations

import json
from typing import Any

from ._cpu_costs import CPU_KEY, check_cpu, finite_cost, load_cpu
from ._errors import show
from ._files import file_name, read_file

MODEL_KEYS = (
    "startup_s",
    "startup_per_node_s",
    "latency_s",
    "latency_per_inflight_s",
    "fail_rate",
    "hang_rate",
    "hang_s",
)

# Fitted here (BENCHMARKS.md, "Simulation"): PRRTE from the 16-node seed-000 runs of
# bench_partitions.py, direct from the null-task runs.
DEFAULT_MODEL: dict[str, dict[str, float]] = {
    "direct": {
        "startup_s": 0.0,
        "startup_per_node_s": 0.0,
        "latency_s": 0.0004,
        "latency_per_inflight_s": 0.0,
        "fail_rate": 0.0,
        "hang_rate": 0.0,
        "hang_s": 0.0,
    },
    # median of the fits of the five runs of `bench_partitions.py seed000` (P = 1..16);
    # startup_per_node_s: not measurable on one host (0); fail_rate: 0 in those runs, 0.5 %
    # as shared/notes/substrates.md measured for prterun calls here
    # node executors (agent/node_link.py): `pilotfish simulate --fit` of six real pilots of 2-4
    # hosts on the project's cluster of hosts (BENCHMARKS.md, "Node executors"); every host's
    # executor started on the same two cores here, hence the per-node start-up
    "nodes": {
        "startup_s": 0.327,
        "startup_per_node_s": 0.0859,
        "latency_s": 0.0176,
        "latency_per_inflight_s": 0.0,
        "fail_rate": 0.0,
        "hang_rate": 0.0,
        "hang_s": 0.0,
    },
    "prrte": {
        "startup_s": 0.047,
        "startup_per_node_s": 0.0,
        "latency_s": 0.063,
        "latency_per_inflight_s": 0.0117,
        "fail_rate": 0.005,
        "hang_rate": 0.0,
        "hang_s": 10.0,
    },
    # MPI worlds without a launcher (launch method `pmi`: node executors serve PMI): `pilotfish
    # simulate --fit` of a real 4-host pilot on the project's cluster of hosts, 360 worlds of
    # 2-8 ranks (BENCHMARKS.md, "MPI without a launcher"); the send to the last rank's spawn,
    # on two cores shared by every host's executor and the ranks' own MPI_Init
    "pmi": {
        "startup_s": 0.39,
        "startup_per_node_s": 0.0,
        "latency_s": 0.0722,
        "latency_per_inflight_s": 0.00175,
        "fail_rate": 0.0,
        "hang_rate": 0.0,
        "hang_s": 0.0,
    },
}


def _defaults() -> dict[str, dict[str, float]]:
    """DEFAULT_MODEL, and for every other registered launch method PRRTE's costs without its
    failures."""
    from .launch import launchers

    out = {k: dict(v) for k, v in DEFAULT_MODEL.items()}
    for name in launchers():
        out.setdefault(name, dict(DEFAULT_MODEL["prrte"], fail_rate=0.0))
    return out


MAX_MODEL_BYTES = 1 << 20  # a model is a few hundred bytes: 9 launch methods x 7 costs


def read_model(path: str) -> Any:
    """The JSON in a launch model file, read no further than MAX_MODEL_BYTES (a device such as
    /dev/zero never ends); OSError, or ValueError saying why."""
    with open(path, "rb") as f:
        data = f.read(MAX_MODEL_BYTES + 1)
    if len(data) > MAX_MODEL_BYTES:
        raise ValueError(
            f"larger than {MAX_MODEL_BYTES} bytes, the most a launch model file may hold"
        )
    return json.loads(data)


def check_model(model: Any, launchers: tuple[str, ...]) -> str | None:
    """Why this launch model is unusable, or None (used at submit: field launch_model)."""
    # (the reasons name what they quote shortened: a path, a name or a number may be huge)
    if isinstance(model, str):
        try:
            model = read_model(model)
        except OSError as e:  # its text repeats the path whole
            return f"cannot read the model file: {e.strerror or type(e).__name__}"
        except (ValueError, RecursionError) as e:
            return f"cannot read the model file: {show(str(e), 120)}"
    if not isinstance(model, dict):
        return "must be a dict {launch method: {cost: seconds}} or the path of a JSON file"
    for name, costs in model.items():
        if name == CPU_KEY:
            why = check_cpu(costs)
            if why is not None:
                return why
            continue
        if not (isinstance(name, str) and name in launchers):
            return (
                f"{show(name, 60)} is not a launch method ({', '.join(launchers)}) "
                f"nor {CPU_KEY!r} (the agent's CPU costs)"
            )
        if not isinstance(costs, dict):
            return f"{name!r}: its costs must be a dict"
        for k, v in costs.items():
            if not (isinstance(k, str) and k in MODEL_KEYS):
                return f"{name}.{show(k, 60)}: unknown cost (expected {', '.join(MODEL_KEYS)})"
            if not finite_cost(v):
                return f"{name}.{k} = {show(v, 60)}: must be a finite number >= 0"
            if k in ("fail_rate", "hang_rate") and v >= 1:
                return f"{name}.{k} = {show(v, 60)}: must be < 1"
    return None


def load_model(model: Any) -> dict[str, dict[str, Any]]:
    """The defaults, overridden per method and cost by `model` (a dict, a path or None);
    under CPU_KEY the agent's CPU costs (_cpu_costs.load_cpu)."""
    if isinstance(model, str):
        model = read_model(model)
    model = dict(model or {})
    out: dict[str, dict[str, Any]] = _defaults()
    out[CPU_KEY] = load_cpu(model.pop(CPU_KEY, None))
    for name, costs in model.items():
        out.setdefault(name, dict(DEFAULT_MODEL["prrte"]))
        out[name].update(costs)
    return out


def read_launch_model(path: str) -> dict:
    """The launch model in the JSON file `path`, read no further than MAX_MODEL_BYTES (a
    device such as /dev/zero never ends). ValueError naming the file (shortened) and why; its
    costs are checked where it is used (PilotDescription's launch_model)."""
    data = read_file(path, MAX_MODEL_BYTES, "launch model file")
    try:
        model = json.loads(data)
    except RecursionError:
        raise ValueError(f"{file_name(path)}: not a launch model: JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{file_name(path)}: not JSON: {str(e)[:200]}") from None
    if not isinstance(model, dict):
        raise ValueError(
            f"{file_name(path)}: not a launch model: expected a JSON object "
            "{launch method: {cost: seconds}}"
        )
    return model
