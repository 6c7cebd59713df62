"""Messages between the agent and its node executors (agent/node_link.py <->
agent/node_executor.py).

One ZeroMQ frame per message, msgpack through typed msgspec Structs (tagged: one decoder for
the whole union), every message a batch. The agent's ROUTER knows a node executor by the key
its connection proved (its ZAP User-Id, the node's name: agent/node_keys.py), never by a
routing id the peer chose.

A spawn spec travels as a tuple: (key, argv, env ["K=V", ...] or None, cwd or None, stdout,
stderr), where stdout/stderr are None (discarded), True (captured: the node executor writes it
to its own spool and sends the text back with the exit) or a path (the user's file).

What a node executor sends is typed all the way down (rows of fixed shape, integers within
their ranges, texts of bounded length): the agent trusts no peer's frame further than its
shape, not even a node's, so a frame that is not exactly a node's message fails to
decode -- one error, which the agent counts and drops (agent/node_link.py) -- and never reaches
code that would take it apart. Trailing fields a decoder does not know are ignored (a newer
executor's additions). What the agent sends (spawn specs) the executor checks spec by spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

import msgspec

# what a node may say, bounded: the agent trusts none of it further than its shape
Key = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # the agent's spawn keys
Pid = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]  # a pid, or -errno
Code = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
Sig = Annotated[int, msgspec.Meta(ge=0, le=255)]
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0)]  # (NaN is refused too)
Name = Annotated[str, msgspec.Meta(max_length=255)]
Text = Annotated[str, msgspec.Meta(max_length=1 << 21)]  # captured output (1 MiB cap, utf-8)


# -- the node executors' configuration ------------------------------------------------------
# Each default written once, here. The knobs a pilot description sets
# (launcher_options={"nodes": {...}}; README, "Node executors"):
BEAT_S = 1.0  # heartbeat asked of agent and executors (agent/node_link.py lengthens it with N)
LOST_AFTER_S = 10.0  # a node not heard for this long is lost (also lengthened with N)
START_TIMEOUT_S = 60.0  # the step that starts the executors: until every one said hello
AGENT_TIMEOUT_S = 60.0  # an executor whose agent stays away this long (at least) exits
CONFIG_MAX = 64 << 10  # nodes.json is a few hundred bytes


class NodeConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """nodes.json: what the agent (agent/node_link.py) tells every node executor it starts,
    real (agent/node_executor.py) or emulated (agent/node_emulated.py): its pilot, the pilot's
    sandbox, the node port's address and its public key's file, the heartbeat, after how long
    without the agent it fences itself (None: never), after how long it exits, and the
    walltime's end (epoch seconds; None: none)."""

    pilot: str
    sandbox: str
    address: str
    key_file: str
    beat_s: Seconds = BEAT_S
    fence_after_s: Union[Seconds, None] = None
    agent_timeout_s: Seconds = AGENT_TIMEOUT_S
    deadline: Union[Seconds, None] = None


def read_node_config(path: str) -> NodeConfig:
    """The executor's configuration from `path` (the owner's own private file, opened without
    following a link: _util.read_private); ValueError naming the file, the field and why
    when it is not one."""
    from ._errors import SessionError
    from ._util import read_private

    try:
        data = read_private(path)
    except SessionError as e:  # a link, or not the owner's
        raise ValueError(f"node executor config: {e}") from None
    except OSError as e:
        why = e.strerror or str(e)
        raise ValueError(f"node executor config {path}: cannot read it: {why}") from None
    if len(data) > CONFIG_MAX:
        n = len(data)
        raise ValueError(f"node executor config {path}: {n} bytes, more than {CONFIG_MAX}")
    try:
        return msgspec.json.decode(data, type=NodeConfig)
    except msgspec.ValidationError as e:
        raise ValueError(f"node executor config {path}: {e}") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"node executor config {path}: not JSON ({e})") from None


class ExitRow(msgspec.Struct, array_like=True):
    """One process that ended, in a node's Exits and NodeHello: its key, pid, exit code,
    signal, time, user and system CPU seconds, max RSS (KiB), captured stdout and stderr
    (None: not captured) and whether the executor killed it fencing itself (agent/node_executor.py:
    it had not heard the agent for fence_after_s)."""

    key: Key
    pid: Pid
    code: Code
    sig: Sig
    t: Seconds
    ut: Seconds = 0.0
    st: Seconds = 0.0
    rss: Count = 0
    stdout: Union[Text, None] = None
    stderr: Union[Text, None] = None
    fenced: bool = False


class NodeHello(msgspec.Struct, tag="hello", array_like=True):
    """node -> agent, on connecting and whenever the agent asks (Resync): who it is and what it
    holds -- keys still running and exits the agent has not acknowledged (a restarted agent's
    resync; a lost node's reconciliation, agent/node_link.py) -- and its executor's token (drawn
    at its start, in its memory only: a later connection of the node is adopted only with the
    same one, agent/node_keys.py)."""

    node: Name
    pid: Pid
    host: Name
    running: list[Key] = []
    exits: list[ExitRow] = []
    token: Annotated[bytes, msgspec.Meta(max_length=64)] = b""


class PmiStart(msgspec.Struct, array_like=True):
    """In a Spawn: a PMI world some of whose ranks the node spawns (launch method `pmi`): its KVS
    name, size, the node of every rank (rank order), this node's ranks as (rank, spawn key),
    and how long a rank may take to reach PMI init. The executor serves their PMI connections
    (agent/pmi/node.py) and passes each its descriptor."""

    kvsname: str
    size: int
    nodes: list[str]
    ranks: list[tuple[int, int]]
    init_timeout: float = 60.0


class Spawn(msgspec.Struct, tag="spawn", array_like=True):
    """agent -> node: processes to start now (spec tuples, see the module docstring), and the
    PMI worlds some of them are ranks of."""

    specs: list[tuple]
    worlds: list[PmiStart] = []


PmiKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]  # pmi.KEYLEN_MAX
PmiValue = Annotated[str, msgspec.Meta(max_length=1024)]  # pmi.VALLEN_MAX
PmiKeys = Annotated[dict[PmiKey, PmiValue], msgspec.Meta(max_length=1 << 16)]
# keys and values of one part of a fence, bytes (each key also costs pmi.ENTRY_COST): a
# fence's keys travel in parts of at most this, both ways, each next part pulled by its
# receiver (agent/pmi/fence.py) -- no frame holds more, whatever the number of keys
PMI_PART_BYTES = 128 * 1024


class PmiPart(msgspec.Struct, tag="part", array_like=True):
    """A fence step: one part of a node's keys (node -> agent) or of the union of every node's
    (agent -> node); more: further parts follow, each sent when the receiver pulls it."""

    keys: PmiKeys
    more: bool = False


class PmiPull(msgspec.Struct, tag="pull", array_like=True):
    """A fence step: send part `part` (0: the first) of what you are sending me."""

    part: Count


PmiStep = Union[PmiPart, PmiPull]
if TYPE_CHECKING:  # (for the checker: what the executor's PMI server hands over to send)
    EncodedStep = Any
else:
    EncodedStep = msgspec.Raw  # a PmiStep, encoded: agent/pmi/fence.py decodes it


class PmiFence(msgspec.Struct, tag="pmi_fence", array_like=True):
    """node -> agent: every rank of this world on the node entered fence `epoch`; keys: a
    PmiStep, encoded (msgspec.Raw) -- the first part of the keys they put since the last
    fence, the next part when the agent pulls it, or a pull of the union's next part. The
    agent decodes the step itself, so a step it cannot accept fails that world at once,
    naming why (agent/pmi/fence.py)."""

    kvsname: Name
    epoch: Count
    keys: EncodedStep


class PmiFenceDone(msgspec.Struct, tag="pmi_done", array_like=True):
    """agent -> node: merged, a PmiStep, encoded -- a part of the union of every node's keys
    of fence `epoch` (the last one completes it: the ranks are answered, and served gets
    from it), or a pull of the node's next part."""

    kvsname: str
    epoch: int
    merged: EncodedStep


class PmiFail(msgspec.Struct, tag="pmi_fail", array_like=True):
    """node -> agent: a world cannot go on (agent/pmi/node.py: kind abort, error, lost, noinit,
    timeout), naming the rank (-1: the job) and why."""

    kvsname: Name
    rank: Annotated[int, msgspec.Meta(ge=-1, le=(1 << 31) - 1)]
    why: Annotated[str, msgspec.Meta(max_length=4096)]
    kind: Annotated[str, msgspec.Meta(max_length=16)]


class PmiDrop(msgspec.Struct, tag="pmi_drop", array_like=True):
    """agent -> node: stop serving this world (its task failed elsewhere)."""

    kvsname: str
    why: str


class Spawned(msgspec.Struct, tag="spawned", array_like=True):
    """node -> agent: per spec (key, pid, t_spawn) or (key, -errno, message)."""

    results: list[tuple[Key, Pid, Union[float, Annotated[str, msgspec.Meta(max_length=4096)]]]]


class Exits(msgspec.Struct, tag="exits", array_like=True):
    """node -> agent: the processes that ended, in the order they were reaped."""

    exits: list[ExitRow]


class Kill(msgspec.Struct, tag="kill", array_like=True):
    """agent -> node: signal these processes' groups (and, with SIGKILL, what they started
    outside their group); uids: tasks stopped for good whose escapees (processes marked
    with their PILOTFISH_TASK_UID, e.g. after setsid) must go too."""

    keys: list[Key]
    signal: Sig
    uids: list[str] = []


class Ack(msgspec.Struct, tag="ack", array_like=True):
    """agent -> node: exits it has recorded; the node executor may forget them."""

    keys: list[Key]


class Beat(msgspec.Struct, tag="beat", array_like=True):
    """either way: still here (sent when nothing else was for a heartbeat period). fenced
    (node -> agent): the executor fenced itself and takes no spawn until a Resync."""

    t: float
    fenced: bool = False


class Resync(msgspec.Struct, tag="resync", array_like=True):
    """agent -> node: the agent hears you again (after it declared you lost, or after you
    fenced yourself): say hello with all you hold, and take spawns again."""

    why: str


class Stop(msgspec.Struct, tag="stop", array_like=True):
    """agent -> node: the pilot ends; kill what runs, report it, exit."""

    reason: str


NodeMessage = Union[
    NodeHello,
    Spawn,
    Spawned,
    Exits,
    Kill,
    Ack,
    Beat,
    Stop,
    Resync,
    PmiFence,
    PmiFenceDone,
    PmiFail,
    PmiDrop,
]
FROM_NODE = (
    NodeHello,
    Spawned,
    Exits,
    Beat,
    PmiFence,
    PmiFail,
)  # what an agent takes from a node executor

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(NodeMessage)


def encode(msg: Any) -> bytes:
    return _encoder.encode(msg)


def decode(frame: bytes) -> Any:
    """A message, or msgspec.DecodeError / ValidationError for a frame that is not one."""
    return _decoder.decode(frame)
