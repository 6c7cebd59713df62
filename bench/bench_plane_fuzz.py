"""Fuzz the data planes as bench_wire_fuzz.py fuzzes the agent's control plane: staging
servers and rank notes, with garbage and forged frames, while their owner works.

    .venv/bin/python bench/bench_plane_fuzz.py staging [--frames 20000] [--seed 0] [--encrypt]
    scripts/substrates/slurm.sh exec .venv/bin/python bench/bench_plane_fuzz.py notes \
        [--datagrams 20000] [--tasks 60]

staging  a staging area of 2 servers (authenticated -- CURVE with --encrypt -- ZeroMQ
         collectives) takes --frames frames from three kinds of sender, mixed: strangers
         speaking ZeroMQ without credentials (forged collective pickles, pings, destroys,
         garbage; a fresh connection every 50 frames), strangers with wrong credentials (PLAIN
         as "client" with a password of their own; with --encrypt, CURVE with the servers'
         real public keys but keys of their own), and a client
         holding the area's key sending garbage (random frames, collective messages a client
         may not send, requests of random shape to a pipeline of its own). Every 500 frames
         the owner runs an iteration and checks it exactly against numpy. At the end: the same
         server processes, every iteration exact, what the servers counted (dropped,
         refused), their memory.
notes    a PRRTE pilot runs --tasks tasks of 1-2 ranks that exit with known codes; meanwhile
         --datagrams notes are sent to the agent's notes port, found as any user finds it (the
         rank wrapper's command line): ends with exit code 0 for every rank of every task
         seen, starts with pid 1, garbage, tokens guessed. At the end: every task ended with
         its own exit code, the agent alive, the notes it dropped (agent.log).
Exit status 1 if anything is off.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

import pilotfish as pf  # noqa: E402
from pilotfish import insitu  # noqa: E402
from pilotfish.insitu._client import _Channel  # noqa: E402
from _pilots import start_pilot  # noqa: E402

# (not "abandon": it ends every active iteration, the owner's too -- a resumed program's
# right, not garbage)
OPS = ["create", "destroy", "warm", "ping", "activate", "stage", "execute", "deactivate",
       "nope", ""]


class _Forged:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/pilotfish-plane-fuzz-pwned",))


def _junk(rng: random.Random):
    """A random msgpack-able value of random shape."""
    k = rng.randrange(9)
    if k == 0:
        return rng.randrange(-2 ** 63, 2 ** 63)
    if k == 1:
        return rng.random() * 10 ** rng.randrange(-5, 300)
    if k == 2:
        return "".join(chr(rng.randrange(32, 0x2fff)) for _ in range(rng.randrange(40)))
    if k == 3:
        return [_junk(rng) for _ in range(rng.randrange(4))]
    if k == 4:
        return {str(rng.randrange(99)): _junk(rng) for _ in range(rng.randrange(3))}
    if k == 5:
        return None
    if k == 6:
        return rng.choice(["<f8", "O", "V0", "S0", "<i4", "x", "float64"])
    if k == 7:
        return [rng.randrange(-3, 10 ** 6) for _ in range(rng.randrange(4))]
    return rng.randbytes(rng.randrange(64))


def _request(rng: random.Random) -> dict:
    hdr = {"op": rng.choice(OPS), "pipeline": rng.choice(["fuzz", "fuzz2", _junk(rng)])}
    for field in ("iteration", "epoch", "members", "block", "dtype", "shape", "meta",
                  "config", "module", "type"):
        if rng.random() < 0.4:
            hdr[field] = _junk(rng)
    if hdr.get("module") is not None and not isinstance(hdr["module"], str):
        hdr.pop("module")
    hdr["module"] = None if rng.random() < 0.9 else rng.choice(["os", "this", "json"])
    return hdr


def _frames(rng: random.Random, tag: str) -> list:
    k = rng.randrange(6)
    if k == 0:
        return [rng.randbytes(rng.randrange(1, 64)) for _ in range(rng.randrange(1, 5))]
    if k == 1:  # a collective message with a pickle that runs a command
        import pickle

        return [b"coll", msgspec.msgpack.encode([tag, rng.randrange(1, 4), rng.randrange(2), 0]),
                pickle.dumps(_Forged())]
    if k == 2:
        return [b"coll", rng.randbytes(rng.randrange(1, 32))]
    if k == 3:
        return [b"req", rng.randbytes(rng.randrange(1, 32))]
    hdr = _request(rng)
    try:
        return [b"req", msgspec.msgpack.encode(hdr)] + ([rng.randbytes(rng.randrange(64))]
                                                         if rng.random() < 0.5 else [])
    except (TypeError, OverflowError):
        return [b"req", b"\x80"]


def _stranger(ctx, m, who: str, encrypt: bool, rng: random.Random):
    """A DEALER to member m without credentials ("stranger_plain") or with wrong ones: PLAIN
    as a client or a peer with a password of its own; CURVE with the server's real public
    key but a key pair of its own (encrypt)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100)
    if who == "stranger_credentials" and encrypt:
        sock.setsockopt(zmq.CURVE_SERVERKEY, m.info["curve"].encode())
        pub, sec = zmq.curve_keypair()
        sock.setsockopt(zmq.CURVE_PUBLICKEY, pub)
        sock.setsockopt(zmq.CURVE_SECRETKEY, sec)
    elif who == "stranger_credentials":
        sock.setsockopt(zmq.PLAIN_USERNAME, rng.choice([b"client", b"peer " + m.uid.encode()]))
        sock.setsockopt(zmq.PLAIN_PASSWORD, rng.randbytes(16).hex().encode())
    sock.connect(m.endpoint)
    return sock


def _server_pids() -> list[int]:
    out = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                if b"pilotfish.insitu._server" in f.read():
                    out.append(int(path.split("/")[2]))
        except OSError:
            pass
    return out


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return -1.0


def staging(args) -> int:
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    ok = True
    with pf.Session() as s:
        _, tmgr, _ = start_pilot(s, nodes=1, cores_per_node=8, runtime="1h")
        area = insitu.StagingArea(tmgr, servers=2, mpi=False, name="fuzzed",
                                  encrypt=args.encrypt)
        area.create_pipeline("statistics", {"bins": 8, "range": [0, 1]})
        area.create_pipeline("fuzz", {"bins": 2}, type="statistics")
        h = area.pipeline("statistics")
        members = area.members
        uids = sorted(m.uid for m in members)
        pids = _server_pids()
        rss0 = {p: _rss_mib(p) for p in pids}
        ctx = zmq.Context()
        sent = {"stranger_plain": 0, "stranger_credentials": 0, "client": 0}
        plain: dict = {}
        curve: dict = {}
        client = _Channel(area._keys)
        it, exact, t0 = 0, 0, time.time()
        for n in range(args.frames):
            m = members[n % len(members)]
            tag = f"statistics/{it}/{area.epoch}"
            frames = _frames(rng, tag)
            who = rng.choice(list(sent))
            if who != "client":
                pool = plain if who == "stranger_plain" else curve
                sock = pool.get(m.endpoint)
                if sock is None or sent[who] % 50 == 0:  # a fresh connection now and then
                    if sock is not None:
                        sock.close(0)
                    sock = pool[m.endpoint] = _stranger(ctx, m, who, args.encrypt, rng)
            else:
                sock = client.sock(m.endpoint)
                while sock.poll(0):  # (answers to the well-formed requests: not kept)
                    sock.recv_multipart()
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:  # a stranger's queue full: it was never let in
                pass
            sent[who] += 1
            if n % 500 == 499:
                blocks = [nrng.random(1000) for _ in range(8)]
                h.activate(it)
                for b, a in enumerate(blocks):
                    h.stage(b, a)
                stats = h.execute(it)
                h.deactivate(it)
                full = np.concatenate(blocks)
                good = (stats["count"] == full.size and stats["min"] == full.min()
                        and stats["max"] == full.max()
                        and stats["histogram"] == np.histogram(full, 8, (0, 1))[0].tolist())
                exact += good
                ok &= good
                it += 1
        time.sleep(1.0)
        for sock in list(plain.values()) + list(curve.values()):
            sock.close(0)
        client.close()
        counts = {}
        for m in area.members:
            ch = _Channel(area._keys)
            ch.send(m.endpoint, {"op": "ping"})
            ((okp, _, st),) = ch.collect().values()
            ch.close()
            counts[m.uid] = {k: st[k] for k in ("dropped", "refused", "inbox_bytes")}
        same = sorted(m.uid for m in area.members) == uids and sorted(_server_pids()) == sorted(pids)
        pwned = os.path.exists("/tmp/pilotfish-plane-fuzz-pwned")
        result = {"frames": args.frames, "sent": sent, "seconds": round(time.time() - t0, 1),
                  "owner_iterations": it, "exact": exact, "same_servers": same,
                  "pwned": pwned, "servers": counts,
                  "rss_mib": {p: [round(rss0[p], 1), round(_rss_mib(p), 1)] for p in pids}}
        ok &= same and not pwned
        area.close()
        ctx.term()
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


def notes(args) -> int:
    rng = random.Random(args.seed)
    ok = True
    with pf.Session() as s:
        pilot, tmgr, _ = start_pilot(s, nodes=2, cores_per_node=8, runtime="1h",
                                     launcher="prrte")
        descs = [pf.TaskDescription(executable="/bin/sh", ranks=1 + i % 2,
                                    arguments=["-c", f"sleep {0.3 + (i % 4) * 0.2}; "
                                                     f"exit {i % 5}"])
                 for i in range(args.tasks)]
        stop = threading.Event()
        sent = {"datagrams": 0, "wrappers_seen": 0}

        def attack():
            out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            seen: dict[str, tuple] = {}
            while not stop.is_set() and sent["datagrams"] < args.datagrams:
                for path in glob.glob("/proc/[0-9]*/cmdline"):
                    try:
                        with open(path, "rb") as f:
                            text = f.read().decode(errors="replace")
                    except OSError:
                        continue
                    if "pf_note E" not in text:
                        continue
                    dest = re.search(r"/dev/udp/([0-9.]+)/([0-9]+)", text)
                    key = re.search(r"pf_note E (\S+)", text)
                    if dest and key and key.group(1) not in seen:
                        seen[key.group(1)] = (dest.group(1), int(dest.group(2)))
                sent["wrappers_seen"] = len(seen)
                for key, dest in list(seen.items()):
                    for _ in range(20):
                        k = rng.randrange(5)
                        if k == 0:
                            line = f"E {key} {rng.randrange(2)} 0"
                        elif k == 1:
                            line = f"E {rng.randbytes(16).hex()} {key} {rng.randrange(2)} 0"
                        elif k == 2:
                            line = f"S {key} 0 1 host 0"
                        elif k == 3:
                            line = f"S {rng.randbytes(16).hex()} {key} 0 1 host 0"
                        else:
                            line = rng.randbytes(rng.randrange(1, 500)).decode(errors="replace")
                        try:
                            out.sendto(line.encode(errors="replace")[:512], dest)
                        except OSError:
                            pass
                        sent["datagrams"] += 1
                time.sleep(0.005)
            out.close()

        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        t0 = time.time()
        tasks = tmgr.submit_tasks(descs)
        tmgr.wait_tasks([t.uid for t in tasks], timeout=600)
        stop.set()
        attacker.join(10)
        wrong = [(t.uid, t.state, t.exit_code) for i, t in enumerate(tasks)
                 if t.exit_code != i % 5 or t.state != (pf.DONE if i % 5 == 0 else pf.FAILED)]
        last = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
        alive = last.wait(timeout=120) == pf.DONE
        log = open(os.path.join(pilot.sandbox, "agent.log"), errors="replace").read()
        dropped = re.findall(r"rank notes: dropped .* \((\d+) so far\)", log)
        result = {"tasks": len(tasks), "wrong": wrong[:10], "n_wrong": len(wrong),
                  "agent_alive": alive, "seconds": round(time.time() - t0, 1), **sent,
                  "agent_logged_drops": int(dropped[-1]) if dropped else 0}
        ok = not wrong and alive and sent["datagrams"] > 0
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="plane", required=True)
    a = sub.add_parser("staging")
    a.add_argument("--frames", type=int, default=20_000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--encrypt", action="store_true", help="an area with encrypt=True (CURVE)")
    b = sub.add_parser("notes")
    b.add_argument("--datagrams", type=int, default=20_000)
    b.add_argument("--tasks", type=int, default=60)
    b.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        os.unlink("/tmp/pilotfish-plane-fuzz-pwned")
    except FileNotFoundError:
        pass
    return staging(args) if args.plane == "staging" else notes(args)


if __name__ == "__main__":
    sys.exit(main())
