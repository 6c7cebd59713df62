"""The dashboard under idle connections (issue 42, row 8): another user of the login node
(uid nobody) holds 1,100 connections to `pilotfish dashboard` -- idle, trickling a header
byte a second, each one the server closes opened again -- while the dashboard runs as it
usually would, under a 1,024-descriptor limit. The owner (the token) is answered 200 within a
few seconds all along, and the server does not spin the CPU. The in-process tests pin the
rules: a request head has HEAD_TIMEOUT_S to arrive, at most `cap` connections are held and
the oldest idle one makes room for a new one, and each is counted."""

from __future__ import annotations

import json
import os
import pwd
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from pilotfish.analytics.dashboard import make_server, url
from pilotfish.analytics.dashboard import server as dserver
from pilotfish.analytics.synthetic import write_synthetic_session

ATTACKER = textwrap.dedent("""
    import json, os, resource, select, socket, sys, threading, time
    port, n, uid, hold_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # its own limit: not the point
    os.setgid(uid); os.setuid(uid)                              # another user on the login node
    stats = {"opened": 0, "closed_by_server": 0, "failed": 0, "most_held": 0}
    socks = {}
    lock = threading.Lock()

    def open_one():
        s = socket.socket()
        s.settimeout(3.0)
        try:
            s.connect(("127.0.0.1", port))
            s.send(b"G")          # the first byte of a request that never ends
        except OSError:
            s.close()
            with lock:
                stats["failed"] += 1
            return False
        s.setblocking(False)
        with lock:
            socks[s.fileno()] = s
            stats["opened"] += 1
        return True

    def opener(k, end):  # 8 connecting at once: a small accept queue drops bursts
        while len(socks) < n and time.monotonic() < end:
            open_one()

    end = time.monotonic() + 150   # (a server with a small accept queue: minutes)
    ths = [threading.Thread(target=opener, args=(k, end)) for k in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    print("holding", len(socks), flush=True)
    end = time.monotonic() + hold_s
    while time.monotonic() < end:
        p = select.poll()
        p.register(0, select.POLLIN)                # a line on stdin: stop
        for fd in socks:
            p.register(fd, select.POLLIN)
        ready = p.poll(0)
        if any(fd == 0 for fd, _ in ready):
            break
        for fd, ev in ready:
            s = socks[fd]
            try:
                gone = s.recv(4096) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                del socks[fd]
                s.close()
                stats["closed_by_server"] += 1
        for s in list(socks.values()):      # slowloris: a header byte a second
            try:
                s.send(b"X")
            except OSError:
                pass
        stats["most_held"] = max(stats["most_held"], len(socks))
        while len(socks) < n and open_one():  # each one closed is opened again
            pass
        time.sleep(1.0)
    print(json.dumps(stats), flush=True)
""")

HOLD = 1100


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _owner(link: str, timeout: float) -> tuple[int | str, float]:
    """The owner's request: its status (or why none) and how long it took."""
    t = time.monotonic()
    try:
        with urllib.request.urlopen(link.replace("/?", "/api/summary?"), timeout=timeout) as r:
            r.read()
            code: int | str = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    except OSError as e:
        code = f"{type(e).__name__}: {e}"
    return code, time.monotonic() - t


def _limit_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_owner_served_while_another_user_holds_idle_connections(tmp_path):
    root = write_synthetic_session(str(tmp_path / "s"), n_tasks=200, nodes=2)
    dash = subprocess.Popen([sys.executable, "-m", "pilotfish.analytics.dashboard", root],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_limit_nofile)
    attacker = None
    try:
        link = ""
        end = time.monotonic() + 60
        while time.monotonic() < end and "open: " not in link:
            link = dash.stdout.readline()
        link = link.split("open: ", 1)[1].strip()
        port = int(link.split(":")[2].split("/")[0])
        assert _owner(link, 10)[0] == 200
        t_attack = time.monotonic()
        attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(port), str(HOLD),
                                     str(_nobody()), "60"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
        assert attacker.stdout.readline().startswith("holding"), "the attacker did not start"
        # the server has taken what it takes: its descriptors stop growing (one per
        # connection it holds)
        fds, still = _fds(dash.pid), time.monotonic()
        while time.monotonic() - still < 3 and time.monotonic() - t_attack < 200:
            time.sleep(0.5)
            now = _fds(dash.pid)
            if now > fds:
                fds, still = now, time.monotonic()
        asked = []
        for _ in range(3):
            asked.append(_owner(link, 5))
            time.sleep(1.0)
        c0, t0 = _cpu_s(dash.pid), time.monotonic()
        time.sleep(2.0)
        cpu = (_cpu_s(dash.pid) - c0) / (time.monotonic() - t0)
        asked.append(_owner(link, 5))
        stats = json.loads(attacker.communicate("stop\n", timeout=60)[0].splitlines()[-1])
        print("owner:", asked, "server cpu:", round(cpu, 3), "server fds:", fds,
              "attacker:", stats)
        assert all(code == 200 and took < 5 for code, took in asked), asked
        assert cpu < 0.5, f"the dashboard used {cpu:.0%} of a CPU while the connections were held"
        assert stats["opened"] >= HOLD, stats    # the attack ran in full
        assert dash.poll() is None, dash.stderr.read()
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.kill()
            attacker.wait()
        dash.terminate()
        dash.wait(timeout=30)


@pytest.fixture
def small(tmp_path, monkeypatch):
    """A dashboard in this process: a 0.6 s head deadline, at most 8 connections."""
    monkeypatch.setattr(dserver, "HEAD_TIMEOUT_S", 0.6)
    root = write_synthetic_session(str(tmp_path / "s"), n_tasks=50, nodes=1)
    server, dash = make_server(root, cap=8)
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    th.start()
    try:
        yield server, dash
    finally:
        server.shutdown()
        server.server_close()


def _closed(s: socket.socket, within: float) -> bool:
    """Whether the server closed s within `within` seconds."""
    s.settimeout(within)
    try:
        return s.recv(100) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_an_idle_connection_is_closed_at_its_head_deadline(small):
    server, dash = small
    addr = server.server_address
    idle = socket.create_connection(addr)
    slow = socket.create_connection(addr)
    slow.sendall(b"GET /api/summary?token=" + dash.token.encode())   # never finished
    t = time.monotonic()
    assert _closed(idle, 5) and _closed(slow, 5)
    assert 0.4 < time.monotonic() - t < 4
    assert server.counts["timed_out"] == 2
    assert _owner(url(server, dash), 5)[0] == 200


def test_at_the_cap_the_oldest_idle_connection_makes_room(small):
    server, dash = small
    addr = server.server_address
    held = [socket.create_connection(addr) for _ in range(8)]
    time.sleep(0.2)
    assert server.open == 8
    code, took = _owner(url(server, dash), 5)                # the ninth: served
    assert code == 200 and took < 2
    assert _closed(held[0], 2)                               # the oldest made room
    assert not _closed(held[-1], 0.1)
    assert server.counts["evicted"] == 1 and server.open <= 8
    head = socket.create_connection(addr)
    head.sendall(b"GET /?token=" + b"x" * (dserver.MAX_HEAD + 10))
    head.settimeout(5)
    assert head.recv(100).startswith(b"HTTP/1.0 431")
    for s in held + [head]:
        s.close()


def _ask(server, raw: bytes) -> bytes:
    """Everything the server answers to `raw` (sent at once) before it closes."""
    s = socket.create_connection(server.server_address)
    s.settimeout(5)
    s.sendall(raw)
    out = b""
    try:
        while data := s.recv(65536):
            out += data
    except OSError:
        pass
    s.close()
    return out


def _status(answer: bytes) -> int:
    return int(answer.split(b"\r\n", 1)[0].split()[1])


def test_a_whole_head_past_max_head_is_refused_even_sent_at_once(small):
    # (a sans-I/O parser bounds what it buffers while a head is incomplete; a complete head
    # that arrives in one piece must meet the same bound)
    server, dash = small
    base = b"GET /api/summary?token=" + dash.token.encode() + b" HTTP/1.0\r\nX-Pad: "
    fits = base + b"a" * (dserver.MAX_HEAD - len(base) - 4) + b"\r\n\r\n"
    assert len(fits) == dserver.MAX_HEAD
    assert _status(_ask(server, fits)) == 200
    assert _status(_ask(server, fits[:-4] + b"a\r\n\r\n")) == 431
    assert server.counts["too_large"] == 1


def test_too_many_header_lines_are_refused(small):
    server, dash = small
    line = b"GET /api/summary?token=" + dash.token.encode() + b" HTTP/1.0\r\n"
    many = b"".join(b"X-%d: a\r\n" % i for i in range(dserver.MAX_HEADERS))
    assert _status(_ask(server, line + many + b"\r\n")) == 200
    assert _status(_ask(server, line + many + b"X-last: a\r\n\r\n")) == 431


def test_one_request_per_connection_and_nothing_is_written(small):
    server, dash = small
    t = dash.token.encode()
    two = b"GET /api/summary?token=" + t + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    out = _ask(server, two + two)
    assert out.count(b" 200 OK\r\n") == 1 and out.count(b"HTTP/1.") == 1
    post = b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    assert _status(_ask(server, b"POST /api/summary?token=" + t + post)) == 405
    assert _status(_ask(server, b"PUT /api/summary" + post)) == 403
    for raw in (b"HELLO\r\n\r\n", b"OPTIONS /?token=" + t + b" HTTP/1.0\r\n\r\n"):
        assert b"states" not in _ask(server, raw)
