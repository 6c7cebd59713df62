"""A rank that speaks raw PMI on its PMI_FD, the way a broken or hostile program could: what the
PMI server must refuse (tests/agent/test_pmi.py).

    raw_pmi.py MODE

MODE: malformed (init, then a line that is not PMI), oversized (init, then a put line of 70 KiB),
oversized2 (a PMI-2 frame that declares 999999 bytes), noread (init, then 20,000 requests
without reading an answer), flood (init, then puts until refused), liar (PMI-2 fullinit as
another rank), early (a command before init), fence (init, a put, a fence whose merged space
the owner makes too big), lost (init, then exit 9 with no finalize), bigput MB (init, MB MiB of
puts of 1,000-byte values, a fence: the world's space is over its cap when several nodes do it),
manykeys COUNT (every rank puts COUNT keys; a fence; each rank gets every rank's first and
last key back, then finalizes: exit 0 when all were right), fenceput MB (as bigput, then a key
of the next rank read back and finalize: exit 0 when the fence completed), getflood /
unknownflood (init, then gets of a missing key / unknown commands, 64 in flight, answers
read, until killed; every 10,048 answers one byte `.` on stdout).

Each mode then reads until the server closes the connection and exits 0 when it did (the job
was failed and its connections closed), 2 when an answer came where none should, 9 for `lost`.
"""

import os
import sys

fd = int(os.environ["PMI_FD"])
rank = int(os.environ["PMI_RANK"])
kvs = os.environ["PMI_JOBID"]
mode = sys.argv[1]


def send(data: bytes) -> bool:
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False  # the server closed us already: that is the point


def answer() -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf


def closed_by_server() -> int:
    """Read (and drop) whatever comes until EOF: 0 once the server closed us."""
    try:
        while os.read(fd, 65536):
            pass
    except ConnectionResetError:
        pass
    return 0


def init(version: int = 1) -> None:
    send(f"cmd=init pmi_version={version} pmi_subversion={0 if version == 2 else 1}\n".encode())
    a = answer()
    if b"rc=0" not in a:
        sys.exit(f"init answered {a!r}")


def frame(body: str) -> bytes:
    return f"{len(body):6d}{body}".encode()


if mode == "malformed":
    init()
    send(b"this is not pmi at all\n")
    sys.exit(closed_by_server())
if mode == "oversized":
    init()
    send(f"cmd=put kvsname={kvs} key=big value=".encode() + b"x" * (70 * 1024) + b"\n")
    sys.exit(closed_by_server())
if mode == "oversized2":
    init(2)
    send(b"999999cmd=kvs-put;key=a;value=")
    sys.exit(closed_by_server())
if mode == "noread":
    init()
    send(b"cmd=get_maxes\n" * 20000)
    sys.exit(closed_by_server())
if mode == "flood":
    init()
    i = 0
    while send(f"cmd=put kvsname={kvs} key=k{i} value={'v' * 1000}\n".encode()):
        a = answer()
        if not a:
            sys.exit(0)  # closed: refused
        if b"rc=0" not in a:
            sys.exit(f"put {i} answered {a!r}")
        i += 1
    sys.exit(closed_by_server())
if mode == "liar":
    init(2)
    send(frame(f"cmd=fullinit;pmirank={rank + 1};threaded=FALSE;"))
    sys.exit(closed_by_server())
if mode == "early":
    send(b"cmd=get_maxes\n")
    sys.exit(closed_by_server())
if mode == "fence":
    init()
    send(f"cmd=put kvsname={kvs} key=mine value=1\n".encode())
    if b"rc=0" not in answer():
        sys.exit(2)
    send(b"cmd=barrier_in\n")
    sys.exit(2 if answer() else 0)  # 0: closed by the server instead of barrier_out
if mode == "lost":
    init()
    sys.exit(9)


def put(key: str, value: str) -> None:
    send(f"cmd=put kvsname={kvs} key={key} value={value}\n".encode())
    a = answer()
    if b"rc=0" not in a:  # (refused: the server fails the job and closes us)
        sys.exit(closed_by_server() if not a else f"put {key} answered {a!r}")


def get(key: str) -> str:
    send(f"cmd=get kvsname={kvs} key={key}\n".encode())
    a = answer().decode()
    if "rc=0" not in a:
        sys.exit(f"get {key} answered {a!r}")
    return a.split("value=", 1)[1].rstrip("\n")


if mode == "bigput":
    init()
    value = "v" * 1000
    for i in range(int(float(sys.argv[2]) * 1024 * 1024) // 1024):
        put(f"b{rank}_{i}", value)
    send(b"cmd=barrier_in\n")
    sys.exit(2 if answer() else 0)  # 0: closed (the world failed) instead of barrier_out
if mode == "fenceput":
    init()
    value = "v" * 1000
    n = int(float(sys.argv[2]) * 1024 * 1024) // 1024
    for i in range(n):
        put(f"b{rank}_{i}", value)
    send(b"cmd=barrier_in\n")
    a = answer()
    if b"cmd=barrier_out" not in a or b"rc=0" not in a:
        sys.exit(f"barrier answered {a!r}")
    other = (rank + 1) % int(os.environ["PMI_SIZE"])
    if n and get(f"b{other}_{n - 1}") != value:
        sys.exit("a key of the next rank came back wrong")
    send(b"cmd=finalize\n")
    answer()
    sys.exit(0)
if mode in ("getflood", "unknownflood"):
    init()
    line = (
        b"cmd=get kvsname=" + kvs.encode() + b" key=nokey\n"
        if mode == "getflood"
        else b"cmd=frobnicate\n"
    )
    done = 0
    while send(line * 64):
        got = 0
        while got < 64:
            chunk = os.read(fd, 65536)
            if not chunk:
                sys.exit(0)
            got += chunk.count(b"\n")
        done += 64
        if done % 10048 == 0:
            os.write(1, b".")
    sys.exit(0)
if mode == "manykeys":
    init()
    count, size = int(sys.argv[2]), int(os.environ["PMI_SIZE"])
    for i in range(count):
        put(f"r{rank}k{i}", f"value{i}x{rank}")
    send(b"cmd=barrier_in\n")
    a = answer()
    if b"cmd=barrier_out" not in a or b"rc=0" not in a:
        sys.exit(f"barrier answered {a!r}")
    want = {f"r{r}k{i}": f"value{i}x{r}" for r in range(size) for i in (0, count - 1)}
    got = {k: get(k) for k in want}
    send(b"cmd=finalize\n")
    answer()
    sys.exit(0 if got == want else f"got {got}, want {want}")
sys.exit(f"unknown mode {mode!r}")
