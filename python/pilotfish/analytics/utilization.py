"""Resource utilization (RU): where every core-second and GPU-second of the pilots went.

The model follows the seeds (Turilli et al., "Characterizing the Performance of Executing
Many-tasks on Summit", Table 1) and maps each phase onto pilotfish events. It is computed
separately for cores and for GPUs ("resources" below), per pilot, then summed over pilots.

Per pilot (times from the pilot's events):

    t_boot    bootstrap_start            the agent process started: resources are ours
    t_active  ACTIVE                     the agent is ready to run tasks
    t_stop    agent_stop                 the agent stopped using resources
    t_end     first final state          DONE / FAILED / CANCELED: resources given back

    fallbacks: no bootstrap_start -> resources_ok, then ACTIVE; no final state -> the later
    of agent_stop and the pilot's last agent event; no ACTIVE -> t_end (never active: all
    startup); no agent_stop -> t_end. Then t_boot <= t_active <= t_stop <= t_end is enforced.

    R   total resources of the pilot (pilot.json `nodes`: sum of cores, resp. GPUs)
    Ra  resources reserved for the agent (pilot.json `agent_cores` / `agent_gpus`, <= R)
    Rt  = R - Ra, the resources tasks can use

    available = R * (t_end - t_boot)                                      (the 100%)

Per task on the pilot (weight r = ranks * cores_per_rank, resp. ranks * gpus_per_rank, from
tasks.msgpack) its resources are *busy* from schedule_ok (placed) to unschedule (released),
split at its own events:

    schedule_ok -> exec_start   Prepare execution    argv, sandbox, environment
    exec_start  -> exec_ok      Exec runtime         the spawn call (seed: "Exec RP")
    exec_ok     -> launch_ok    Exec launcher        launcher start-up (seed: "Exec PRRTE")
    launch_ok   -> exec_stop    Exec cmd             the payload runs (the workload)
    exec_stop   -> unschedule   Unschedule           reaped, slots being released

    The launcher's own start-up (mpirun/prun wiring up) cannot be told from the payload
    without an event from inside the launch; `launch_ok` is that event. Where it is absent
    (every launcher today) Exec launcher is 0 and the time counts as Exec cmd.
    Missing events: no unschedule -> t_stop (the agent stopped while the task held its
    resources); another missing boundary takes the next present one (a spawn that failed
    leaves its time in the phase that was running); no schedule_ok -> never busy.
    Task intervals are clipped to [t_active, t_stop] and made monotonic.

Pilot-level phases (weight in resources x seconds):

    Agent nodes        Ra * (t_end - t_boot)
    Pilot startup      Rt * (t_active - t_boot)
    Pilot termination  Rt * (t_end - t_stop)

Between t_active and t_stop, let busy(t) be the resources held by tasks and H the peak of
busy over the pilot's life (capped at Rt): H resources are ever used, Rt - H never are. With
HWM(t) = max busy up to t and RHWM(t) = max busy from t on (both capped at Rt):

    Warmup     integral of H - HWM(t)    resources that will be used but not yet: collecting
                                         and scheduling the first tasks (the seeds' per-core
                                         "until the first task is placed on it", counted
                                         without core identities: exact for a first-fit
                                         placer that reuses freed cores first)
    Draining   integral of H - RHWM(t)   resources that were used and won't be again: waiting
                                         for the last tasks to finish, then for agent_stop
    Idle       the rest: Rt * (t_stop - t_active) - busy - Warmup - Draining
               (free resources amid the run, and resources never used at all)

At any t at most one of Warmup, Draining is non-zero (HWM(t) or RHWM(t) equals H), so
busy + Warmup + Draining <= Rt and Idle >= 0. The phases partition `available` exactly:
Agent + Startup + (busy phases + Warmup + Draining + Idle) + Termination = R * (t_end - t_boot).
If events ever showed more resources busy than Rt (clock skew between release and reuse),
Idle would go negative by that excess, keeping the sum exact; `oversubscribed` reports it.

drain_start / drain_stop are not phase boundaries (the seeds' draining is per core, which is
what the RHWM construction measures); they are drawn as markers in the plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pilotfish import _events as E
from pilotfish.analytics.steps import Step, boundary_bin_means

# (key, label) in stacking order: bottom to top in the plots, left to right in tables
PHASES = (
    ("agent_nodes", "Agent nodes"),
    ("pilot_startup", "Pilot startup"),
    ("warmup", "Warmup"),
    ("prepare_execution", "Prepare execution"),
    ("exec_runtime", "Exec runtime"),
    ("exec_launcher", "Exec launcher"),
    ("exec_cmd", "Exec cmd"),
    (E.UNSCHEDULE, "Unschedule"),
    ("draining", "Draining"),
    ("pilot_termination", "Pilot termination"),
    ("idle", "Idle"),
)
PHASE_KEYS = tuple(k for k, _ in PHASES)
PHASE_DEFINITIONS = {
    "agent_nodes": "resources reserved for the agent, bootstrap_start → pilot final state",
    "pilot_startup": "all task resources, bootstrap_start → ACTIVE",
    "warmup": "resources not yet used by any task, ACTIVE → when busy first reaches them",
    "prepare_execution": "per task, schedule_ok → exec_start",
    "exec_runtime": "per task, exec_start → exec_ok (spawn)",
    "exec_launcher": "per task, exec_ok → launch_ok (0 without a launch_ok event)",
    "exec_cmd": "per task, launch_ok (or exec_ok) → exec_stop: the workload",
    E.UNSCHEDULE: "per task, exec_stop → unschedule",
    "draining": "resources used before but never again, until agent_stop",
    "pilot_termination": "all task resources, agent_stop → pilot final state",
    "idle": "the rest: free amid the run, or never used",
}
PHASE_LABELS = dict(PHASES)
# the busy phases and the task events that bound them
TASK_BOUNDARIES = (E.SCHEDULE_OK, E.EXEC_START, E.EXEC_OK, E.LAUNCH_OK, E.EXEC_STOP, E.UNSCHEDULE)
TASK_PHASES = ("prepare_execution", "exec_runtime", "exec_launcher", "exec_cmd", E.UNSCHEDULE)
KINDS = ("cores", "gpus")


@dataclass
class PilotWindow:
    uid: str
    t_boot: float
    t_active: float
    t_stop: float
    t_end: float
    total: dict  # kind -> R
    agent: dict  # kind -> Ra


@dataclass
class Utilization:
    """RU of one resource kind, summed over pilots. Values in resource-seconds."""

    kind: str
    available: float
    phases: dict[str, float]  # key -> resource-seconds
    per_pilot: dict[str, dict[str, float]]  # pilot -> key -> resource-seconds
    oversubscribed: float = 0.0
    # for plots over time: pilot-level phases, warmup and draining as step functions (per
    # pilot), the busy phases as the tasks' boundaries (n, 6) and weights (per pilot)
    steps: dict[str, list[Step]] = field(default_factory=dict, repr=False)
    task_intervals: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def shares(self) -> dict[str, float]:
        """Fraction of `available` per phase (they sum to 1); empty if nothing available."""
        if self.available <= 0:
            return {k: 0.0 for k in PHASE_KEYS}
        return {k: v / self.available for k, v in self.phases.items()}

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "phase": [PHASE_LABELS[k] for k in PHASE_KEYS],
                "resource_s": [self.phases[k] for k in PHASE_KEYS],
                "share": [self.shares[k] for k in PHASE_KEYS],
            },
            index=pd.Index(PHASE_KEYS, name="key"),
        )


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].to_numpy(np.float64) if name in df else np.full(len(df), np.nan)


def pilot_windows(pilots: pd.DataFrame) -> list[PilotWindow]:
    """The time boundaries and resources of each pilot that started (module docstring)."""
    out = []
    for uid, p in pilots.iterrows():

        def t(name):
            v = p.get(name, np.nan)
            return float(v) if pd.notna(v) else np.nan

        t_end = t("t_final")
        if np.isnan(t_end):
            t_end = np.nanmax([t(E.AGENT_STOP), t("t_last_event"), -np.inf])
        elif t(E.AGENT_STOP) > t_end:
            # a simulated pilot: its agent's events are on the virtual clock, the final state
            # the client saw on the real one (a real agent always stops before its job ends)
            t_end = t(E.AGENT_STOP)
        t_boot = next(
            (x for x in (t(E.BOOTSTRAP_START), t(E.RESOURCES_OK), t("ACTIVE")) if not np.isnan(x)),
            np.nan,
        )
        if np.isnan(t_boot) or not np.isfinite(t_end):
            continue  # never started: it held nothing
        t_end = max(t_end, t_boot)
        t_active = t("ACTIVE")
        t_active = t_end if np.isnan(t_active) else min(max(t_active, t_boot), t_end)
        t_stop = t(E.AGENT_STOP)
        t_stop = t_end if np.isnan(t_stop) else min(max(t_stop, t_active), t_end)
        total = {"cores": int(p.get("cores", 0) or 0), "gpus": int(p.get("gpus", 0) or 0)}
        agent = {
            "cores": min(int(p.get("agent_cores", 0) or 0), total["cores"]),
            "gpus": min(int(p.get("agent_gpus", 0) or 0), total["gpus"]),
        }
        out.append(PilotWindow(str(uid), t_boot, t_active, t_stop, t_end, total, agent))
    return out


def task_boundaries(raw: np.ndarray, w: PilotWindow) -> np.ndarray:
    """Boundary times (n, 6: TASK_BOUNDARIES) of tasks placed on pilot w, from their raw event
    times (NaN: missing; schedule_ok present), filled and clipped as the module docstring
    says."""
    b = raw.copy()
    s, es, eo, lo, ex, u = range(6)
    b[:, u] = np.where(np.isnan(b[:, u]), w.t_stop, b[:, u])
    b[:, ex] = np.where(np.isnan(b[:, ex]), b[:, u], b[:, ex])
    b[:, eo] = np.where(np.isnan(b[:, eo]), b[:, ex], b[:, eo])
    b[:, lo] = np.where(np.isnan(b[:, lo]), b[:, eo], b[:, lo])
    b[:, es] = np.where(np.isnan(b[:, es]), b[:, eo], b[:, es])
    np.clip(b, w.t_active, w.t_stop, out=b)
    return np.maximum.accumulate(b, axis=1)


def _pilot_kind(w: PilotWindow, kind: str, b: np.ndarray, weight: np.ndarray):
    """(phases dict, steps dict, oversubscribed, (boundaries, weights) of tasks using the
    kind) of one pilot and resource kind."""
    R, Ra = w.total[kind], w.agent[kind]
    Rt = R - Ra
    phases = dict.fromkeys(PHASE_KEYS, 0.0)
    steps: dict[str, Step] = {}
    phases["agent_nodes"] = Ra * (w.t_end - w.t_boot)
    phases["pilot_startup"] = Rt * (w.t_active - w.t_boot)
    phases["pilot_termination"] = Rt * (w.t_end - w.t_stop)
    steps["agent_nodes"] = Step.constant(w.t_boot, w.t_end, Ra)
    steps["pilot_startup"] = Step.constant(w.t_boot, w.t_active, Rt)
    steps["pilot_termination"] = Step.constant(w.t_stop, w.t_end, Rt)

    used = weight > 0
    b, weight = b[used], weight[used]
    for k, key in enumerate(TASK_PHASES):
        phases[key] = float(np.dot(weight, b[:, k + 1] - b[:, k]))
    busy_total = sum(phases[k] for k in TASK_PHASES)

    busy = Step.from_intervals(b[:, 0], b[:, -1], weight).restricted(w.t_active, w.t_stop)
    oversubscribed = 0.0
    if len(busy.times):
        level = busy.values[:-1]  # on [times[j], times[j+1])
        dt = np.diff(busy.times)
        hwm = np.minimum(np.maximum.accumulate(level), Rt)
        rhwm = np.minimum(np.maximum.accumulate(level[::-1])[::-1], Rt)
        peak = hwm[-1]
        warm = peak - hwm
        drain = peak - rhwm
        phases["warmup"] = float(np.dot(warm, dt))
        phases["draining"] = float(np.dot(drain, dt))
        oversubscribed = float(np.dot(np.maximum(level - Rt, 0), dt))
        steps["warmup"] = Step(busy.times, np.append(warm, 0.0))
        steps["draining"] = Step(busy.times, np.append(drain, 0.0))
    phases["idle"] = (
        Rt * (w.t_stop - w.t_active) - busy_total - phases["warmup"] - phases["draining"]
    )
    return phases, steps, oversubscribed, (b, weight)


def resource_utilization(
    tasks: pd.DataFrame, pilots: pd.DataFrame, kinds: tuple[str, ...] = KINDS
) -> dict[str, Utilization]:
    """RU per resource kind ("cores", "gpus"), phases as in the module docstring."""
    windows = pilot_windows(pilots)
    out = {}
    pilot_of_task = (
        tasks["pilot"].astype(object).to_numpy() if "pilot" in tasks else np.full(len(tasks), None)
    )
    raw = np.stack([_col(tasks, n) for n in TASK_BOUNDARIES], axis=1)
    placed = ~np.isnan(raw[:, 0])
    per_pilot_rows = {w.uid: np.flatnonzero((pilot_of_task == w.uid) & placed) for w in windows}
    bounds = {w.uid: task_boundaries(raw[per_pilot_rows[w.uid]], w) for w in windows}
    for kind in kinds:
        weight_all = tasks[kind].to_numpy(np.float64) if kind in tasks else np.zeros(len(tasks))
        total = dict.fromkeys(PHASE_KEYS, 0.0)
        per_pilot: dict[str, dict[str, float]] = {}
        all_steps: dict[str, list[Step]] = {k: [] for k in PHASE_KEYS if k != "idle"}
        intervals: list[tuple[np.ndarray, np.ndarray]] = []
        available, over = 0.0, 0.0
        for w in windows:
            phases, steps, o, iv = _pilot_kind(
                w, kind, bounds[w.uid], weight_all[per_pilot_rows[w.uid]]
            )
            intervals.append(iv)
            per_pilot[w.uid] = phases
            for k in PHASE_KEYS:
                total[k] += phases[k]
            for k, s in steps.items():
                all_steps[k].append(s)
            available += w.total[kind] * (w.t_end - w.t_boot)
            over += o
        out[kind] = Utilization(kind, available, total, per_pilot, over, all_steps, intervals)
    return out


def capacity_step(pilots: pd.DataFrame, kind: str) -> Step:
    """Total resources held over time (sum over pilots of R on [t_boot, t_end))."""
    return Step.total(
        [Step.constant(w.t_boot, w.t_end, w.total[kind]) for w in pilot_windows(pilots)]
    )


def utilization_over_time(u: Utilization, pilots: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Mean resources in each phase per time bin (rows: bins; columns: PHASE_KEYS). Idle is
    the remainder of the resources held, so each row sums to the capacity in that bin."""
    cap = capacity_step(pilots, u.kind).bin_means(edges)
    cols = {
        k: Step.total(u.steps.get(k, [])).bin_means(edges)
        for k in PHASE_KEYS
        if k not in TASK_PHASES and k != "idle"
    }
    b = np.concatenate([iv[0] for iv in u.task_intervals]) if u.task_intervals else np.zeros((0, 6))
    weight = np.concatenate([iv[1] for iv in u.task_intervals]) if u.task_intervals else np.zeros(0)
    for key, means in zip(TASK_PHASES, boundary_bin_means(b, weight, edges)):
        cols[key] = means
    cols["idle"] = cap - sum(cols.values())
    df = pd.DataFrame({k: cols[k] for k in PHASE_KEYS})
    df.index = pd.Index((edges[:-1] + edges[1:]) / 2, name="t")
    df["capacity"] = cap
    return df
