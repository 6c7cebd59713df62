"""A ZeroMQ echo service for the tests: announces its endpoint through pilotfish.service and
answers every request with "<member uid>:<request>"; asked to leave, it answers what is still
coming for QUIET_S and exits 0. Options: --stdout (announce with the stdout line instead),
--fixed ENDPOINT (announce that, whatever it binds), --twice (announce again: must be refused),
--unhealthy-after N (its probe fails after N health checks; with --sick UID only in that
member)."""

import os
import sys

import zmq

from pilotfish import service

QUIET_S = 0.3

args = sys.argv[1:]
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
port = sock.bind_to_random_port("tcp://127.0.0.1")
endpoint = f"tcp://127.0.0.1:{port}"
if "--fixed" in args:
    endpoint = args[args.index("--fixed") + 1]
uid = os.environ["PILOTFISH_MEMBER_UID"]
checks = [0]


def probe():
    checks[0] += 1
    if "--sick" in args and args[args.index("--sick") + 1] != uid:
        return True
    return checks[0] <= int(args[args.index("--unhealthy-after") + 1])


if "--stdout" in args:
    print(service.announce_line(endpoint, pid=os.getpid()), flush=True)
    me = None
else:
    me = service.announce(endpoint, pid=os.getpid(),
                          probe=probe if "--unhealthy-after" in args else None)
    if "--twice" in args:
        try:
            service.announce(endpoint + "0")
        except service.ServiceError as e:
            print(f"second announce refused: {e}", file=sys.stderr, flush=True)
            sys.exit(3)

poller = zmq.Poller()
poller.register(sock, zmq.POLLIN)
quiet = 0.0
while True:
    if poller.poll(50):
        ident, *parts = sock.recv_multipart()
        sock.send_multipart([ident, f"{uid}:".encode() + parts[-1]])
        quiet = 0.0
    elif me is not None and me.leaving.is_set():
        quiet += 0.05
        if quiet >= QUIET_S:
            break
