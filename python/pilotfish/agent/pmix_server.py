"""An OpenPMIx server for the MPI worlds of one host (launch method `pmix`, launch/pmix.py):
Open MPI tasks that name no launcher form one world at the agent's speed, with no `prterun`
or DVM per task.

It runs as a process of its own, `python -m pilotfish.agent.pmix_server FD DIR`, started by
the launch method (launch/pmix.py, PmixHelper), which talks to it over FD (one end of a
socketpair, one JSON object a line, bounded):

    -> {"op": "register", "ns": NS, "size": N, "host": H}   a task's world: N ranks, all here
    <- {"env": [{...rank 0's PMIX_* variables}, ...]}  or  {"error": "..."}
    -> {"op": "drop", "ns": NS}                               its task ended (no answer)

What the server library does itself: the ranks' PMIx_Init (over 127.0.0.1; the namespace NS
-- 128 random bits in it -- is what a client must name, and only the ranks' environment holds
it), their puts, every fence (all ranks are local: OpenPMIx completes a local-only fence in
the server, `fence_localonly_opt`) and every get. What it is told here: per namespace the
job-level info Open MPI 5 reads at MPI_Init -- job/universe size, the node map and proc map,
local peers and size, app number/size/leader, session directories -- and per rank its rank,
local/node rank, app and global rank, node id and host name (PMIX_PROC_DATA); per rank the
environment PMIx_server_setup_fork gives (server URIs, namespace, rank, security mode).

Why a process of its own, in Python: the official binding (Debian's python3-pmix, OpenPMIx
4.2.2's Cython module) does all this, but it starts a Python thread that polls its callback
queue every millisecond, and its upcalls take the GIL: kept out of the agent's loop. Its
fence upcall copies the data with strdup (binary modex blobs are cut at the first NUL), so
fences across hosts need more than this binding (left for item 2); fences here never reach it.

Where the binding is missing it prints one line naming the package (python3-pmix) and exits 2.
An MPI_Abort is logged (bounded, escaped) on stderr; the rank then exits with its code, which
fails the task naming the rank (the agent's executor).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
from typing import Any

from ..launch.pmix import BINDING_DIRS, PACKAGE, binding_path

MAX_LINE = 64 * 1024
MAX_SIZE = 65536  # ranks of one world
NS_RE = re.compile(r"[A-Za-z0-9_.:+-]{1,200}")
HOST_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
# the wheel's Open MPI variables must not reach the system's OpenPMIx (notes/substrates.md)
STRIP = ("PMIX_", "OMPI_", "PRTE_", "OPAL_")


def _bounded(text: Any, n: int = 300) -> str:
    s = str(text)[:n]
    return s.encode("unicode_escape", "replace").decode("ascii", "replace")


def job_info(pmix: Any, srv: Any, ns: str, size: int, host: str, tmp: str) -> list[dict]:
    """The job-level and per-rank info of a world of `size` ranks, all on `host`."""
    P = pmix

    def kv(key: Any, value: Any, t: int) -> dict:
        return {"key": key, "value": value, "val_type": t}

    ranks = ",".join(str(r) for r in range(size))
    _rc, nodemap = srv.generate_regex([host])
    _rc, procmap = srv.generate_ppn([ranks])
    u32, rank_t = P.PMIX_UINT32, P.PMIX_PROC_RANK
    info = [
        kv(P.PMIX_UNIV_SIZE, size, u32),
        kv(P.PMIX_JOB_SIZE, size, u32),
        kv(P.PMIX_MAX_PROCS, size, u32),
        kv(P.PMIX_JOBID, ns, P.PMIX_STRING),
        kv(P.PMIX_NODE_MAP, nodemap, P.PMIX_REGEX),
        kv(P.PMIX_PROC_MAP, procmap, P.PMIX_REGEX),
        kv(P.PMIX_NUM_NODES, 1, u32),
        kv(P.PMIX_LOCAL_PEERS, ranks, P.PMIX_STRING),
        kv(P.PMIX_LOCAL_SIZE, size, u32),
        kv(P.PMIX_NODE_SIZE, size, u32),
        kv(P.PMIX_LOCALLDR, 0, rank_t),
        kv(P.PMIX_APPNUM, 0, u32),
        kv(P.PMIX_APPLDR, 0, rank_t),
        kv(P.PMIX_APP_SIZE, size, u32),
        kv(P.PMIX_NSDIR, tmp, P.PMIX_STRING),
        kv(P.PMIX_TMPDIR, tmp, P.PMIX_STRING),
    ]
    for r in range(size):
        per = [
            kv(P.PMIX_RANK, r, rank_t),
            kv(P.PMIX_APPNUM, 0, u32),
            kv(P.PMIX_LOCAL_RANK, r, P.PMIX_UINT16),
            kv(P.PMIX_NODE_RANK, r, P.PMIX_UINT16),
            kv(P.PMIX_GLOBAL_RANK, r, rank_t),
            kv(P.PMIX_APP_RANK, r, rank_t),
            kv(P.PMIX_NODEID, 0, u32),
            kv(P.PMIX_HOSTNAME, host, P.PMIX_STRING),
        ]
        # PMIX_PROC_DATA ("pmix.pdata": the binding does not export its name)
        info.append(kv("pmix.pdata", {"type": P.PMIX_INFO, "array": per}, P.PMIX_DATA_ARRAY))
    return info


class Server:
    """The OpenPMIx server of this process and the worlds registered with it."""

    def __init__(self, pmix: Any, tmp: str):
        self.pmix = pmix
        self.tmp = tmp
        self.worlds: dict[str, int] = {}  # namespace -> its size
        self.srv = pmix.PMIxServer()
        P = pmix
        info = [
            {"key": P.PMIX_SERVER_TMPDIR, "value": tmp, "val_type": P.PMIX_STRING},
            {"key": P.PMIX_SYSTEM_TMPDIR, "value": tmp, "val_type": P.PMIX_STRING},
            {
                "key": P.PMIX_SERVER_NSPACE,
                "value": f"pf-pmix.{os.getpid()}",
                "val_type": P.PMIX_STRING,
            },
            {"key": P.PMIX_SERVER_RANK, "value": 0, "val_type": P.PMIX_PROC_RANK},
        ]
        upcalls = {
            "clientconnected": lambda proc: P.PMIX_SUCCESS,
            "clientfinalized": lambda proc: P.PMIX_SUCCESS,
            "abort": self._abort,
        }
        rc = self.srv.init(info, upcalls)
        if rc != P.PMIX_SUCCESS:
            raise RuntimeError(f"PMIx_server_init failed: {self._err(rc)}")

    def _err(self, rc: int) -> str:
        try:
            return f"{self.srv.error_string(rc)} ({rc})"
        except Exception:  # noqa: BLE001 -- a name for a code, nothing more
            return str(rc)

    def _abort(self, args: dict) -> int:
        caller = args.get("caller") or {}
        sys.stderr.write(
            f"MPI_Abort: namespace {_bounded(caller.get('nspace'), 120)} rank "
            f"{_bounded(caller.get('rank'), 12)} status {_bounded(args.get('status'), 12)}: "
            f"{_bounded(args.get('msg', ''))}\n"
        )
        sys.stderr.flush()
        return int(self.pmix.PMIX_SUCCESS)

    def register(self, ns: str, size: int, host: str) -> list[dict[str, str]]:
        """Register the world's namespace and its ranks; each rank's environment."""
        ok = (self.pmix.PMIX_SUCCESS, self.pmix.PMIX_OPERATION_SUCCEEDED)
        if ns in self.worlds:
            raise ValueError(f"namespace {ns} is already registered")
        rc = self.srv.register_nspace(
            ns, size, job_info(self.pmix, self.srv, ns, size, host, self.tmp)
        )
        if rc not in ok:
            raise RuntimeError(f"PMIx_server_register_nspace: {self._err(rc)}")
        self.worlds[ns] = size
        uid, gid = os.getuid(), os.getgid()
        envs = []
        for r in range(size):
            proc = {"nspace": ns, "rank": r}
            rc = self.srv.register_client(proc, uid, gid)
            if rc not in ok:
                self.drop(ns)
                raise RuntimeError(f"PMIx_server_register_client rank {r}: {self._err(rc)}")
            env: dict[str, str] = {}
            rc = self.srv.setup_fork(proc, env)
            if rc not in ok:
                self.drop(ns)
                raise RuntimeError(f"PMIx_server_setup_fork rank {r}: {self._err(rc)}")
            envs.append(env)
        return envs

    def drop(self, ns: str) -> None:
        if self.worlds.pop(ns, None) is not None:
            self.srv.deregister_nspace(ns)


def _check(msg: Any) -> tuple[str, str, int, str]:
    """(op, ns, size, host) of a request, or ValueError naming the field."""
    if not isinstance(msg, dict):
        raise ValueError("a request is a JSON object")
    op, ns = msg.get("op"), msg.get("ns")
    if op not in ("register", "drop"):
        raise ValueError(f"op={_bounded(op, 40)}: 'register' or 'drop'")
    if not isinstance(ns, str) or not NS_RE.fullmatch(ns):
        raise ValueError(f"ns={_bounded(ns, 80)}: 1-200 of [A-Za-z0-9_.:+-]")
    if op == "drop":
        return op, ns, 0, ""
    size, host = msg.get("size"), msg.get("host")
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size={_bounded(size, 40)}: a whole number 1..{MAX_SIZE}")
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):
        raise ValueError(f"host={_bounded(host, 80)}: a host name")
    return op, ns, size, host


def serve(sock: socket.socket, server: Server) -> None:
    """Answer requests until the agent's end closes."""
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            reply: dict[str, Any] | None
            try:
                op, ns, size, host = _check(json.loads(line))
                if op == "drop":
                    server.drop(ns)
                    reply = None
                else:
                    reply = {"env": server.register(ns, size, host)}
            except (ValueError, RuntimeError) as e:
                reply = {"error": _bounded(e)}
            if reply is not None:
                sock.sendall(json.dumps(reply).encode() + b"\n")
        if len(buf) > MAX_LINE:
            sock.sendall(json.dumps({"error": f"a request over {MAX_LINE} bytes"}).encode() + b"\n")
            return


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    for k in [k for k in os.environ if k.startswith(STRIP)]:
        del os.environ[k]
    path = binding_path()
    if path is None:
        sock.sendall(
            json.dumps(
                {
                    "error": f"the OpenPMIx Python binding is not installed (package {PACKAGE}: "
                    f"apt-get install {PACKAGE}; looked in {', '.join(BINDING_DIRS)} for "
                    f"Python {sys.version_info.major}.{sys.version_info.minor})"
                }
            ).encode()
            + b"\n"
        )
        return 2
    sys.path.append(os.path.dirname(path))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (its setDaemon)
        import pmix  # Debian's python3-pmix (module docstring)
    tmp = tempfile.mkdtemp(prefix="pmix.", dir=argv[2])  # (0700)
    try:
        server = Server(pmix, tmp)
    except RuntimeError as e:
        sock.sendall(json.dumps({"error": _bounded(e)}).encode() + b"\n")
        return 2
    sock.sendall(json.dumps({"ready": _bounded(server.srv.get_version(), 80)}).encode() + b"\n")
    try:
        serve(sock, server)
    finally:
        for ns in list(server.worlds):
            server.drop(ns)
        server.srv.finalize()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
