"""A node executor: one long-lived process per node of a pilot that spans hosts.

The agent starts one on every other node of its pilot, all in one step of the batch system's
own launcher (`srun --ntasks-per-node=1`, agent/node_link.py), instead of one launcher process per
task. Each makes itself non-dumpable, reads its step's secret from its stdin and derives its
own CURVE key from it (agent/node_keys.py: no file and no environment variable holds it, so no
task of the owner's can speak as a node), connects to the agent's node ROUTER with it, says
hello with a token of its own, and then

- spawns the batches of processes the agent sends with the Rust core (clone + exec, one reaper
  thread, no file descriptor per task) -- its node's fork rate, not a launcher's; serves the
  PMI of its ranks of MPICH worlds (agent/pmi/) and, through an OpenPMIx server of its own,
  the PMIx of its ranks of Open MPI worlds (agent/pmix_node.py);
- writes every spawn and exit to its own journal the moment it happens (the core's exit log,
  `nodes/<node>/exits`: key -> pid at spawn, the exit at reap);
- sends spawn results and exits back in batches, captured stdout/stderr read from its own
  spool with the exit (capped);
- is a child subreaper, so what its tasks start outside their process group (setsid
  escapees) stays its descendant; a kill with SIGKILL also kills the task's marked
  processes (PILOTFISH_TASK_UID), as the agent does on its own host;
- heartbeats; keeps every exit (journal and memory) until the agent acknowledges it, and
  sends those again in each hello;
- *fences itself* when it has not heard the agent for fence_after_s (3 x the agent's
  lost_after_s, in the config): it SIGKILLs every task it runs and refuses every spawn (answers
  it -EHOSTUNREACH, "never started") until the agent answers it again with a Resync, to which
  it says hello with what it still runs and every exit not acknowledged. The agent has
  declared the node lost by then and holds its tasks' verdict until it hears how they ended
  (agent/node_link.py: exactly once across a lost node that comes back). It marks its fence in its
  journal's directory once what it tried is flushed there, and takes the mark away before it
  takes a spawn again: a verdict queues again what it never tried (agent/node_verdict.py).
  The check comes first in
  every round, before any frame is read: an executor that was stopped (SIGSTOP) fences the
  moment it runs again, and a spawn the agent sent before the loss never starts late. An exit
  of a task the fence killed says so (ExitRow.fenced);
- does not fence when the agent died and its keeper holds the pilot's tasks (`keeper.json`):
  then it finishes what runs, as the keeper expects; it exits when nothing runs and the agent
  stays away (agent_timeout_s), and at the pilot's walltime kills what still runs.

    python -m pilotfish.agent.node_executor CONFIG.json < STEP-SECRET
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import time

from .. import _node_wire as W
from .pmix_node import RANK_ARGV0, NodePmix

log = logging.getLogger("pilotfish.node")


def _spawn_failure(argv0: str, stdout, stderr, info, err: int) -> str:
    """The reason a process could not be spawned here (task_runner.spawn_failure: its output
    path when that is what failed, else its executable), capped for the wire."""
    from .task_runner import spawn_failure  # (only on a failure: the executor starts light)

    return spawn_failure(argv0, stdout, stderr, info, err)[:3000]


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".", 1)[0]


class NodeExecutor:
    def __init__(self, config: W.NodeConfig, secret: bytes):
        """secret: its step's (node_keys.read_step), from which its key is derived."""
        import zmq

        from .. import _core
        from .._sockets import curve_dealer
        from .containment import become_subreaper
        from .node_keys import TOKEN_BYTES, derive
        from .node_verdict import unmark

        self.node = node_name()
        self.sandbox = config.sandbox
        self.dir = os.path.join(self.sandbox, "nodes", self.node)
        os.makedirs(os.path.join(self.dir, "spool"), mode=0o700, exist_ok=True)
        if not unmark(self.dir):  # (the fence mark of an executor before it: not its own)
            raise OSError(f"cannot remove the fence mark in {self.dir}")
        self.token = os.urandom(TOKEN_BYTES)  # (node_keys.py: in its hellos, nowhere else)
        self.beat_s = config.beat_s
        self.agent_timeout = config.agent_timeout_s
        # None: never (an agent that does not hold a lost node's verdict does not ask it)
        self.fence_after = config.fence_after_s or None
        self.deadline = config.deadline or None  # epoch seconds
        become_subreaper()
        from .pmi import stale
        from .pmi.node import NodePmi

        for k in list(os.environ):  # another process manager's identity is not our ranks'
            if stale(k):  # (and the executors' own srun step: SLURM_PROCID ...)
                del os.environ[k]
        self.core = _core.Executor(None, exit_log=os.path.join(self.dir, "exits"))
        # the PMI server of this node's ranks of MPI tasks (launch method `pmi`)
        self.pmi = NodePmi(self.node, self.pmi_fence, self.pmi_fail)
        self.pmix: NodePmix | None = None  # ... and of launch method `pmix`, on first need
        self.ctx = zmq.Context()
        self.sock = curve_dealer(
            self.ctx, config.key_file, config.address, None, 2000, derive(secret, self.node)
        )
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.running: dict[int, tuple[int, str | None, str | None]] = {}  # key -> pid, spools
        self.unacked: dict[int, W.ExitRow] = {}  # key -> exit, until the agent acknowledges it
        self.stopping: str | None = None
        self.escapees: set[int] = set()  # killed escapees not reaped yet
        self.fenced = False  # killed what ran, takes no spawn: until the agent's Resync
        self.fenced_keys: set[int] = set()  # killed by the fence, not reaped yet
        self.last_heard = self.last_sent = time.monotonic()

    def send(self, msg) -> None:
        self.sock.send(W.encode(msg))
        self.last_sent = time.monotonic()

    def hello(self) -> None:
        self.send(
            W.NodeHello(
                self.node,
                os.getpid(),
                socket.gethostname(),
                list(self.running),
                list(self.unacked.values()),
                self.token,
            )
        )

    # -- what the agent asks ------------------------------------------------------------------
    def on_frame(self, frame: bytes) -> None:
        self.last_heard = time.monotonic()
        try:
            msg = W.decode(frame)
        except Exception as e:  # noqa: BLE001 -- a bad frame is dropped, nothing else
            log.warning("dropped an undecodable frame (%d bytes): %s", len(frame), e)
            return
        if isinstance(msg, W.Spawn):
            if self.fenced:
                self.refuse(msg.specs)
            elif msg.worlds:
                self.spawn_worlds(msg.specs, msg.worlds)
            else:
                self.spawn(msg.specs)
        elif isinstance(msg, W.PmiFenceDone):
            self.pmi.fence_done(msg.kvsname, msg.epoch, msg.merged)
        elif isinstance(msg, W.PmiDrop):
            self.pmi.fail(msg.kvsname, msg.why)
        elif isinstance(msg, W.Kill):
            self.kill(msg.keys, msg.signal)
            if msg.uids:
                self.kill_escapees(set(msg.uids))
        elif isinstance(msg, W.Ack):
            for k in msg.keys:
                self.unacked.pop(k, None)
        elif isinstance(msg, W.Stop):
            self.stopping = msg.reason
        elif isinstance(msg, W.Resync):  # the agent hears us again: take spawns, say all
            if self.fenced:
                from .node_verdict import unmark

                if not unmark(self.dir):
                    return  # (fenced while its mark stands: node_verdict.py)
                log.warning("the agent is back (%s): taking spawns again", msg.why[:200])
            self.fenced = False
            self.hello()

    # -- fencing ------------------------------------------------------------------------------
    def fence(self, silent: float) -> None:
        """No word from the agent for fence_after_s: kill every task (the agent gives their
        verdict, or retries them elsewhere, only once they cannot still be running here)."""
        from .._journal import keeper_state

        if keeper_state(self.sandbox) is not None:
            log.warning(
                "agent silent for %.0f s, and its keeper holds the pilot's tasks: "
                "finishing what runs",
                silent,
            )
            self.fence_after = None  # (the agent died: nobody decides these tasks twice)
            return
        self.fenced = True
        keys = list(self.running)
        log.warning(
            "agent silent for %.1f s: fencing -- killing %d tasks, taking no spawn "
            "until it answers",
            silent,
            len(keys),
        )
        if keys:
            self.fenced_keys.update(keys)
            self.kill(keys, signal.SIGKILL)
        from .node_verdict import mark_fenced

        mark_fenced(self.dir)  # (what it tried is in its journal: node_verdict.py)
        self.send(W.Beat(time.time(), True))

    def refuse(self, specs: list) -> None:
        """Spawns that reach a fenced executor: never started (the agent queues them again,
        or has decided them already)."""
        why = "its node executor fenced itself (no word from the agent): never started"
        keys = [
            spec[0]
            for spec in specs
            if isinstance(spec, (list, tuple))
            and spec
            and isinstance(spec[0], int)
            and spec[0] >= 0
        ]
        log.warning("refused %d spawns: fenced", len(keys))
        self.send(W.Spawned([(k, -errno.EHOSTUNREACH, why) for k in keys]))

    # -- MPI tasks' ranks (launch method `pmi`) ----------------------------------------------
    def spawn_worlds(self, specs: list, worlds: list) -> None:
        """Spawn specs some of which are ranks of PMI worlds: each world's job is served here
        first, each rank inherits its end of the connection as descriptor 3."""
        fds: dict[int, int] = {}
        refused: dict[int, str] = {}
        for w in worlds:
            try:
                got = self.pmi.start(w.kvsname, w.size, w.nodes, w.ranks, w.init_timeout)
            except (ValueError, OSError) as e:
                for _, k in w.ranks:
                    refused[int(k)] = f"cannot serve its PMI world {w.kvsname}: {e}"[:300]
                continue
            fds.update({k: fd for k, (fd, _env) in got.items()})
        if refused:
            self.send(W.Spawned([(k, -22, why) for k, why in refused.items()]))
            specs = [
                s for s in specs if not (isinstance(s, (list, tuple)) and s and s[0] in refused)
            ]
        results = self.spawn(specs, fds)
        for w in worlds:
            self.pmi.spawned(w.kvsname)
        for key, pid, _ in results:
            if pid <= 0:
                self.pmi.unspawned("", key)

    def pmix_rank(self, key: int, argv: list, env: list | None) -> tuple[list, list]:
        if self.pmix is None:
            self.pmix = NodePmix(self.node, os.path.join(self.dir, "pmix"))
        return self.pmix.rank(key, argv, env)

    def pmi_fence(self, kvsname: str, epoch: int, keys: dict) -> None:
        self.send(W.PmiFence(kvsname, epoch, keys))

    def pmi_fail(self, kvsname: str, rank: int, why: str, kind: str) -> None:
        log.warning("PMI world %s: %s", kvsname, why)
        self.send(W.PmiFail(kvsname, rank, why[:4000], kind))

    def spawn(self, specs: list, pmi_fds: dict[int, int] | None = None) -> list:
        """Spawn the agent's specs (key, argv, env, cwd, stdout, stderr) with the core.
        pmi_fds: key -> a descriptor of this process that the key's process inherits as its
        3 (its PMI connection, agent/pmi/): this executor's own, never the agent's."""
        built: list[tuple] = []
        keys: list[tuple[int, str | None, str | None]] = []
        bad: list[tuple] = []
        spool = os.path.join(self.dir, "spool")
        for spec in specs:
            try:
                key, argv, env, cwd, out, err = spec
                key = int(key)
                if argv and argv[0] == RANK_ARGV0:  # a rank of a PMIx world (pmix_node.py)
                    argv, env = self.pmix_rank(key, argv, env)
                o = os.path.join(spool, f"{key}.out") if out is True else out
                e = os.path.join(spool, f"{key}.err") if err is True else err
                if pmi_fds is None or key not in pmi_fds:
                    built.append((key, [str(a) for a in argv], env, cwd, o, e))
                else:
                    built.append((key, [str(a) for a in argv], env, cwd, o, e, False, pmi_fds[key]))
                keys.append((key, o if out is True else None, e if err is True else None))
            except Exception as ex:  # noqa: BLE001 -- a spec it cannot take fails alone
                k = (
                    spec[0]
                    if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], int)
                    else -1
                )
                bad.append((k, -22, f"bad spawn spec: {ex}"[:300]))
        results: list[tuple] = list(bad)
        if built:
            try:
                out = self.core.spawn_batch(built)
            except Exception:  # noqa: BLE001 -- text the core cannot take: one by one
                out = []
                for b in built:
                    try:
                        out.extend(self.core.spawn_batch([b]))
                    except Exception as ex:  # noqa: BLE001 -- the core refusing one spec fails it alone
                        out.append((-22, f"{type(ex).__name__}: {ex}"[:300]))
            for (key, o, e), b, (pid, info) in zip(keys, built, out):
                if pid > 0:
                    self.running[key] = (pid, o, e)
                elif pid < 0:  # why, judged here: the paths are this host's
                    info = _spawn_failure(b[1][0] if b[1] else "", b[4], b[5], info, -pid)
                results.append((key, pid, info))
        self.send(W.Spawned(results))
        return results

    def kill(self, keys: list[int], sig: int) -> None:
        pids = [self.running[k][0] for k in keys if k in self.running]
        if pids:
            self.core.kill(pids, sig)
        if sig == signal.SIGKILL and pids:
            uids = set()
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        for kv in f.read().split(b"\0"):
                            if kv.startswith(b"PILOTFISH_TASK_UID="):
                                uids.add(kv.split(b"=", 1)[1].decode(errors="replace"))
                except OSError:
                    pass
            if uids:
                self.kill_escapees(uids)

    def kill_escapees(self, uids: set[str]) -> None:
        """SIGKILL what these tasks left behind outside their process groups (marked with
        their uid), and reap it once it is our child (a subreaper's orphan): the core reaps
        only while it has tasks of its own."""
        from .containment import marked

        own = {r[0] for r in self.running.values()}
        for pids in marked(self.sandbox, "PILOTFISH_TASK_UID", uids, here_only=True).values():
            for pid in pids:
                if pid in own:
                    continue  # a task process itself: the core reaps it
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.escapees.add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
        self.reap_escapees()

    def reap_orphans(self) -> None:
        """Reap ended children that are no task's (only while no task runs: then nothing
        can be the core's). A /proc scan, at most once per heartbeat."""
        from .._util import proc_stats

        me = os.getpid()
        for pid, fields in proc_stats():
            if fields[0] == "Z" and int(fields[1]) == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def reap_escapees(self) -> None:
        for pid in list(self.escapees):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not (yet) our child, or reaped by the core
                done = pid if not os.path.exists(f"/proc/{pid}") else 0
            if done:
                self.escapees.discard(pid)

    # -- exits --------------------------------------------------------------------------------
    def reap(self) -> None:
        from .._core import read_outputs
        from .task_runner import OUTPUT_CAP

        exits = self.core.reap()
        if not exits:
            return
        ended, paths = [], []
        pmi = self.pmi
        for key, pid, code, sig, t_exit, ut, st, rss in exits:
            r = self.running.pop(key, None)
            if r is None:
                continue  # an escapee reaped as our descendant
            if pmi.by_key:
                pmi.reaped(key)
            if self.pmix is not None:
                self.pmix.reaped(key)
            fenced = key in self.fenced_keys and sig != 0  # (one that ended first: its end)
            self.fenced_keys.discard(key)
            ended.append(W.ExitRow(key, pid, code, sig, t_exit, ut, st, rss, fenced=fenced))
            paths.append((r[1], r[2]))
        if not ended:
            return
        texts = (
            read_outputs(paths, OUTPUT_CAP)
            if any(o or e for o, e in paths)
            else [(None, None, True)] * len(paths)
        )
        for row, (o, e), (so, se, _ok) in zip(ended, paths, texts):
            row.stdout, row.stderr = so, se
            for p in (o, e):
                if p:
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
            self.unacked[row.key] = row
        self.send(W.Exits(ended))

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        import zmq

        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.core.notify_fd, zmq.POLLIN)
        pmi_fd = self.pmi.fileno()
        poller.register(pmi_fd, zmq.POLLIN)
        self.hello()
        last_scan = 0.0
        while True:
            ready = dict(poller.poll(int(self.beat_s * 1000)))
            # first: after a stop (SIGSTOP) the silence is judged before what waited is read
            silent = time.monotonic() - self.last_heard
            if self.fence_after is not None and not self.fenced and silent > self.fence_after:
                self.fence(silent)
            if self.sock in ready:
                while True:
                    try:
                        frame = self.sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.on_frame(frame)
            if pmi_fd in ready:
                self.pmi.poll()
            self.reap()
            if self.pmi.jobs:
                self.pmi.tick()
            if self.escapees:
                self.reap_escapees()
            if not self.running and time.monotonic() - last_scan >= self.beat_s:
                # the core's reaper sleeps while it has no task: orphans that ended since
                # (setsid escapees, reparented to this subreaper) are reaped here
                last_scan = time.monotonic()
                self.reap_orphans()
            now = time.monotonic()
            if self.stopping is not None:
                return self.stop()
            if self.deadline is not None and time.time() >= self.deadline:
                log.warning("the pilot's walltime is reached: stopping")
                return self.stop()
            silent = now - self.last_heard
            if silent > self.agent_timeout:
                if not self.running:
                    log.warning("agent silent for %.0f s and nothing runs: exiting", silent)
                    return 0
                if now - self.last_sent >= self.beat_s:
                    self.hello()  # (the agent answers once it is back)
            elif now - self.last_sent >= self.beat_s:
                self.send(W.Beat(time.time(), self.fenced))

    def stop(self) -> int:
        """Kill what runs (TERM, a grace, KILL), report the exits, exit."""
        if self.running:
            self.core.kill([r[0] for r in self.running.values()], signal.SIGTERM)
            end = time.monotonic() + 3.0
            while self.running and time.monotonic() < end:
                self.core.wait(0.1)
                self.reap()
            if self.running:
                self.kill(list(self.running), signal.SIGKILL)
                end = time.monotonic() + 2.0
                while self.running and time.monotonic() < end:
                    self.core.wait(0.1)
                    self.reap()
        from .containment import kill_marked

        kill_marked(self.sandbox, here_only=True)  # nothing the pilot started here outlives it
        self.pmi.close()
        if self.pmix is not None:
            self.pmix.close()
        self.sock.close()  # lingers for the last exits
        self.ctx.term()
        return 0


def main(argv: list[str] | None = None) -> int:
    from .node_keys import conceal, read_step

    conceal()  # first: before it holds anything (node_keys.py)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(
            "usage: python -m pilotfish.agent.node_executor CONFIG.json < STEP-SECRET",
            file=sys.stderr,
        )
        return 2
    try:
        secret = read_step()
    except (ValueError, TimeoutError) as e:
        print(f"node executor on {node_name()}: {e}", file=sys.stderr)
        return 2
    from .._inert import open_log
    from .._util import open_private

    os.umask(0o077)  # its files and its tasks' are the owner's alone (as the agent's: _main.py)
    try:
        config = W.read_node_config(argv[0])
    except ValueError as e:
        print(f"node executor on {node_name()}: {e}", file=sys.stderr)
        return 2
    d = os.path.join(config.sandbox, "nodes")
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd = open_private(os.path.join(d, f"{node_name()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    open_log(fd)  # (bounded, escaped, rate-limited per call site: _inert.py)
    ex = NodeExecutor(config, secret)
    del secret
    signal.signal(signal.SIGTERM, lambda *_: setattr(ex, "stopping", "terminated by signal"))
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    return ex.run()


if __name__ == "__main__":
    sys.exit(main())
