"""A rank that floods its PMI server with what the server only logs (tests/agent/test_log_floods.py).

    pmi_noise.py MODE SECONDS

MODE unknown: init, then unknown PMI-1 commands of 60 KB (`cmd=<60 KB>`), each answer read
before the next is sent, for SECONDS; then finalize, and exit 0 (with the count on stdout).
MODE abort: init (PMI-2, whose frames may hold any ASCII), then abort with a message holding a
newline, a carriage return, ESC, BEL and DEL (a forged log line and a terminal title among
them); exit 3 after SECONDS.
"""

import os
import sys
import time

fd = int(os.environ["PMI_FD"])
mode, seconds = sys.argv[1], float(sys.argv[2])

FORGED = (
    "x\n2024-01-01 00:00:00,000 WARNING pilotfish.agent: FAKE: node n9 lost\r"
    "\x1b]0;owned\x07\x1b[2J\x7f"
)


def send(data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def answer() -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            sys.exit(f"the server closed the connection after {buf[:80]!r}")
        buf += chunk
    return buf


version = 2 if mode == "abort" else 1
send(f"cmd=init pmi_version={version} pmi_subversion={1 - version // 2}\n".encode())
if b"rc=0" not in answer():
    sys.exit("init refused")
if mode == "unknown":
    end, n = time.monotonic() + seconds, 0
    name = "y" * (60 * 1024)
    while time.monotonic() < end:
        send(f"cmd={name}\n".encode())
        if b"unknown_command" not in answer():
            sys.exit("an unknown command was not answered as one")
        n += 1
    send(b"cmd=finalize\n")
    answer()
    print(n)
    sys.exit(0)
if mode == "abort":
    body = "cmd=abort;isworldabort=TRUE;message=" + FORGED.replace(";", ";;") + ";"
    send(f"{len(body):6d}{body}".encode())
    time.sleep(seconds)
    sys.exit(3)
sys.exit(f"unknown mode {mode!r}")
