"""Rank notes: each rank of a supervised launch tells the agent when it starts and ends.

Why: a launcher process (PRRTE's `prterun`) can outlive its task -- it misses the job-end
event and hangs after every rank exited (shared/notes/substrates.md) -- or die before the task
started, and its exit code alone cannot tell "never ran" (safe to run again) from "ran and
failed". The ranks themselves can: a tiny bash wrapper around the task's command sends one
UDP datagram before the command starts and one after it ends:

    S <token> <launch key> <rank> <pid> <host> <t>   the rank's wrapper started (pid = its
                                            process group: the launcher makes each rank a
                                            leader; t = bash's $EPOCHREALTIME: launch_ok)
    E <token> <launch key> <rank> <exit code>   the command ended (bash's $?: 128+N for
                                            signal N)

to a UDP socket of the agent bound on the address the launcher's daemons already use to reach
the agent's host (the PRRTE DVM's URI), so ranks on every node of the allocation can reach it.
Costs: one socket in the agent (one more fd in its poll set), two datagrams and a bash per
rank; no file per task, nothing on shared file systems, nothing for other launch methods.

Who may send one: the socket is open to every process that reaches the port, and the
wrapper's command line (port, launch key) is visible to every user in `ps`. So each note
carries the agent's notes token, a 128-bit secret that is on no command line: the launcher
passes it in the rank's environment (PILOTFISH_NOTE_TOKEN, exported by name with `-x`; a
process's environment is readable by its own user only), and the wrapper takes it out of the
environment before the task's command runs. A note without it is dropped, counted and logged.

Datagrams can be lost (a full receive buffer); the buffer is made large and the agent reads it
every loop. The supervisor (agent/supervisor.py) only acts on notes that arrived, never on a
missing one alone, except where a whole DVM stopped starting anything (see there).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import secrets
import shlex
import socket
from typing import NamedTuple

log = logging.getLogger("pilotfish.launch")

RCVBUF = 8 << 20  # bytes: room for ~100k notes between two reads
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux; lets root exceed rmem_max
TOKEN_ENV = "PILOTFISH_NOTE_TOKEN"  # where a rank's wrapper finds the token (then unsets it)


class Note(NamedTuple):
    kind: str  # "S" (started) or "E" (ended)
    key: str  # the launch key
    rank: int
    value: int  # S: the rank's pid; E: its exit code
    host: str  # S only ("" for E)
    t: float = 0.0  # S: when the rank started (seconds since the epoch; 0: not said)


def address_from_uri(uri: str) -> str | None:
    """The first IPv4 address in a PRRTE URI ('prte-host-123@0.0;tcp4://10.1.2.3,10.9.9.9:4567')."""
    m = re.search(r"tcp4://([0-9.]+)", uri)
    return m.group(1) if m else None


class RankNotes:
    """The agent's end of the notes: a non-blocking UDP socket."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, RCVBUF)
                break
            except OSError:
                continue
        self.sock.bind((address, 0))
        self.sock.setblocking(False)
        self.address, self.port = self.sock.getsockname()[:2]
        self.token = secrets.token_hex(16)  # what every genuine note carries
        self.dropped = 0  # datagrams without the token (forged) or malformed

    @property
    def env(self) -> dict[str, str]:
        """What a wrapped rank's environment needs (never its command line)."""
        return {TOKEN_ENV: self.token}

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[Note]:
        """Every note waiting (never blocks); datagrams without the token, or malformed,
        are dropped, counted and logged (the first ones, then one in 1000)."""
        notes: list[Note] = []
        recv = self.sock.recvfrom
        while True:
            try:
                data, sender = recv(512)
            except (BlockingIOError, InterruptedError):
                return notes
            except OSError:
                return notes
            for line in data.decode(errors="replace").splitlines():
                note = parse(line, self.token)
                if note is not None:
                    notes.append(note)
                    continue
                self.dropped += 1
                if self.dropped <= 20 or self.dropped % 1000 == 0:
                    log.warning(
                        "rank notes: dropped %s from %s:%s (%d so far): no valid "
                        "token, or malformed",
                        _shorten(line),
                        *sender[:2],
                        self.dropped,
                    )

    def close(self) -> None:
        self.sock.close()

    def wrap(self, key: str, payload: str, rank_expr: str = '"${PILOTFISH_RANK:-0}"') -> list[str]:
        """bash lines that run `payload` between the two notes and exit with its status.
        payload: shell text that returns (not exec'd; a script that may `exit` or `exec` goes
        in a subshell: "( ... )")."""
        return wrap_lines(self.address, self.port, key, payload, rank_expr)


def wrap_lines(
    address: str, port: int, key: str, payload: str, rank_expr: str = '"${PILOTFISH_RANK:-0}"'
) -> list[str]:
    dest = f"/dev/udp/{address}/{port}"
    k = shlex.quote(key)
    return [
        # the token from the environment (never the command line), out of the task's sight
        f"pf_tok=${{{TOKEN_ENV}:-none}}; unset {TOKEN_ENV}",
        # bash opens /dev/udp/HOST/PORT itself; errors (no route) are silenced: a note is help,
        # never a reason for the task to fail
        f"pf_note() {{ printf '%s\\n' \"$1 $pf_tok ${{*:2}}\" >{dest}; }} 2>/dev/null",
        f'pf_note S {k} {rank_expr} $$ "$HOSTNAME" "$EPOCHREALTIME"',
        payload,
        "pf_rc=$?",
        f"pf_note E {k} {rank_expr} $pf_rc",
        # a rank that failed says so on the task's stderr, as launch.base.FAIL_FAST's shells do:
        # the task's reason leads with the first (_mpi.RANK_FAILED), not "exit code N" alone
        "if [ \"$pf_rc\" -ne 0 ]; then printf 'pilotfish: rank %s exited with %s on %s\\n' "
        f'{rank_expr} "$pf_rc" "${{PILOTFISH_NODE:-$HOSTNAME}}" >&2; fi',
        "exit $pf_rc",
    ]


def parse(line: str, token: str) -> Note | None:
    """The note in one line, or None: malformed, or without `token` (forged)."""
    f = line.split()
    if len(f) < 2 or not hmac.compare_digest(f[1].encode(errors="replace"), token.encode()):
        return None
    del f[1]
    try:
        if len(f) >= 5 and f[0] == "S":
            t = 0.0
            if len(f) >= 6:
                try:
                    t = float(f[5].replace(",", "."))  # (a locale may write a comma)
                except ValueError:
                    t = 0.0
            return Note("S", f[1], int(f[2]), int(f[3]), f[4], t)
        if len(f) >= 4 and f[0] == "E":
            return Note("E", f[1], int(f[2]), int(f[3]), "")
    except ValueError:
        return None
    return None


def _shorten(text: str, n: int = 80) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def process_matches(pid: int, text: str) -> bool:
    """Does live process `pid` have `text` in its command line? (PIDs wrap quickly here: never
    signal a noted pid without checking it is still the rank that sent the note.)"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


def kill_group(pid: int, sig: int) -> bool:
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
