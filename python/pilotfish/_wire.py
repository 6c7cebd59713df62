"""Messages between client and agent (ZeroMQ frames, msgpack via typed msgspec Structs).

Typed Structs decode several times faster than dicts (see shared/notes); every message
carries a batch. array_like keeps frames small: fields travel by position.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec


class TaskSpec(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """A task as the agent needs it (built from a TaskDescription by the client).

    Sequences are tuples with shared empty defaults and gc=False (no cycles possible): a
    queued task costs the agent a few hundred bytes, not a kilobyte of empty containers.
    """

    uid: str
    executable: str
    arguments: tuple[str, ...] = ()
    environment: dict[str, str] = {}
    sandbox: str | None = None
    pre_exec: tuple[str, ...] = ()
    post_exec: tuple[str, ...] = ()
    shell: bool = False
    ranks: int = 1
    cores_per_rank: int = 1
    gpus_per_rank: int = 0
    mem_per_rank: int = 0
    launcher: str | None = None
    stdout: bool | str = True
    stderr: bool | str = True
    timeout: float | None = None
    priority: int = 0
    retries: int = 0
    colocate: str | None = None
    input_staging: tuple[dict[str, str], ...] = ()
    output_staging: tuple[dict[str, str], ...] = ()
    duration: float | None = None  # expected run time: a scheduling hint
    stage_on_error: bool = False  # output staging for a FAILED task too
    function: bytes | None = None  # a function task: the callable, pickled (cloudpickle) --
    # sent once per pilot: the first task of a callable carries it, later ones only its fn_ref
    call: bytes | None = None  # ... and its (args, kwargs), pickled
    fn_ref: bytes | None = None  # the callable's digest (what the agent knows it by)
    restartable: bool = False  # stopped and queued again when its node is drained


# A function call's outcome, as Update.result carries it: the first byte says what follows
# (agent/worker.py makes it, client/task.py reads it). R: pickle of the value; F: the path of
# a file holding that pickle (a large value); E: msgpack [type name, message, traceback text,
# pickle of the exception or None]; C: canceled before it started; B: handed back unrun.
RESULT_OK, RESULT_ERROR, RESULT_IN_FILE, RESULT_CANCELED, RESULT_RETURNED = (
    b"R",
    b"E",
    b"F",
    b"C",
    b"B",
)


class RankSlot(msgspec.Struct, array_like=True):
    """Where one rank of a task runs."""

    node: str
    node_index: int
    cores: tuple[int, ...]
    gpus: tuple[int, ...]


class NodeInfo(msgspec.Struct, array_like=True):
    name: str
    cores: int
    gpus: int
    mem: int  # MiB


# -- client -> agent ---------------------------------------------------------------------


class Submit(msgspec.Struct, tag="submit", array_like=True):
    tasks: list[TaskSpec]


class Cancel(msgspec.Struct, tag="cancel", array_like=True):
    uids: list[str]


class Shutdown(msgspec.Struct, tag="shutdown", array_like=True):
    reason: str = "client request"


class Heartbeat(msgspec.Struct, tag="beat", array_like=True):
    """Both ways: I am alive (sent when nothing else was, every few seconds)."""

    t: float


class Waiting(msgspec.Struct, tag="waiting", array_like=True):
    """The client waits for its tasks, after everything it submitted: a simulated pilot's
    clock, held by a Submit, may run (agent/simulation.py). Sent to simulated pilots only."""


class Resync(msgspec.Struct, tag="resync", array_like=True):
    """A resumed client asks what became of these tasks. The agent answers with a Hello,
    Updates (current or final state of each it knows) and Missing (those it never got)."""

    uids: list[str]


class ServiceSpec(msgspec.Struct, array_like=True, omit_defaults=True):
    """A service group as the agent needs it: its members' task (uid set per member) and
    policy (from a ServiceDescription; agent/services.py)."""

    name: str
    template: TaskSpec
    replicas: int
    restart: str = "on-failure"
    max_restarts: int = 3
    ready_timeout: float = 60.0
    health_interval: float | None = None
    leave_timeout: float = 30.0


class GroupStart(msgspec.Struct, tag="group_start", array_like=True):
    spec: ServiceSpec
    resume: bool = False  # a resumed session: a running group of that name is re-attached


class GroupResize(msgspec.Struct, tag="group_resize", array_like=True):
    name: str
    replicas: int


class GroupHold(msgspec.Struct, tag="group_hold", array_like=True):
    """Pin the group's view: no join or leave takes effect until the hold is released."""

    name: str
    token: str


class GroupRelease(msgspec.Struct, tag="group_release", array_like=True):
    name: str
    token: str


class Grow(msgspec.Struct, tag="grow", array_like=True):
    """Nodes join the pilot as a partition of their own (unit: its name, e.g. a batch job)."""

    unit: str
    nodes: list[NodeInfo]
    launcher: str | None = None
    options: dict[str, dict] = {}


class Shrink(msgspec.Struct, tag="shrink", array_like=True):
    """Drain these grown units' nodes, then let them go (Resized tells when)."""

    units: list[str]


class Explain(msgspec.Struct, tag="explain", array_like=True):
    """Why are these tasks where they are? (task.explain(); answered with Explained)."""

    token: str
    uids: list[str]


ToAgent = Union[
    Submit,
    Cancel,
    Shutdown,
    Heartbeat,
    Waiting,
    Resync,
    GroupStart,
    GroupResize,
    GroupHold,
    GroupRelease,
    Grow,
    Shrink,
    Explain,
]


# -- agent -> client ---------------------------------------------------------------------


class Update(msgspec.Struct, array_like=True, omit_defaults=True):
    """One task's state change; the details come with the state they belong to."""

    uid: str
    state: str
    t: float
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    slots: list[RankSlot] | None = None
    partition: int | None = None  # with EXECUTING: the partition it was placed in
    result: bytes | None = None  # a function task's final: tag + payload (agent/worker.py)
    started: float | None = None  # a function task's final: when its call started
    launcher: str | None = None  # with EXECUTING: the launch method that started it


class Hello(msgspec.Struct, tag="hello", array_like=True):
    """The agent is up: resources discovered, launchers ready."""

    pilot_uid: str
    nodes: list[NodeInfo]
    launcher: str
    t: float
    pid: int = 0
    host: str = ""


class Updates(msgspec.Struct, tag="updates", array_like=True):
    items: list[Update]


class Bye(msgspec.Struct, tag="bye", array_like=True):
    """The agent stops: final pilot state and why."""

    pilot_uid: str
    state: str
    reason: str
    t: float


class Missing(msgspec.Struct, tag="missing", array_like=True):
    """Answer to Resync: tasks the agent never received (the client submits them again)."""

    uids: list[str]


class MemberInfo(msgspec.Struct, array_like=True):
    uid: str
    endpoint: str
    node: str
    info: dict[str, Any] = {}


class GroupView(msgspec.Struct, tag="group_view", array_like=True):
    """A service group's membership: its epoch grows by one per join or leave."""

    name: str
    epoch: int
    members: list[MemberInfo]
    t: float
    target: int = 0  # replicas asked for
    # the group's client key pair (z85 public, secret): members admit a client that proves
    # it holds it (pilotfish.insitu's servers do); given only over authenticated channels
    client_key: list[str] = []


class MemberNews(msgspec.Struct, tag="member", array_like=True, omit_defaults=True):
    """A member's life: starting, ready, leaving, left, failed, restarting; or the group's
    own "failed" (uid = the group's name) when it cannot reach its size."""

    name: str
    uid: str
    state: str
    t: float
    reason: str | None = None
    node: str | None = None
    endpoint: str | None = None  # with "ready": where it serves (before it joins the view)
    info: dict[str, Any] | None = None  # with "ready": what it announced with its endpoint


class GroupAck(msgspec.Struct, tag="group_ack", array_like=True):
    """Answer to GroupHold/GroupStart/GroupResize (token), with the epoch then, or why not."""

    name: str
    token: str
    epoch: int
    error: str | None = None
    target: int = -1  # a re-attached group's members wanted (GroupStart with resume)


class Resized(msgspec.Struct, tag="resized", array_like=True):
    """The pilot's nodes after a grow or shrink of `unit` (error: why it did not happen)."""

    unit: str
    nodes: list[NodeInfo]
    t: float
    error: str | None = None


class Explained(msgspec.Struct, tag="explained", array_like=True):
    """Answer to Explain: one explanation per uid asked (keys: pilotfish/_explain.py)."""

    token: str
    items: list[dict[str, Any]]


ToClient = Union[
    Hello, Updates, Bye, Heartbeat, Missing, GroupView, MemberNews, GroupAck, Resized, Explained
]

_enc = msgspec.msgpack.Encoder()
encode = _enc.encode
decode_to_agent = msgspec.msgpack.Decoder(ToAgent).decode
decode_to_client = msgspec.msgpack.Decoder(ToClient).decode


_decode_any = msgspec.msgpack.Decoder().decode


def salvage_submit(frame: bytes) -> tuple[list[TaskSpec], list[tuple[str, str]]] | None:
    """A Submit frame that did not decode as a whole, task by task: (specs that decode,
    [(uid, why)] for those that do not but name a uid). None if it is no Submit at all."""
    try:
        raw = _decode_any(frame)
    except Exception:  # noqa: BLE001 -- not msgpack at all: no Submit
        return None
    if not (
        isinstance(raw, list) and len(raw) == 2 and raw[0] == "submit" and isinstance(raw[1], list)
    ):
        return None
    good, bad = [], []
    for item in raw[1]:
        try:
            good.append(msgspec.convert(item, TaskSpec))
        except Exception as e:  # noqa: BLE001 -- this item alone is bad: named by uid
            uid = item[0] if isinstance(item, list) and item and isinstance(item[0], str) else None
            if uid:
                bad.append((uid, f"undecodable task: {e}"[:300]))
    return good, bad


def to_builtins(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


# -- the agent's configuration (the client writes it 0600 as <sandbox>/agent.json) ---------


class Curve(msgspec.Struct, forbid_unknown_fields=True):
    """The agent's CURVE identity: the session's public key and the agent's own key pair."""

    server: str
    public: str
    secret: str


# the client <-> agent heartbeat and silences, each default written once (client/session.py)
HEARTBEAT_S = 5.0  # both ways
AGENT_TIMEOUT_S = 60.0  # the client gives up on a silent agent
CLIENT_TIMEOUT_S = 60.0  # an agent gives up on a silent client


class AgentConfig(msgspec.Struct, forbid_unknown_fields=True):
    """What an agent is started with. A JSON object (read by people debugging a pilot, and by
    a resumed client for the agent's public key); `description` is the pilot's, as
    `PilotDescription.as_dict()` gives it (validated by the client before it is written)."""

    pilot_uid: str
    session_uid: str
    session_path: str
    sandbox: str
    address: str  # the session's ROUTER: ipc:// for a local pilot, tcp:// for a batch one
    description: dict[str, Any]
    profile: bool = True
    heartbeat_s: float = HEARTBEAT_S
    client_timeout: float = CLIENT_TIMEOUT_S
    journal: bool = True
    curve: Curve | None = None


_config_decoder = msgspec.json.Decoder(AgentConfig)


def encode_agent_config(config: AgentConfig) -> bytes:
    return msgspec.json.format(msgspec.json.encode(config), indent=1)


def decode_agent_config(data: bytes, path: str) -> AgentConfig:
    """An agent.json's config; ValueError naming the file, the field and why if it is not."""
    try:
        return _config_decoder.decode(data)
    except msgspec.DecodeError as e:  # (ValidationError too: names the field, as `$.x`)
        raise ValueError(f"{path}: not an agent configuration: {e}") from None
