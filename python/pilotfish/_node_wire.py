"""Messages between the agent and its node executors (agent/nodes.py <-> agent/node.py).

One ZeroMQ frame per message, msgpack through typed msgspec Structs (tagged: one decoder for
the whole union), every message a batch. The agent's ROUTER knows a node executor by its
routing id, the node's name.

A spawn spec travels as a tuple: (key, argv, env ["K=V", ...] or None, cwd or None, stdout,
stderr), where stdout/stderr are None (discarded), True (captured: the node executor writes it
to its own spool and sends the text back with the exit) or a path (the user's file).
"""

from __future__ import annotations

from typing import Any, Union

import msgspec


class NodeHello(msgspec.Struct, tag="hello", array_like=True):
    """node -> agent, on connecting (and again on a resync): who it is and what it holds --
    keys still running and exits the agent has not acknowledged (a restarted agent's resync)."""

    node: str
    pid: int
    host: str
    running: list[int] = []
    exits: list[tuple] = []


class Spawn(msgspec.Struct, tag="spawn", array_like=True):
    """agent -> node: processes to start now (spec tuples, see the module docstring)."""

    specs: list[tuple]


class Spawned(msgspec.Struct, tag="spawned", array_like=True):
    """node -> agent: per spec (key, pid, t_spawn) or (key, -errno, message)."""

    results: list[tuple]


class Exits(msgspec.Struct, tag="exits", array_like=True):
    """node -> agent: (key, pid, code, signal, t_exit, utime, stime, maxrss_kib, stdout,
    stderr) per process that ended, in the order they were reaped."""

    exits: list[tuple]


class Kill(msgspec.Struct, tag="kill", array_like=True):
    """agent -> node: signal these processes' groups (and, with SIGKILL, what they started
    outside their group); uids: tasks stopped for good whose escapees (processes marked
    with their PILOTFISH_TASK_UID, e.g. after setsid) must go too."""

    keys: list[int]
    signal: int
    uids: list[str] = []


class Ack(msgspec.Struct, tag="ack", array_like=True):
    """agent -> node: exits it has recorded; the node executor may forget them."""

    keys: list[int]


class Beat(msgspec.Struct, tag="beat", array_like=True):
    """either way: still here (sent when nothing else was for a heartbeat period)."""

    t: float


class Stop(msgspec.Struct, tag="stop", array_like=True):
    """agent -> node: the pilot ends; kill what runs, report it, exit."""

    reason: str


NodeMessage = Union[NodeHello, Spawn, Spawned, Exits, Kill, Ack, Beat, Stop]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(NodeMessage)


def encode(msg: Any) -> bytes:
    return _encoder.encode(msg)


def decode(frame: bytes) -> Any:
    """A message, or msgspec.DecodeError / ValidationError for a frame that is not one."""
    return _decoder.decode(frame)
