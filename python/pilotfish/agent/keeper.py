"""The agent's keeper: a small parent process that outlives the agent.

A task has to run exactly once even when its agent is SIGKILLed while the task runs. The
agent's own records (journal, exit log) cannot say how a task ended that was still running when
the agent died, and nothing else would wait for the orphans: without a keeper they are killed
(or end unseen) and a resume runs them again.

So the batch job (or the local pilot) starts this keeper, not the agent. The keeper is a child
subreaper and starts the agent as its only child. While the agent lives it only waits. If the
agent ends by a signal or with an error, its task processes become the keeper's children (the
kernel reparents them to the nearest subreaper), and the keeper

- maps each of them to its task from the agent's journal (task -> spawn keys) and the exit log
  (key -> pid: the Rust core writes that record the moment the child exists, so even a child
  that is already a zombie is known);
- writes `keeper.json` (pid, host, how the agent ended, the adopted task uids), rewritten every
  KEEPER_BEAT_S as a heartbeat that a client on another host can read;
- reaps them, appends their exits to `agent.exits` and, for a task all of whose processes ended
  with 0 (and that needed nothing after exit, such as output staging), a DONE final to
  `keeper.journal`; anything else is left without a final and runs again on resume;
- adopts the tasks that node executors run on other nodes (agent/node_executor.py) too: they run on
  there, each executor's journal (`nodes/<node>/exits`) records their ends, and the keeper
  reads them and writes the finals of those that exited 0 -- so a resume runs none twice;
- keeps the agent's other children (a PRRTE DVM the adopted tasks run on, the node
  executors' launcher step, escaped descendants) until the adopted tasks are done, then stops them;
- on SIGTERM/SIGINT/SIGHUP (the pilot canceled, scancel) or at the pilot's walltime stops all.

It then exits as the agent did (same code or signal), so the batch system sees the agent's end.
The keeper imports only the standard library until the agent dies: it costs a process, not
time (it is started by path, without importing the package).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOP_GRACE_S = 3.0
SETTLE_QUIET_S = 1.5  # _settle: no new spawn on any node for this long ...
SETTLE_MAX_S = 5.0  # ... or this long at most (keeper_adopted waits 10 s for the answer)


def _subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children() -> list[int]:
    """Our children (zombies included), from /proc."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:  # field 4 (ppid)
            out.append(int(entry))
    return out


def _pid_scope() -> str:  # = pilotfish._util.pid_scope (no package import here)
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}/{ns}"


def _describe(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _end_like(status: int) -> None:
    """Exit as the agent did."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL/SIGSTOP: cannot be handled anyway
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), -code)
        time.sleep(1)
        code = 128 - code
    os._exit(code)


def _signal_groups(pids, sig: int) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):  # tasks lead their own process group
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _environ(pid: int) -> dict[str, str] | None:
    """A live process's environment; None for a zombie (whose is gone) or a vanished one."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if not raw:
        return None
    return {
        k.decode(errors="replace"): v.decode(errors="replace")
        for k, _, v in (item.partition(b"=") for item in raw.split(b"\0") if item)
    }


class Keeper:
    def __init__(self, cfg_path: str, agent_argv: list[str] | None = None):
        self.cfg_path = os.path.abspath(cfg_path)
        self.agent_argv = agent_argv or [sys.executable, "-m", "pilotfish.agent", self.cfg_path]
        self.sandbox = os.path.dirname(self.cfg_path)
        self.started = time.time()
        self.agent = 0
        self.stop_signal = 0

    # -- while the agent lives -------------------------------------------------------------
    def run(self) -> None:
        _subreaper()
        self.agent = os.posix_spawn(self.agent_argv[0], self.agent_argv, os.environ)
        for sig in FORWARDED:  # after the spawn: the agent starts with default handlers
            signal.signal(sig, self._on_signal)
        while True:
            try:
                _, status = os.waitpid(self.agent, 0)
                break
            except ChildProcessError:  # cannot happen for our own child; do not spin
                status = 0
                break
        for sig in FORWARDED:
            signal.signal(sig, self._on_stop)
        code = os.waitstatus_to_exitcode(status)
        left = _children()
        if code != 0 and left and not self.stop_signal:
            # at once, before any import: a client that looks now must know to wait for us
            self._write_state(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "scope": _pid_scope(),
                    "agent_pid": self.agent,
                    "agent_status": _describe(status),
                    "adopted": None,
                    "done": False,
                    "t": time.time(),
                }
            )
            self.adopt(status, left)
        else:
            self.stop(left)
        _end_like(status)

    def _on_signal(self, sig, _frame) -> None:
        self.stop_signal = sig
        try:
            os.kill(self.agent, sig)
        except ProcessLookupError:
            pass

    def _on_stop(self, sig, _frame) -> None:
        self.stop_signal = sig

    # -- after the agent died --------------------------------------------------------------
    def adopt(self, status: int, children: list[int]) -> None:
        # the package only now: the agent's end is not a hot path
        sys.path.insert(
            0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        )
        from pilotfish._exit_log import exit_record, read_exit_log, read_node_exit_logs
        from pilotfish._journal import KEEPER_BEAT_S, Journal, final_record, spawn_records
        from pilotfish.states import DONE

        finals, spawned = spawn_records(self.sandbox)
        intents: set[int] = set()
        exits, pids = read_exit_log(self.sandbox, intents)
        # tasks on node executors (agent/node_executor.py) run on: their journals say what they
        # started and what ended. A Spawn frame the agent sent just before it died may still
        # be on its way or in an executor's queue (a loaded host takes seconds): see below.
        node_exits, node_pids = read_node_exit_logs(self.sandbox)
        if node_pids:
            node_exits, node_pids = self._settle(spawned, finals, exits, pids, children)
        for k, e in node_exits.items():
            exits.setdefault(k, e)
        key_of_pid = {pid: key for key, pid in pids.items()}  # file order: the latest wins
        owner: dict[int, str] = {}
        waiting: dict[str, set[int]] = {}  # uid -> keys of its processes not exited yet
        done_on_exit: dict[str, bool] = {}
        order: dict[str, list[int]] = {}
        for uid, (keys, on_exit) in spawned.items():
            if uid in finals:
                continue
            left = {k for k in keys if k not in exits}
            if left:
                waiting[uid] = left
                done_on_exit[uid] = on_exit
                order[uid] = keys
                for k in left:
                    owner[k] = uid
        held: dict[int, tuple[int, str]] = {}  # pid -> (key, uid)
        unknown = []
        for pid in children:
            key = key_of_pid.get(pid)
            if key in owner:
                held[pid] = (key, owner[key])
            else:  # no record, or a record of an earlier process with this pid (pids wrap)
                unknown.append(pid)
        # keys whose spawn was under way when the agent died: a child may exist that no spawn
        # record names. A live one says whose it is in its environment; zombies only count.
        doubt = {k for k in intents if k in owner and k not in pids}
        anonymous: list[int] = []
        if doubt and unknown:
            unknown, anonymous = self._name_children(unknown, doubt, owner, order, held)
        held_keys = {k for k, _ in held.values()}
        if anonymous:
            if len(anonymous) == len(doubt):
                held_keys |= doubt  # as a group: all exit 0, or none of their tasks is final
            else:
                anonymous = []
        # away: tasks all of whose unfinished processes a node executor started
        away = {
            uid: set(keys)
            for uid, keys in waiting.items()
            if keys and all(k in node_pids for k in keys)
        }
        adopted = {uid for uid, keys in waiting.items() if keys <= held_keys} | set(away)
        lost = [pid for pid, (_, uid) in held.items() if uid not in adopted]
        _signal_groups(lost, signal.SIGKILL)  # part of a task is gone: it runs again whole
        held = {pid: ku for pid, ku in held.items() if ku[1] in adopted}
        group = {pid: (-1, "") for pid in anonymous}
        group_keys = sorted(doubt) if anonymous else []
        group_failed = False
        failed: set[str] = set()

        runtime = self._runtime()
        deadline = self.started + runtime if runtime else float("inf")
        state = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "scope": _pid_scope(),
            "agent_pid": self.agent,
            "agent_status": _describe(status),
            "adopted": sorted(adopted),
            "done": False,
            "t": time.time(),
        }
        self._write_state(state)
        journal = Journal(os.path.join(self.sandbox, "keeper.journal"), sync_s=0.0)
        exit_fd = os.open(
            os.path.join(self.sandbox, "agent.exits"),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
        last_beat = time.monotonic()
        try:
            held.update(group)
            next_scan = 0.0
            while held or away:
                if self.stop_signal or time.time() > deadline:
                    break  # what is still running runs again on resume
                if away and time.monotonic() >= next_scan:
                    next_scan = time.monotonic() + 0.25
                    self._away_ended(away, done_on_exit, journal, read_node_exit_logs)
                if not held:
                    time.sleep(0.05)
                    if time.monotonic() - last_beat >= KEEPER_BEAT_S:
                        state["t"] = time.time()
                        self._write_state(state)
                        last_beat = time.monotonic()
                    continue
                try:
                    pid, st = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    held.clear()  # (nothing left here to wait for; the away tasks may be)
                    continue
                if pid == 0:
                    time.sleep(0.01)
                    if time.monotonic() - last_beat >= KEEPER_BEAT_S:
                        state["t"] = time.time()
                        self._write_state(state)
                        last_beat = time.monotonic()
                    continue
                ku = held.pop(pid, None)
                if ku is None:
                    continue
                key, uid = ku
                code = os.waitstatus_to_exitcode(st)
                sig = -code if code < 0 else 0
                code = code if code >= 0 else -1
                t = time.time()
                if key < 0:  # one of the anonymous group
                    group_failed |= bool(code or sig)
                    group.pop(pid)
                    if group or group_failed:
                        continue
                    ended = [(k, owner[k]) for k in group_keys]  # all exited 0
                    os.write(exit_fd, b"".join(exit_record(k, 0, 0, t) for k in group_keys))
                else:
                    os.write(exit_fd, exit_record(key, code, sig, t))
                    if code != 0 or sig:
                        failed.add(uid)
                    ended = [(key, uid)]
                for key, uid in ended:
                    left = waiting[uid]
                    left.discard(key)
                    if not left and uid not in failed and done_on_exit[uid]:
                        why = "ended after its agent died; seen by the pilot's keeper"
                        journal.write([final_record(uid, DONE, 0, None, why, t)])
        finally:
            journal.close()
            os.close(exit_fd)
            self.stop(_children())
            state["done"], state["t"] = True, time.time()
            self._write_state(state)

    def _settle(self, spawned: dict, finals: dict, exits: dict, pids: dict, children: list):
        """The node executors' journals once the spawns the agent sent before it died have
        landed: re-read while some task with a spawn record is neither held here nor
        started there, until none is, nothing new appeared for SETTLE_QUIET_S, or
        SETTLE_MAX_S. (Not waiting: a task whose Spawn was still on its way would run there
        unadopted -- its pilot failed it -- and run again on resume.)"""
        from pilotfish._exit_log import read_node_exit_logs

        alive = set(children)
        here = {k for k, pid in pids.items() if pid in alive}  # held on this host
        start = quiet = time.monotonic()
        seen = -1
        while True:
            node_exits, node_pids = read_node_exit_logs(self.sandbox)
            unaccounted = 0
            for uid, (keys, _) in spawned.items():
                if uid in finals:
                    continue
                left = [k for k in keys if k not in exits and k not in node_exits]
                unaccounted += any(k not in here and k not in node_pids for k in left)
            now = time.monotonic()
            if len(node_pids) != seen:
                seen, quiet = len(node_pids), now
            if not unaccounted or now - quiet >= SETTLE_QUIET_S or now - start >= SETTLE_MAX_S:
                return node_exits, node_pids
            time.sleep(0.1)

    @staticmethod
    def _away_ended(away: dict, done_on_exit: dict, journal, read_node_exit_logs) -> None:
        """Tasks on node executors whose processes all ended: DONE if all exited 0."""
        from pilotfish._journal import final_record  # (imported already: see adopt)
        from pilotfish.states import DONE

        exits, _ = read_node_exit_logs(os.path.dirname(journal.path))
        t = time.time()
        for uid in list(away):
            ends = [exits.get(k) for k in away[uid]]
            if any(e is None for e in ends):
                continue
            del away[uid]
            if all(e[0] == 0 and e[1] == 0 for e in ends) and done_on_exit[uid]:
                why = "ended after its agent died; seen by its node executor"
                journal.write([final_record(uid, DONE, 0, None, why, t)])

    def _name_children(
        self,
        unknown: list[int],
        doubt: set[int],
        owner: dict[int, str],
        order: dict[str, list[int]],
        held: dict[int, tuple[int, str]],
    ) -> tuple[list[int], list[int]]:
        """Name children that no spawn record names by their environment mark (one still
        between fork and exec shows the agent's environment: look again shortly). Returns
        (still unknown live children, zombies)."""
        for attempt in range(4):
            pending = []
            for pid in unknown:
                env = _environ(pid)
                if env is None:
                    pending.append(pid)  # a zombie, or gone: sorted out below
                    continue
                uid = env.get("PILOTFISH_TASK_UID")
                if not uid or env.get("PILOTFISH_SANDBOX") != self.sandbox:
                    pending.append(pid)
                    continue
                cands = [k for k in doubt if owner[k] == uid]
                if len(cands) > 1:  # ranks of one task: its keys are in rank order
                    rank = int(env.get("PILOTFISH_RANK") or 0)
                    keys = order[uid]
                    cands = [keys[rank]] if rank < len(keys) and keys[rank] in cands else []
                if cands:
                    held[pid] = (cands[0], uid)
                    doubt.discard(cands[0])
            unknown = pending
            if not unknown or not doubt or all(_environ(p) is None for p in unknown):
                break
            time.sleep(0.05)
        zombies = [pid for pid in unknown if _environ(pid) is None]
        return [p for p in unknown if p not in zombies], zombies

    def _runtime(self) -> float:
        try:
            with open(self.cfg_path) as f:
                return float(json.load(f)["description"]["runtime"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0

    def _write_state(self, state: dict) -> None:
        path = os.path.join(self.sandbox, "keeper.json")
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path)

    def stop(self, children: list[int]) -> None:
        """Stop what is left (SIGTERM, then SIGKILL) and reap it."""
        if not children:
            return
        _signal_groups(children, signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < end:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                time.sleep(0.02)
        _signal_groups(_children(), signal.SIGKILL)
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: keeper.py AGENT_JSON")
    Keeper(sys.argv[1]).run()


if __name__ == "__main__":
    main()
