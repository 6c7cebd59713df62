"""The agent's start: its parts made and wired, a real pilot's apart from a simulated one's.

`build_real` and `build_simulated` fill a Parts (the agent, _main.py, is one) in three steps:
what every pilot has (`_head`: events, journal, resources, partitions, the task table), what
only one kind has (`_real`: the service registry, the node executors' link, the Rust core's
executor, the PMI worlds; `_simulated`: the launch-cost model, the client's word, the CPU
model, the simulated runner), and again what every pilot has (`_tail`: launch wiring,
launchers, the elastic room, the deadlines; every partition's launchers start, none waited
for). Nothing here opens the client's link or runs the loop: that is the agent's.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import zmq

from .. import _events as E
from .. import _wire
from .._door import Reserve
from .._events import EventWriter
from .._journal import Journal, spawn_record
from .._node_wire import BEAT_S, LOST_AFTER_S
from .._util import raise_nofile_limit
from .clock import REAL, Clock, VirtualClock
from .containment import become_subreaper
from .elastic import Elastic
from .task_runner import TaskRunner
from .knobs import Knobs
from .launching import LaunchWiring
from .node_runner import NodeRunner
from .node_link import NodeLink
from .partition import FAILED, Launchers, Partition, make_partitions
from .pmi.env import clean_environment
from .reports import Reports
from .subagent import own_partition
from .table import TaskTable
from .walltime import batch_time_left, drain_margin

if TYPE_CHECKING:
    from .functions import FunctionPool
    from .pmi.worlds import PmiWorlds
    from .resources import Resources
    from .services import ServiceRegistry
    from .simulation import ClientWord, CpuModel, SimRunner


class Parts:
    """What an agent is made of (its loop's subsystems and what they share)."""

    sim: bool
    clock: Clock
    t_start: float
    uid: str
    sandbox: str
    desc: dict[str, Any]
    events: EventWriter
    reserve: Reserve
    subreaper: bool
    journal: Journal
    heartbeat_s: float
    client_timeout: float
    resources: Resources
    default_launcher: str
    partitions: list[Partition]
    ctx: zmq.Context
    reports: Reports
    tasks_dir: str
    table: TaskTable
    services: ServiceRegistry | None
    nodes: NodeLink | None
    core: Any  # the Rust core's Executor (None on a simulated pilot)
    model: dict | None  # the launch-cost model of a simulated pilot
    word: ClientWord
    cpu: CpuModel
    runner: SimRunner | TaskRunner
    poller: zmq.Poller
    wiring: LaunchWiring
    pmi: PmiWorlds | None
    launchers: Launchers
    elastic: Elastic
    pool: FunctionPool | None
    deadline: float
    drain_at: float


def build_real(p: Parts, config: _wire.AgentConfig, knobs: Knobs, clock: Clock | None) -> None:
    p.sim = False
    job_left, base_env = _head(p, config, knobs, clock or REAL)
    _real(p, base_env, knobs)
    _tail(p, knobs, job_left)


def build_simulated(p: Parts, config: _wire.AgentConfig, knobs: Knobs, clock: Clock | None) -> None:
    """A simulated pilot (simulation.py): the same agent on a virtual clock."""
    p.sim = True
    job_left, _ = _head(p, config, knobs, clock or VirtualClock())
    _simulated(p, knobs)
    _tail(p, knobs, job_left)


def _head(
    p: Parts, config: _wire.AgentConfig, knobs: Knobs, clock: Clock
) -> tuple[float | None, dict[str, str]]:
    desc = config.description
    p.clock = clock
    p.t_start = clock.now()
    p.uid = config.pilot_uid
    p.sandbox = config.sandbox
    p.desc = desc
    p.events = events = EventWriter(
        os.path.join(p.sandbox, "agent.events"),
        enabled=config.profile,
        now=clock.now,
    )
    events.record(p.uid, E.BOOTSTRAP_START, None, p.t_start)
    raise_nofile_limit()
    p.reserve = Reserve()  # descriptors for shutdown, whatever a flood holds (_door.py)
    # task processes that leave their group or session (setsid) stay our descendants
    p.subreaper = become_subreaper()
    # finals are journaled before they are sent: a resumed client learns what ran here
    p.journal = Journal(os.path.join(p.sandbox, "agent.journal"), enabled=config.journal)
    p.heartbeat_s = config.heartbeat_s
    p.client_timeout = config.client_timeout

    from .resources import discover  # after the profiler: part of startup

    p.resources = discover(
        desc["resource"],
        desc["nodes"],
        desc.get("cores_per_node"),
        desc.get("gpus_per_node"),
        desc.get("mem_per_node"),
    )
    # both may run a command (squeue, scontrol): before the executor's reaper starts
    job_left = batch_time_left(desc["resource"])
    from ..launch import default_launcher

    p.default_launcher = desc.get("launcher") or default_launcher(desc["resource"], p.resources)
    nodes = p.resources.nodes
    events.record(
        p.uid,
        E.RESOURCES_OK,
        f"{len(nodes)} nodes, {sum(n.cores for n in nodes)} cores, "
        f"{sum(n.gpus for n in nodes)} gpus ({p.resources.source})",
    )
    # the partitions (one by default): each its nodes, placer, queue and launchers
    # (plan: opt in -- it gains only where durations are known, see README)
    p.partitions = make_partitions(
        p.resources, desc.get("partitions"), p.default_launcher, knobs.scheduler, clock
    )
    own = own_partition(config, p.partitions)  # a sub-agent: its partition alone
    if own is not None:
        p.partitions, p.resources = own, own[0].resources
    if len(p.partitions) > 1:
        for part in p.partitions:
            events.record(
                p.uid,
                E.PARTITION,
                json.dumps(
                    {"index": part.index, "nodes": part.names, "launcher": part.default_launcher}
                ),
            )

    base_env = clean_environment(os.environ)  # (not its own step's identity: pmi/env.py)
    base_env.update(desc.get("environment") or {})
    base_env["PILOTFISH_PILOT_UID"] = p.uid
    base_env["PILOTFISH_SANDBOX"] = p.sandbox
    p.ctx = zmq.Context()
    p.reports = Reports()
    p.tasks_dir = getattr(config, "tasks_dir", "") or os.path.join(p.sandbox, "tasks")
    os.makedirs(p.tasks_dir, exist_ok=True)
    # a multi-rank task on a local pilot that names no launcher anywhere gets an
    # installed MPI launcher (looked up on first need)
    p.table = TaskTable(
        uid=p.uid,
        sandbox=p.sandbox,
        tasks_dir=p.tasks_dir,
        desc=desc,
        resources=p.resources,
        ctx=p.ctx,
        clock=clock,
        events=events,
        reports=p.reports,
        partitions=p.partitions,
        sim=p.sim,
        mpi_launcher=(
            False
            if desc.get("launcher") or desc["resource"] != "local" or p.default_launcher != "direct"
            else None
        ),
    )
    p.services = None  # service groups (services.py): a real pilot's
    p.nodes = None
    p.pmi = None
    p.model = None
    p.pool = None  # function tasks' workers and queues (functions.py), made on first use
    return job_left, base_env


def _real(p: Parts, base_env: dict[str, str], knobs: Knobs) -> None:
    from .. import _core
    from .node_link import wanted as nodes_wanted
    from .pmi.worlds import PmiWorlds, agent_node, kill_ranks, routes
    from .services import ServiceRegistry

    desc, table, clock = p.desc, p.table, p.clock
    # service groups: every task learns where their registry is
    p.services = ServiceRegistry(table, p.ctx)
    base_env.update(p.services.env)
    table.ended.append(p.services)
    # a pilot on other hosts: an executor per node runs its single-node tasks (node_link.py),
    # and the ranks there of its MPI tasks (agent/pmi/worlds.py); the runner is a NodeRunner
    if nodes_wanted(desc, desc["resource"], knobs.node_executors):
        opts = (desc.get("launcher_options") or {}).get("nodes", {})
        p.nodes = NodeLink(
            p.ctx,
            p.sandbox,
            clock,
            p.events,
            p.uid,
            p.partitions,
            clock.now() + float(desc["runtime"]),
            beat_s=float(opts.get("beat_s", BEAT_S)),
            lost_after_s=float(opts.get("lost_after_s", LOST_AFTER_S)),
        )
        table.nodes = p.nodes
        table.single_node_launcher = "nodes"
    # the core writes every exit to agent.exits as it reaps it: with the spawn records of
    # the journal, what finished is known even if this process is killed a moment later
    # (TaskRunner's profile, spool_dir, clock: a sub-agent's spool is its own)
    spool = os.path.join(p.sandbox, "spool")
    p.core = _core.Executor(
        [f"{k}={v}" for k, v in base_env.items()],
        exit_log=os.path.join(p.sandbox, "agent.exits") if p.journal.enabled else None,
    )
    runner: TaskRunner
    if p.nodes is not None:
        runner = NodeRunner(p.nodes, p.core, p.tasks_dir, p.events.enabled, spool, clock)
    else:
        runner = TaskRunner(p.core, p.tasks_dir, p.events.enabled, spool, clock)
    p.runner = runner
    # MPI tasks without a launcher: PMI worlds served by the node executors and, on the
    # agent's own node, by the agent (agent/pmi/worlds.py)
    p.pmi = PmiWorlds(agent_node(p.resources), kill_ranks(runner), p.nodes, clock.real_mono)
    runner.pmi = p.pmi
    if p.nodes is not None:
        p.nodes.pmi = p.pmi
    table.pmi_route = routes(desc, p.resources, p.nodes)


def _simulated(p: Parts, knobs: Knobs) -> None:
    from .._launch_costs import load_model
    from .node_link import wanted as nodes_wanted
    from .simulation import ClientWord, CpuModel, SimRunner

    if nodes_wanted(p.desc, p.desc["resource"], knobs.node_executors):
        p.table.single_node_launcher = "nodes"  # modeled (simulation.py)
    p.core = None
    p.model = load_model(p.desc.get("launch_model"))
    p.word = ClientWord()  # when its clock may run; what its work costs its CPU
    beats = p.table.single_node_launcher == "nodes" or p.default_launcher == "pmi"
    p.cpu = CpuModel(p.model["cpu"], p.partitions, beats)
    p.runner = SimRunner(p.clock, p.events.enabled, cpu=p.cpu)


def _tail(p: Parts, knobs: Knobs, job_left: float | None) -> None:
    table, clock, journal = p.table, p.clock, p.journal
    if journal.enabled:
        p.runner.on_spawn = lambda items: journal.write(
            [spawn_record(t.spec.uid, keys, not t.spec.output_staging) for t, keys in items]
        )
    p.poller = zmq.Poller()
    p.wiring = LaunchWiring(table, p.runner, p.poller, p.desc, p.sandbox, clock, p.model)
    if p.nodes is not None:
        p.wiring.nodes = p.nodes
    p.launchers = Launchers(p.wiring.make, p.wiring.spawn_aux, p.events, p.uid, clock)
    table.use(p.runner, p.launchers)
    p.elastic = Elastic(
        table,
        p.launchers,
        p.resources,
        p.default_launcher,
        knobs.scheduler,
        knobs.rebalance,
        p.wiring.changed,
        p.wiring.forget,
    )
    if p.services is not None:
        p.elastic.leaving.append(p.services)
    runtime = float(p.desc["runtime"])
    p.deadline = p.t_start + runtime
    if job_left is not None:
        p.deadline = min(p.deadline, clock.now() + job_left)
    p.drain_at = p.deadline - drain_margin(runtime)

    # every partition's launcher starts now, all at once; none is waited for: tasks for a
    # partition whose launcher is still starting wait for it (partition.py)
    for part in p.partitions:
        p.launchers.get(part, None)
        if table.single_node_launcher is not None:
            p.launchers.get(part, "nodes")
    changed = p.launchers.poll()
    p.wiring.changed(
        changed
        + [
            lm
            for part in p.partitions
            for lm in part.launchers.values()
            if lm.state == FAILED and lm not in changed
        ]
    )
