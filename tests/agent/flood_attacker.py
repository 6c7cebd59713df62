"""A stranger at pilotfish's listening sockets before login (tests/agent/test_floods.py,
bench/bench_floods.py): raw sockets, no ZeroMQ library, so nothing is polite by accident.

    python flood_attacker.py [--uid UID] MODE SECONDS ADDRESS [ADDRESS ...]

ADDRESS: tcp://HOST:PORT or ipc://@NAME (an abstract unix socket, as ZeroMQ names them).
MODE:
  big      4 connections per address: a ZMTP 3 greeting for CURVE, then a command frame whose
           header declares 8 GiB, then zeros as fast as the socket takes them (until the peer
           hangs up or SECONDS pass); reports the bytes it got in and how many were cut off
  hold:N   N connections in all, spread over the addresses, each sends the greeting and then
           nothing (half-open); one that is closed is opened again; held for SECONDS
  refuse   connect, send a greeting for a mechanism the server does not speak, read the
           answer, close -- as fast as it can for SECONDS (refused handshakes)
Prints one JSON line: what it did. It stops by itself after SECONDS (every loop is bounded);
it only ever connects to the addresses it is given (loopback or the test cluster's).
"""

from __future__ import annotations

import encodings.idna  # noqa: F401 -- getaddrinfo needs it, after the uid changes too
import json
import os
import selectors  # (imported before the uid changes: nobody may not read the stdlib)
import socket
import sys
import threading
import time

GREETING = (b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\0"
            + b"\0" * 31)
BAD_GREETING = (b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0"
                + b"\0" * 31)
BIG_HEADER = b"\x06" + (8 << 30).to_bytes(8, "big")


def _connect(address: str, timeout: float = 2.0) -> socket.socket:
    if address.startswith("tcp://"):
        host, port = address[6:].rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=timeout)
    if address.startswith("ipc://@"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect("\0" + address[7:])
        return s
    raise ValueError(f"not an address this attacker speaks: {address!r}")


def big(addresses: list[str], seconds: float) -> dict:
    out = {"mode": "big", "sent_mb": 0.0, "cut_off": 0, "connections": 0}
    lock = threading.Lock()
    zeros = b"\0" * (1 << 20)
    end = time.monotonic() + seconds

    def one(address: str) -> None:
        sent = 0
        cut = 0
        try:
            s = _connect(address)
            s.sendall(GREETING + BIG_HEADER)
            while time.monotonic() < end:
                s.sendall(zeros)
                sent += len(zeros)
        except OSError:
            cut = 1
        with lock:
            out["sent_mb"] += sent / (1 << 20)
            out["cut_off"] += cut
            out["connections"] += 1

    threads = [threading.Thread(target=one, args=(a,)) for a in addresses for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def hold(addresses: list[str], n: int, seconds: float) -> dict:
    sel = selectors.DefaultSelector()
    end = time.monotonic() + seconds
    opened = failed = closed_by_peer = 0
    live: dict[int, tuple[socket.socket, str]] = {}
    i = 0
    while time.monotonic() < end:
        while len(live) < n and time.monotonic() < end:
            address = addresses[i % len(addresses)]
            i += 1
            try:
                s = _connect(address, timeout=1.0)
                s.sendall(GREETING)
                s.setblocking(False)
            except OSError:
                failed += 1
                if failed % 100 == 0:
                    time.sleep(0.01)
                continue
            opened += 1
            live[s.fileno()] = (s, address)
            sel.register(s, selectors.EVENT_READ)
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            try:
                data = s.recv(65536)  # the server's greeting, or its hang-up
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                live.pop(s.fileno(), None)
                s.close()
                closed_by_peer += 1
    held = len(live)
    for s, _ in live.values():
        s.close()
    return {"mode": "hold", "opened": opened, "failed": failed,
            "closed_by_peer": closed_by_peer, "held_at_end": held}


def refuse(addresses: list[str], seconds: float) -> dict:
    end = time.monotonic() + seconds
    tries = refused = 0
    while time.monotonic() < end:
        address = addresses[tries % len(addresses)]
        tries += 1
        try:
            s = _connect(address, timeout=1.0)
            s.sendall(BAD_GREETING)
            while s.recv(4096):  # until it hangs up on us
                pass
            refused += 1
            s.close()
        except OSError:
            refused += 1
    return {"mode": "refuse", "tries": tries, "per_s": round(tries / seconds)}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--uid":
        uid = int(argv[1])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        argv = argv[2:]
    mode, seconds, addresses = argv[0], float(argv[1]), argv[2:]
    if mode == "big":
        out = big(addresses, seconds)
    elif mode.startswith("hold:"):
        out = hold(addresses, int(mode[5:]), seconds)
    elif mode == "refuse":
        out = refuse(addresses, seconds)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
