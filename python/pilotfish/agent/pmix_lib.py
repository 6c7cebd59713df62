"""OpenPMIx's server library through ctypes: what a PMIx server of ONE node of a world that
spans several needs and the official Python binding cannot give (issue 51 item 2, across
hosts; agent/pmix_server.py serves one host's worlds through that binding).

The binding (Debian's python3-pmix, OpenPMIx 4.2.2) has two faults for fences across nodes:
its fence upcall copies the node's data with strdup (a modex blob is binary: it is cut at its
first NUL and then read past its end), and it must answer inside the upcall (a fence across
nodes completes later, when every node's part is in). Here the upcall keeps the node's blob
and returns at once; the owner completes the fence later (`fence_done`), from its own thread,
with the concatenation of every node's blob in node order -- what PRRTE's daemons do. It also
needs no Python thread polling every millisecond: the library's own progress thread calls in.

    lib = PmixLib(tmpdir, on_fence)         # PMIx_server_init
    envs = lib.register(ns, size, nodes, here)   # namespace + clients + setup_fork per rank
    on_fence(ns, key, blob)                 # all local ranks of ns are in this fence
    lib.fence_done(key, union)              # the world's blob: each node's, in node order
    lib.drop(ns)                            # PMIx_server_deregister_nspace

`nodes`: the node of each rank (rank order); `here`: this node's name. Job info: what Open
MPI 5 reads at MPI_Init (agent/pmix_server.py lists it), with the node map and proc map of
every node. pmix_info_t arrays are built by the library (PMIx_Info_list_*): no layout of
them here; the layouts that are here (pmix_proc_t, pmix_data_array_t, the server module) and
the constants are checked against libpmix-dev's headers (tests/launch/test_pmix_lib.py). The
library: the system's libpmix.so.2 by absolute path (launch/pmix.libpmix_path).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

from ..launch.pmix import libpmix_path

PMIX_SUCCESS = 0
PMIX_OPERATION_SUCCEEDED = -157
PMIX_ERR_NOT_SUPPORTED = -47
PMIX_BOOL, PMIX_STRING, PMIX_UINT16, PMIX_UINT32 = 1, 3, 13, 14
PMIX_INFO, PMIX_DATA_ARRAY, PMIX_PROC_RANK, PMIX_REGEX = 24, 39, 40, 49
NSLEN = 255

c_status = ctypes.c_int


class Proc(ctypes.Structure):
    _fields_ = [("nspace", ctypes.c_char * (NSLEN + 1)), ("rank", ctypes.c_uint32)]


class DataArray(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint16), ("size", ctypes.c_size_t), ("array", ctypes.c_void_p)]


RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
MODEX_CB = ctypes.CFUNCTYPE(
    None, c_status, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, RELEASE, ctypes.c_void_p
)
FENCE_NB = ctypes.CFUNCTYPE(
    c_status,
    ctypes.POINTER(Proc),
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    MODEX_CB,
    ctypes.c_void_p,
)
ABORT = ctypes.CFUNCTYPE(
    c_status,
    ctypes.POINTER(Proc),
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_void_p,
)
MODULE_FIELDS = (
    "client_connected finalized abort fence_nb direct_modex publish lookup unpublish spawn "
    "connect disconnect register_events deregister_events listener notify_event query "
    "tool_connected log allocate job_control monitor get_credential validate_credential "
    "iof_pull push_stdin group fabric client_connected2"
).split()


class Module(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in MODULE_FIELDS]


def load() -> ctypes.CDLL | None:
    """The system's libpmix.so.2 (launch/pmix.libpmix_path), or None where it is not."""
    path = libpmix_path()
    if path is None:
        return None
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


class InfoList:
    """A pmix_info_t array built through the library (PMIx_Info_list_*): no layout here."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.ptr = lib.PMIx_Info_list_start()
        self.keep: list = []

    def add(self, key: str, value: Any, t: int) -> None:
        ref: Any
        if t == PMIX_REGEX:  # (the library's own string, from PMIx_generate_regex/_ppn)
            ref = p = value
        elif t == PMIX_STRING:
            ref = ctypes.c_char_p(str(value).encode())
            p = ctypes.cast(ref, ctypes.c_void_p)
        elif t == PMIX_UINT16:
            ref = ctypes.c_uint16(int(value))
            p = ctypes.cast(ctypes.pointer(ref), ctypes.c_void_p)
        elif t in (PMIX_UINT32, PMIX_PROC_RANK):
            ref = ctypes.c_uint32(int(value))
            p = ctypes.cast(ctypes.pointer(ref), ctypes.c_void_p)
        elif t == PMIX_DATA_ARRAY:  # (a DataArray)
            ref = value
            p = ctypes.cast(ctypes.pointer(value), ctypes.c_void_p)
        else:
            raise ValueError(f"type {t}: not used here")
        self.keep.append(ref)
        rc = self.lib.PMIx_Info_list_add(self.ptr, key.encode(), p, ctypes.c_uint16(t))
        if rc != PMIX_SUCCESS:
            raise RuntimeError(f"PMIx_Info_list_add {key}: {rc}")

    def array(self) -> DataArray:
        da = DataArray()
        rc = self.lib.PMIx_Info_list_convert(self.ptr, ctypes.byref(da))
        self.lib.PMIx_Info_list_release(self.ptr)
        if rc != PMIX_SUCCESS:
            raise RuntimeError(f"PMIx_Info_list_convert: {rc}")
        return da


def _proc(ns: str, rank: int) -> Proc:
    p = Proc()
    p.nspace = ns.encode()[:NSLEN]
    p.rank = rank
    return p


class PmixLib:
    """One process's OpenPMIx server (see the module docstring)."""

    def __init__(
        self,
        tmp: str,
        on_fence: Callable[[str, int, bytes], None],
        on_abort: Callable[[str, int, int, str], None] | None = None,
    ):
        lib = load()
        if lib is None:
            raise RuntimeError("libpmix.so.2 not found (package libpmix2)")
        self.lib = lib
        lib.PMIx_Info_list_start.restype = ctypes.c_void_p
        lib.PMIx_Info_list_add.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_uint16,
        ]
        lib.PMIx_Info_list_convert.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.PMIx_Info_list_release.argtypes = [ctypes.c_void_p]
        lib.PMIx_generate_regex.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.PMIx_generate_ppn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        self.tmp = tmp
        self.on_fence = on_fence
        self.on_abort = on_abort
        self.lock = threading.Lock()
        self.pending: dict[int, tuple] = {}  # fence key -> (cbfunc, cbdata)
        self.held: dict[int, ctypes.Array] = {}  # blobs the library still reads
        self.worlds: dict[str, int] = {}
        self._key = 0
        # (the callbacks must outlive the server: kept on self)
        self._fence = FENCE_NB(self._fence_nb)
        self._abort = ABORT(self._abort_up)
        self._release = RELEASE(self._released)
        self.module = Module()
        self.module.fence_nb = ctypes.cast(self._fence, ctypes.c_void_p)
        self.module.abort = ctypes.cast(self._abort, ctypes.c_void_p)
        info = InfoList(lib)
        info.add("pmix.srvr.tmpdir", tmp, PMIX_STRING)
        info.add("pmix.sys.tmpdir", tmp, PMIX_STRING)
        info.add("pmix.srv.nspace", f"pf-pmix.{os.getpid()}", PMIX_STRING)
        info.add("pmix.srv.rank", 0, PMIX_PROC_RANK)
        da = info.array()
        rc = lib.PMIx_server_init(
            ctypes.byref(self.module), ctypes.c_void_p(da.array), ctypes.c_size_t(da.size)
        )
        if rc != PMIX_SUCCESS:
            raise RuntimeError(f"PMIx_server_init: {rc}")

    # -- upcalls (the library's progress thread) ---------------------------------------------
    def _fence_nb(self, procs, nprocs, info, ninfo, data, ndata, cbfunc, cbdata) -> int:
        ns = procs[0].nspace.decode(errors="replace") if nprocs else ""
        blob = ctypes.string_at(data, ndata) if data and ndata else b""
        with self.lock:
            self._key += 1
            key = self._key
            self.pending[key] = (cbfunc, cbdata)
        self.on_fence(ns, key, blob)
        return PMIX_SUCCESS

    def _abort_up(self, proc, obj, status, msg, procs, nprocs, cbfunc, cbdata) -> int:
        if self.on_abort is not None:
            text = (msg or b"").decode(errors="replace")
            self.on_abort(proc[0].nspace.decode(errors="replace"), proc[0].rank, status, text)
        return PMIX_OPERATION_SUCCEEDED

    def _released(self, cbdata) -> None:
        with self.lock:
            self.held.pop(int(cbdata or 0), None)

    # -- the owner's side -------------------------------------------------------------------------
    def fence_done(self, key: int, union: bytes, status: int = PMIX_SUCCESS) -> None:
        """Complete fence `key` (any thread) with every node's blob, in node order."""
        with self.lock:
            cb = self.pending.pop(key, None)
            if cb is None:
                return
            buf = ctypes.create_string_buffer(union, len(union)) if union else None
            if buf is not None:
                self.held[key] = buf
        cbfunc, cbdata = cb
        cbfunc(
            status,
            ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None,
            len(union),
            cbdata,
            self._release,
            ctypes.c_void_p(key),
        )

    def _regex(self, fn, text: str) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        rc = fn(text.encode(), ctypes.byref(out))
        if rc != PMIX_SUCCESS or not out.value:
            raise RuntimeError(f"PMIx_generate_regex/ppn of {text[:80]!r}: {rc}")
        return out

    def register(self, ns: str, nodes: list[str], here: str) -> list[dict[str, str]]:
        """Register world `ns` (rank r on nodes[r]); the environment of each rank on `here`."""
        size = len(nodes)
        order = list(dict.fromkeys(nodes))
        ranks_of = {n: [r for r in range(size) if nodes[r] == n] for n in order}
        mine = ranks_of.get(here, [])
        lib = self.lib
        nodemap = self._regex(lib.PMIx_generate_regex, ",".join(order))
        procmap = self._regex(
            lib.PMIx_generate_ppn, ";".join(",".join(str(r) for r in ranks_of[n]) for n in order)
        )
        info = InfoList(lib)
        for key, value, t in (
            ("pmix.univ.size", size, PMIX_UINT32),
            ("pmix.job.size", size, PMIX_UINT32),
            ("pmix.max.size", size, PMIX_UINT32),
            ("pmix.jobid", ns, PMIX_STRING),
            ("pmix.nmap", nodemap, PMIX_REGEX),
            ("pmix.pmap", procmap, PMIX_REGEX),
            ("pmix.num.nodes", len(order), PMIX_UINT32),
            ("pmix.lpeers", ",".join(str(r) for r in mine), PMIX_STRING),
            ("pmix.local.size", len(mine), PMIX_UINT32),
            ("pmix.node.size", len(mine), PMIX_UINT32),
            ("pmix.lldr", mine[0] if mine else 0, PMIX_PROC_RANK),
            ("pmix.appnum", 0, PMIX_UINT32),
            ("pmix.aldr", 0, PMIX_PROC_RANK),
            ("pmix.app.size", size, PMIX_UINT32),
            ("pmix.nsdir", self.tmp, PMIX_STRING),
            ("pmix.tmpdir", self.tmp, PMIX_STRING),
        ):
            info.add(key, value, t)
        for r in range(size):
            node = nodes[r]
            local = ranks_of[node].index(r)
            per = InfoList(lib)
            per.add("pmix.rank", r, PMIX_PROC_RANK)
            per.add("pmix.appnum", 0, PMIX_UINT32)
            per.add("pmix.lrank", local, PMIX_UINT16)
            per.add("pmix.nrank", local, PMIX_UINT16)
            per.add("pmix.grank", r, PMIX_PROC_RANK)
            per.add("pmix.apprank", r, PMIX_PROC_RANK)
            per.add("pmix.nodeid", order.index(node), PMIX_UINT32)
            per.add("pmix.hname", node, PMIX_STRING)
            info.add("pmix.pdata", per.array(), PMIX_DATA_ARRAY)
        da = info.array()
        rc = lib.PMIx_server_register_nspace(
            ns.encode(), len(mine), ctypes.c_void_p(da.array), ctypes.c_size_t(da.size), None, None
        )
        if rc not in (PMIX_SUCCESS, PMIX_OPERATION_SUCCEEDED):
            raise RuntimeError(f"PMIx_server_register_nspace: {rc}")
        self.worlds[ns] = size
        envs = []
        for r in mine:
            p = _proc(ns, r)
            uid, gid = ctypes.c_uint32(os.getuid()), ctypes.c_uint32(os.getgid())
            rc = lib.PMIx_server_register_client(ctypes.byref(p), uid, gid, None, None, None)
            if rc not in (PMIX_SUCCESS, PMIX_OPERATION_SUCCEEDED):
                raise RuntimeError(f"PMIx_server_register_client rank {r}: {rc}")
            penv = ctypes.POINTER(ctypes.c_char_p)()
            rc = lib.PMIx_server_setup_fork(ctypes.byref(p), ctypes.byref(penv))
            if rc != PMIX_SUCCESS:
                raise RuntimeError(f"PMIx_server_setup_fork rank {r}: {rc}")
            env = {}
            i = 0
            while penv and penv[i]:
                k, _, v = penv[i].decode(errors="replace").partition("=")
                env[k] = v
                i += 1
            envs.append(env)
        return envs

    def drop(self, ns: str) -> None:
        if self.worlds.pop(ns, None) is not None:
            # (blocking, ~1 ms: with a Python callback, the progress thread waits for the GIL
            # and the next registration behind it took 5-14 ms)
            self.lib.PMIx_server_deregister_nspace(ns.encode(), None, None)

    def finalize(self) -> None:
        self.lib.PMIx_server_finalize()
