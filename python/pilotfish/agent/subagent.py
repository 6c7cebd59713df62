"""Sub-agents: one agent process per partition of a large pilot, under a root (root.py).

A sub-agent IS the agent (_main.py), started by the root for one partition of the pilot's
nodes: its own task table, placer, queue, launchers and node link over that partition's nodes
only, and the root as its client (the same wire, CURVE-authenticated: the root's ROUTER for
it takes its key and no other). What makes it one is its configuration, SubAgentConfig: an
AgentConfig that also says which partition it serves and where the pilot's tasks/ directory
is (every task's directory stays where the client expects it: <pilot sandbox>/tasks/<uid>).
Its own files (agent.json, agent.log, agent.events, agent.journal, nodes/, functions/,
services/, launcher daemons' folders) are in <pilot sandbox>/sub/p<i>/, 0700.

When a pilot has sub-agents (subagents_on): a pilot of several partitions whose description
says `subagents=True`, or says nothing and has at least AUTO_NODES nodes. Never a simulated
pilot (its launch model's cpu.subagents models them) nor one of a single partition.

AUTO_NODES (512): below it one agent serves the pilot as before. Measured (bench/
bench_subagents.py, this machine): one agent costs ~131 us of CPU per task at one task per
frame to node executors (~7,600 tasks/s per core) plus ~38 us per node per second of
heartbeats -- at 512 nodes ~20 ms/s, at 1,024 ~40 ms/s, and no more past that (node_link.py's
beat period grows past BEATS_PER_S nodes); a root adds a hop (two CURVE frames
each way per routed frame) and its own few microseconds per task routed. A pilot of 512+ nodes
of 8+ cores running second-long tasks asks thousands of tasks/s, one agent's ceiling; a
smaller one does not, and its tasks keep the shorter path.
"""

from __future__ import annotations

import os

import msgspec

from .. import _wire

AUTO_NODES = 512  # a pilot of several partitions has sub-agents from this many nodes on


class SubAgentConfig(_wire.AgentConfig, forbid_unknown_fields=True):
    """What a sub-agent is started with (root.py writes it 0600 in its folder): an agent's
    configuration (its address: the root's ROUTER for it; its curve: that ROUTER's public
    key and the sub-agent's own pair), the partition it serves (its index in the pilot's
    layout) and the pilot's tasks/ directory."""

    partition: int = 0
    tasks_dir: str = ""


_decoder = msgspec.json.Decoder(SubAgentConfig)


def decode_subagent_config(data: bytes, path: str) -> SubAgentConfig:
    """A sub-agent's configuration; ValueError naming the file, the field and why if not."""
    try:
        cfg = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise ValueError(f"{path}: not a sub-agent configuration: {e}") from None
    if cfg.partition < 0 or not cfg.tasks_dir:
        raise ValueError(f"{path}: partition = {cfg.partition}, tasks_dir = {cfg.tasks_dir!r}")
    return cfg


def encode_subagent_config(cfg: SubAgentConfig) -> bytes:
    return msgspec.json.format(msgspec.json.encode(cfg), indent=1)


def partition_count(desc: dict) -> int:
    parts = desc.get("partitions") or 1
    return parts if isinstance(parts, int) else len(parts)


def subagents_on(desc: dict) -> bool:
    """Does this pilot (its description, as the agent gets it) run a root and a sub-agent
    per partition? See the module docstring."""
    opt = desc.get("subagents")
    if opt is False or desc.get("resource") == "simulated" or partition_count(desc) < 2:
        return False
    env = os.environ.get("PILOTFISH_SUBAGENTS")  # (0: never, as for node executors)
    if env is not None and env.strip() in ("0", "false", "no", "off"):
        return False
    return opt is True or int(desc.get("nodes") or 1) >= AUTO_NODES


def own_partition(config: _wire.AgentConfig, partitions: list) -> list | None:
    """A sub-agent's partitions: its own alone (index and first node as in the whole
    pilot, so slots and events name what the client knows); None for an agent."""
    if not isinstance(config, SubAgentConfig):
        return None
    if config.partition >= len(partitions):
        raise ValueError(
            f"partition = {config.partition}: the pilot has {len(partitions)} partitions"
        )
    return [partitions[config.partition]]
