"""The PMI server room (agent/pmi/) with real MPI: ranks of the `mpich` wheel's libmpi (C and
mpi4py) and of Slurm's libpmi2 form their world through it, on one "node" and on two (two
servers on this host, the test as the owner that merges their fence dicts); the faults reach
the owner naming the rank; what a rank may send that breaks the protocol fails that job only.

Ranks are spawned with subprocess (pmi.spawn_local), each holding its end of a socketpair as
PMI_FD; and by the Rust core (pass_fd: the end as descriptor 3, PMI_FD=3), the path node
executors take. The programs: tests/agent/pmi_progs/.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pilotfish.agent import pmi
from pilotfish.agent.pmi import PmiServer
from pmi_helpers import spawn_local, wait_local  # tests/agent (on sys.path under pytest)

PROGS = Path(__file__).resolve().parent / "pmi_progs"
BIN = Path(sys.executable).parent
MPICC = BIN / "mpicc"
LIBMPI = BIN.parent / "lib" / "libmpi.so.12"
PMI2_H = Path("/usr/include/slurm/pmi2.h")  # libpmi2-0-dev: scripts/substrates/install.sh
HOST = socket.gethostname()
TIMEOUT = 60  # generous: a world of 4 forms in ~0.1 s


def _compile(out: Path, src: str, cc: list[str], libs: list[str]) -> str:
    exe = out / Path(src).stem
    r = subprocess.run(
        cc + ["-O1", "-o", str(exe), str(PROGS / src)] + libs,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return str(exe)


@pytest.fixture(scope="module")
def mpi_hello(tmp_path_factory) -> str:
    if not MPICC.exists():
        pytest.skip(f"needs the mpich wheel's mpicc ({MPICC})")
    return _compile(tmp_path_factory.mktemp("pmi"), "mpi_hello.c", [str(MPICC)], [])


@pytest.fixture(scope="module")
def pmi2_hello(tmp_path_factory) -> str:
    if not PMI2_H.exists() or not shutil.which("cc"):
        pytest.skip("needs Slurm's libpmi2 (Debian libpmi2-0-dev, scripts/substrates/install.sh)")
    return _compile(tmp_path_factory.mktemp("pmi2"), "pmi2_hello.c", ["cc"], ["-lpmi2"])


class Owner:
    """The test as the agent: one job may span several servers ("nodes"); a fence completes
    when every server of the job has called on_fence, with the union of their dicts; a fault
    (abort, lost rank, protocol error, a rank's non-zero exit) kills the job's processes."""

    def __init__(self):
        self.events: list[tuple] = []
        self.fences: list[tuple[str, int, int]] = []  # (kvsname, epoch, server index)
        self.jobs: dict[str, list[pmi.PmiJob]] = {}
        self.procs: dict[str, dict[int, subprocess.Popen]] = {}
        self.servers: list[PmiServer] = []
        self.kill_on_fault = True
        self._parts: dict[tuple[str, int], list[dict]] = {}

    def server(self, **kw) -> PmiServer:
        s = PmiServer(
            on_fence=self.on_fence,
            on_abort=self.on_abort,
            on_error=self.on_error,
            on_lost=self.on_lost,
            **kw,
        )
        self.servers.append(s)
        return s

    def add(self, server, kvsname, size, local, argv, env=None, outdir=None, **kw):
        job = server.add_job(kvsname, size, local, **kw)
        self.jobs.setdefault(kvsname, []).append(job)
        files = {r: open(outdir / f"{kvsname}.{r}.out", "wb") for r in job.ranks} if outdir else {}
        try:
            procs = spawn_local(
                job,
                argv,
                env,
                stdout=(lambda r: files[r]) if files else subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        finally:
            for f in files.values():  # the ranks hold their own copies
                f.close()
        self.procs.setdefault(kvsname, {}).update(procs)
        return job

    def on_fence(self, job, epoch, new):
        self.fences.append((job.kvsname, epoch, self.servers.index(job.server)))
        parts = self._parts.setdefault((job.kvsname, epoch), [])
        parts.append(dict(new))
        if len(parts) == len(self.jobs[job.kvsname]):
            merged: dict[str, str] = {}
            for p in parts:
                merged.update(p)
            for j in self.jobs[job.kvsname]:
                j.fence_done(epoch, merged)

    def on_abort(self, job, rank, code, message):
        self.events.append(("abort", job.kvsname, rank, code, message))
        self.kill(job.kvsname)

    def on_error(self, job, rank, reason):
        self.events.append(("error", job.kvsname, rank, reason))
        self.kill(job.kvsname)

    def on_lost(self, job, rank):
        self.events.append(("lost", job.kvsname, rank))
        self.kill(job.kvsname)

    def on_exit(self, proc):
        if proc.returncode != 0:
            for kvs, procs in self.procs.items():
                if proc in procs.values():
                    self.kill(kvs)

    def kill(self, kvsname):
        if not self.kill_on_fault:
            return
        for p in self.procs.get(kvsname, {}).values():
            if p.returncode is None:  # a zombie not reaped yet takes the signal harmlessly
                p.kill()

    def run(self, timeout=TIMEOUT) -> None:
        procs = [p for d in self.procs.values() for p in d.values()]
        assert wait_local(self.servers, procs, timeout, on_exit=self.on_exit), (
            f"ranks still running after {timeout} s; events {self.events}"
        )

    def codes(self, kvsname) -> dict[int, int]:
        return {r: p.returncode for r, p in sorted(self.procs[kvsname].items())}

    def close(self):
        for jobs in self.jobs.values():
            for j in jobs:
                j.close()
        for s in self.servers:
            s.close()


@pytest.fixture
def owner():
    o = Owner()
    yield o
    for kvs in o.procs:
        o.kill(kvs)
    o.close()


def _kvs(tag: str) -> str:
    return f"pf.test.{tag}.{os.getpid()}"  # MPICH names its shared memory after it


def _lines(outdir: Path, kvsname: str, size: int) -> list[list[str]]:
    return [(outdir / f"{kvsname}.{r}.out").read_text().split() for r in range(size)]


def _no_shm_left(jobs):
    left = [p for j in jobs for p in j.shm_paths() if os.path.lexists(p)]
    assert not left, left


# -- one node -------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_a_c_world_forms_through_the_server(owner, mpi_hello, tmp_path, n):
    kvs = _kvs(f"c{n}")
    job = owner.add(owner.server(), kvs, n, range(n), [mpi_hello], outdir=tmp_path)
    owner.run()
    assert owner.codes(kvs) == {r: 0 for r in range(n)}, owner.events
    assert owner.events == []
    for r, words in enumerate(_lines(tmp_path, kvs, n)):
        assert words == ["rank", str(r), "size", str(n), "host", HOST, "sum", str(n * (n - 1) // 2)]
    assert job.finished and not job.not_inited()
    # MPI_Init and MPI_Finalize fence (the wheel's libmpi: one each on one node); each fence
    # reached the owner once for the whole node, not once per rank
    epochs = [e for k, e, _ in owner.fences if k == kvs]
    assert epochs == list(range(len(epochs))) and len(epochs) >= 1
    job.close()
    _no_shm_left([job])


@pytest.mark.mpi
def test_an_mpi4py_world_forms_through_the_server(owner, tmp_path):
    pytest.importorskip("mpi4py")
    n = 4
    kvs = _kvs("py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPAL_", "PRTE_", "PMIX_"))}
    env.pop("MPI4PY_MPIABI", None)
    env["MPI4PY_LIBMPI"] = str(LIBMPI)
    owner.add(
        owner.server(),
        kvs,
        n,
        range(n),
        [sys.executable, str(PROGS / "mpi4py_hello.py")],
        env=env,
        outdir=tmp_path,
    )
    owner.run()
    assert owner.codes(kvs) == {r: 0 for r in range(n)}, owner.events
    for r, words in enumerate(_lines(tmp_path, kvs, n)):
        assert words == ["rank", str(r), "size", str(n), "host", HOST, "sum", "6", "bcast", "ok"]


@pytest.mark.mpi
def test_mpi_comm_spawn_is_refused_not_hung(owner, tmp_path):
    """PMI-1's multi-line spawn command (mcmd=spawn ... endcmd) is read whole and answered
    with an error: MPI_Comm_spawn raises instead of waiting forever."""
    pytest.importorskip("mpi4py")
    kvs = _kvs("spawn")
    env = dict(os.environ, MPI4PY_LIBMPI=str(LIBMPI))
    owner.add(
        owner.server(),
        kvs,
        1,
        [0],
        [sys.executable, str(PROGS / "mpi4py_spawn.py")],
        env=env,
        outdir=tmp_path,
    )
    owner.run()
    assert owner.codes(kvs) == {0: 0}, owner.events
    assert _lines(tmp_path, kvs, 1)[0][:2] == ["spawn", "refused"]


# -- two nodes: two servers, the test merging their fences --------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("layout", [[0, 0, 1, 1], [0, 1, 0, 1]], ids=["block", "cyclic"])
def test_two_nodes_form_one_world(owner, mpi_hello, tmp_path, layout):
    """Half the ranks on each server; PMI_process_mapping says two nodes, so MPICH exchanges
    business cards through the owner's merge and talks between the halves over its netmod."""
    kvs = _kvs("two" + "".join(map(str, layout)))
    a, b = owner.server(), owner.server()
    jobs = [
        owner.add(
            s,
            kvs,
            4,
            [r for r in range(4) if layout[r] == i],
            [mpi_hello],
            outdir=tmp_path,
            node_of_rank=layout,
        )
        for i, s in enumerate((a, b))
    ]
    assert jobs[0].attrs["PMI_process_mapping"] == pmi.process_mapping(layout)
    owner.run()
    assert owner.codes(kvs) == {r: 0 for r in range(4)}, owner.events
    for r, words in enumerate(_lines(tmp_path, kvs, 4)):
        assert words == ["rank", str(r), "size", "4", "host", HOST, "sum", "6"]
    # one on_fence per server per epoch, whatever the number of its ranks
    per = {}
    for k, e, s in owner.fences:
        per.setdefault(e, []).append(s)
    assert per and all(sorted(v) == [0, 1] for v in per.values()), per
    assert [j.node_id for j in jobs] == [0, 1]
    for j in jobs:
        j.close()
    _no_shm_left(jobs)


def test_process_mapping():
    assert pmi.process_mapping([0, 0, 1, 1]) == "(vector,(0,2,2))"
    assert pmi.process_mapping([0, 1, 0, 1]) == "(vector,(0,2,1),(0,2,1))"
    assert pmi.process_mapping([7, 7, 7]) == "(vector,(0,1,3))"
    assert pmi.process_mapping([3, 3, 9, 1, 1]) == "(vector,(0,1,2),(1,1,1),(2,1,2))"


# -- PMI-2 through Slurm's libpmi2 --------------------------------------------------------------


def test_pmi2_through_a_real_client_one_node(owner, pmi2_hello, tmp_path):
    kvs = _kvs("p2")
    owner.add(owner.server(), kvs, 3, range(3), [pmi2_hello, "node", "0"], outdir=tmp_path)
    owner.run()
    assert owner.codes(kvs) == {0: 0, 1: 0, 2: 0}, owner.events
    for r, words in enumerate(_lines(tmp_path, kvs, 3)):
        assert words == [
            "pmi2",
            "rank",
            str(r),
            "size",
            "3",
            "jobid",
            kvs,
            "got",
            "3",
            "map",
            "(vector,(0,1,3))",
            "node",
            "from-lowest",
        ]


def test_pmi2_through_a_real_client_two_nodes(owner, pmi2_hello, tmp_path):
    """kvs-fence across two servers; node attributes stay on their node (each node's lowest
    rank puts, the others wait=TRUE for it)."""
    kvs = _kvs("p2two")
    layout = [0, 1, 0, 1]
    a, b = owner.server(), owner.server()
    for i, s in enumerate((a, b)):
        owner.add(
            s,
            kvs,
            4,
            [r for r in range(4) if layout[r] == i],
            [pmi2_hello, "node", str(i)],
            outdir=tmp_path,
            node_of_rank=layout,
        )
    owner.run()
    assert owner.codes(kvs) == {r: 0 for r in range(4)}, owner.events
    for r, words in enumerate(_lines(tmp_path, kvs, 4)):
        assert words[:8] == ["pmi2", "rank", str(r), "size", "4", "jobid", kvs, "got"]
        assert words[8:] == ["6", "map", "(vector,(0,2,1),(0,2,1))", "node", "from-lowest"]
    assert sorted(e for _, e, _ in owner.fences) == [0, 0, 1, 1]


def test_pmi2_abort_names_the_rank_and_its_message(owner, pmi2_hello):
    kvs = _kvs("p2abort")
    owner.add(owner.server(), kvs, 3, range(3), [pmi2_hello, "abort", "2"])
    owner.run()
    assert owner.events[0] == ("abort", kvs, 2, 1, "pmi2 abort from rank 2")
    assert owner.codes(kvs)[2] in (1, -9)  # its own exit, or the owner's kill came first
    assert owner.codes(kvs)[0] == owner.codes(kvs)[1] == -9


# -- faults ---------------------------------------------------------------------------------


@pytest.mark.mpi
def test_mpi_abort_reaches_the_owner_with_the_rank(owner, mpi_hello):
    kvs = _kvs("abort")
    job = owner.add(owner.server(), kvs, 2, range(2), [mpi_hello, "abort", "1"])
    owner.run()
    # MPICH's PMI-1 client sends MPI_Abort's code and a fixed message ("abort"); its own text
    # goes to the rank's stderr
    assert owner.events[0] == ("abort", kvs, 1, 5, "abort"), owner.events
    # the owner kills the job's ranks at the abort: the aborting one too, unless its exit
    # (with MPI_Abort's code) came first
    assert owner.codes(kvs)[1] in (5, -9) and owner.codes(kvs)[0] == -9, owner.codes(kvs)
    job.close()
    _no_shm_left([job])


@pytest.mark.mpi
def test_a_rank_that_exits_7_after_init_is_reported_lost(owner, mpi_hello):
    kvs = _kvs("exit7")
    job = owner.add(owner.server(), kvs, 2, range(2), [mpi_hello, "exit", "1", "7"])
    owner.run()
    assert owner.codes(kvs)[1] == 7, owner.events
    assert ("lost", kvs, 1) in owner.events, owner.events
    assert owner.codes(kvs)[0] != 0  # the owner killed it (or it failed on its own)
    job.close()  # the killed rank's shared memory goes with the job
    _no_shm_left([job])


@pytest.mark.mpi
def test_bad_lines_fail_their_job_only(owner, mpi_hello, tmp_path):
    """On one server: a rank sending a malformed line, one sending a 70 KiB line, one
    declaring a PMI-2 frame of 999999 bytes, one speaking before init and one claiming
    another rank's identity -- each fails its own job, named, while an MPI job completes."""
    owner.kill_on_fault = False  # to see each bad rank read EOF: the server closed it
    srv = owner.server()
    raw = [sys.executable, str(PROGS / "raw_pmi.py")]
    bad = {
        "malformed": "neither a PMI-1 line",
        "oversized": "longer than 65536",
        "oversized2": "frame of 999999 bytes",
        "early": "before init",
        "liar": "fullinit as rank '1' on rank 0",
    }
    for mode in bad:
        owner.add(srv, _kvs(mode), 1, [0], raw + [mode])
    good = _kvs("good")
    owner.add(srv, good, 2, range(2), [mpi_hello], outdir=tmp_path)
    owner.run()
    assert owner.codes(good) == {0: 0, 1: 0}, owner.events
    for r, words in enumerate(_lines(tmp_path, good, 2)):
        assert words[:4] == ["rank", str(r), "size", "2"]
    errors = {e[1]: e for e in owner.events if e[0] == "error"}
    assert sorted(errors) == sorted(_kvs(m) for m in bad), owner.events
    for mode, why in bad.items():
        _, _, rank, reason = errors[_kvs(mode)]
        assert rank == 0 and why in reason, (mode, reason)
        # the server closed that rank's connection: it read EOF and exited 0
        assert owner.codes(_kvs(mode)) == {0: 0}, mode
        assert owner.jobs[_kvs(mode)][0].failed == reason
    assert not [e for e in owner.events if e[1] == good]


def test_a_rank_that_does_not_read_its_answers_fails_its_job(owner):
    owner.kill_on_fault = False
    srv = owner.server(max_out=16 * 1024)
    kvs = _kvs("noread")
    owner.add(srv, kvs, 1, [0], [sys.executable, str(PROGS / "raw_pmi.py"), "noread"])
    owner.run()
    assert owner.events == [("error", kvs, 0, owner.events[0][3])]
    assert "does not read its PMI answers" in owner.events[0][3]
    assert owner.codes(kvs) == {0: 0}


def test_the_key_value_space_is_bounded(owner):
    owner.kill_on_fault = False
    srv = owner.server(max_kvs_bytes=64 * 1024)
    kvs = _kvs("flood")
    job = owner.add(srv, kvs, 1, [0], [sys.executable, str(PROGS / "raw_pmi.py"), "flood"])
    owner.run()
    assert len(owner.events) == 1 and owner.events[0][:3] == ("error", kvs, 0), owner.events
    assert "key-value space is full" in owner.events[0][3]
    assert job.kvs_bytes <= 64 * 1024
    assert owner.codes(kvs) == {0: 0}


def test_a_merged_space_over_the_bound_fails_the_job():
    """What the other nodes put counts too: the owner's merged dict is checked at fence_done
    (and a fence_done for another epoch is the owner's bug: ValueError)."""
    seen = []

    def on_fence(job, epoch, new):
        seen.append((epoch, dict(new)))
        with pytest.raises(ValueError, match=f"epoch={epoch + 1}"):
            job.fence_done(epoch + 1, new)
        job.fence_done(epoch, {**new, **{f"k{i}": "v" * 500 for i in range(20)}})

    errors = []
    srv = PmiServer(
        on_fence=on_fence,
        max_kvs_bytes=4096,
        on_error=lambda job, rank, why: errors.append((rank, why)),
    )
    job = srv.add_job(_kvs("merged"), 2, [0], node_of_rank=[0, 1])
    (proc,) = spawn_local(job, [sys.executable, str(PROGS / "raw_pmi.py"), "fence"]).values()
    try:
        assert wait_local([srv], [proc], TIMEOUT)
    finally:
        srv.close()
    assert seen == [(0, {"mine": "1"})]
    assert errors and errors[0][0] is None and "max_kvs_bytes=4096" in errors[0][1], errors
    assert job.failed == errors[0][1]
    assert proc.returncode == 0  # its fence was never answered: the server closed it


def test_a_rank_that_exits_without_finalize_is_reported_lost(owner):
    kvs = _kvs("lost")
    job = owner.add(
        owner.server(), kvs, 2, range(2), [sys.executable, str(PROGS / "raw_pmi.py"), "lost"]
    )
    owner.run()
    lost = [e[2] for e in owner.events if e[0] == "lost"]
    assert lost and set(lost) <= {0, 1}, owner.events
    first = lost[0]
    assert owner.codes(kvs)[first] == 9
    assert job.failed is None  # the owner decides what a lost rank means


# -- what the owner may give -------------------------------------------------------------------


def test_add_job_refuses_bad_arguments():
    srv = PmiServer()
    bad = [
        (dict(kvsname="has space", size=1, local_ranks=[0]), "kvsname="),
        (dict(kvsname="a", size=0, local_ranks=[0]), "size=0"),
        (dict(kvsname="a", size=2, local_ranks=[0, 0]), "local_ranks="),
        (dict(kvsname="a", size=2, local_ranks=[2]), "local_ranks="),
        (dict(kvsname="a", size=2, local_ranks=[0]), "on_fence"),
        (dict(kvsname="a", size=1, local_ranks=[0], node_of_rank=[0, 1]), "node_of_rank"),
        (dict(kvsname="a", size=1, local_ranks=[0], attrs={"k": "a b"}), "attrs"),
        (dict(kvsname="a", size=1, local_ranks=[0], universe_size=0), "universe_size=0"),
    ]
    for kw, why in bad:
        with pytest.raises(ValueError, match=why):
            srv.add_job(**kw)
    fenced = PmiServer(on_fence=lambda *a: None)
    with pytest.raises(ValueError, match="not one node"):
        fenced.add_job("a", 2, [0, 1], node_of_rank=[0, 1])
    with pytest.raises(ValueError, match="node_of_rank=None"):
        fenced.add_job("a", 2, [0])
    srv.add_job("a", 1, [0])
    with pytest.raises(ValueError, match="already served"):
        srv.add_job("a", 1, [0])
    for kw in ({"max_line": 10}, {"max_kvs_bytes": True}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            PmiServer(**kw)
    srv.close()


def test_a_kvsname_whose_shared_memory_is_left_gets_a_new_name(tmp_path):
    """A run killed before MPI_Finalize leaves /dev/shm/mpich_shm_<world id>_<node>; a new job
    of the same name would open it and fail in MPI_Init (UCX: "failed to unpack address") --
    or share another user's planted file -- so add_job serves the job under a fresh name
    (tests/agent/test_pmi_attacks.py: the attack)."""
    kvs = _kvs("stale")
    path = f"{pmi.SHM_DIR}/mpich_shm_{pmi.mpich_world_id(kvs):x}_0"
    Path(path).write_bytes(b"left by a killed run")
    srv = PmiServer()
    try:
        job = srv.add_job(kvs, 1, [0])
        assert (
            job.kvsname == kvs and job.name.startswith(kvs + ".") and len(job.name) == len(kvs) + 33
        ), job.name
        assert not any(os.path.lexists(p) for p in job.shm_paths())
    finally:
        srv.close()
        os.unlink(path)


def test_rank_environment_drops_another_managers_variables():
    srv = PmiServer()
    job = srv.add_job(_kvs("env"), 2, [0, 1])
    base = {
        "PATH": "/bin",
        "PMI_PORT": "h:1",
        "PMI_ID": "3",
        "PMIX_NAMESPACE": "x",
        "PMI_HOSTNAME": "10.0.0.9",
        "PMI_RANK": "7",
        "KEEP": "1",
    }
    env = pmi.rank_environment(base, job, 1)
    assert env == {
        "PATH": "/bin",
        "KEEP": "1",
        "PMI_FD": str(job.rank_fds[1]),
        "PMI_RANK": "1",
        "PMI_SIZE": "2",
        "PMI_JOBID": job.kvsname,
    }
    job.close_rank_fds()
    with pytest.raises(ValueError, match="released"):
        job.env(0)
    assert job.env(0, fd=3)["PMI_FD"] == "3"
    srv.close()


# -- through the Rust core: the path node executors take ----------------------------------------


def _spawn_core(owner, core, server, kvsname, size, local, argv, outdir, **kw):
    """The ranks of one job on one server, spawned by the Rust core (one batch): each holds
    its end as descriptor pmi.RANK_FD (the spec's pass_fd) and PMI_FD says so."""
    job = server.add_job(kvsname, size, local, **kw)
    owner.jobs.setdefault(kvsname, []).append(job)
    # (pytest holds descriptors 3 and up: the ends are elsewhere, so the core moves them)
    assert all(fd != pmi.RANK_FD for fd in job.rank_fds.values())
    specs = []
    for r in job.ranks:
        fd, env = pmi.core_rank(job, r)
        specs.append(
            (
                r,
                argv,
                [f"{k}={v}" for k, v in env.items()],
                None,
                str(outdir / f"{kvsname}.{r}.out"),
                None,
                False,
                fd,
            )
        )
    try:
        out = core.spawn_batch(specs)
    finally:
        job.close_rank_fds()
    assert all(pid > 0 for pid, _ in out), out
    return job, [pid for pid, _ in out]


def _serve_core(owner, core, pids, timeout=TIMEOUT) -> dict[int, int]:
    """Serve the owner's servers until the core has reaped every one of `pids`: {rank: exit
    code} (the spawn keys are the ranks). What still runs at the timeout is killed."""
    codes: dict[int, int] = {}
    sel = select.epoll()
    by_fd = {s.fileno(): s for s in owner.servers}
    for fd in (*by_fd, core.notify_fd):
        sel.register(fd, select.EPOLLIN)
    end = time.monotonic() + timeout
    try:
        while len(codes) < len(pids):
            left = end - time.monotonic()
            if left <= 0:
                core.kill(pids, signal.SIGKILL)
                pytest.fail(
                    f"ranks still running after {timeout} s: done {codes}, events {owner.events}"
                )
            for fd, _ in sel.poll(min(left, 1.0)):
                if fd in by_fd:
                    by_fd[fd].poll(0)
            for key, pid, code, *_ in core.reap():
                if pid in pids:
                    codes[key] = code
            for s in owner.servers:
                s.poll(0)
    finally:
        sel.close()
    return codes


@pytest.mark.mpi
@pytest.mark.parametrize("layout", [[0, 0], [0, 1]], ids=["one-node", "two-nodes"])
def test_a_world_forms_from_ranks_the_rust_core_spawns(owner, mpi_hello, tmp_path, layout):
    """A real MPICH world of 2 ranks, each spawned by `_core.Executor` with its socketpair
    end passed as descriptor 3 (PMI_FD=3), no subprocess and no launcher: on one server, and
    on two (the owner merging their fences, as the agent will for two node executors)."""
    from pilotfish._core import Executor

    kvs = _kvs("core" + "".join(map(str, layout)))
    base = pmi.clean_environment(os.environ)
    core = Executor(base_env=[f"{k}={v}" for k, v in base.items()])
    servers = [owner.server() for _ in set(layout)]
    pids, jobs = [], []
    for i, s in enumerate(servers):
        job, p = _spawn_core(
            owner,
            core,
            s,
            kvs,
            2,
            [r for r in range(2) if layout[r] == i],
            [mpi_hello],
            tmp_path,
            node_of_rank=layout,
        )
        jobs.append(job)
        pids += p
    assert _serve_core(owner, core, pids) == {0: 0, 1: 0}, owner.events
    assert owner.events == []
    for r, words in enumerate(_lines(tmp_path, kvs, 2)):
        assert words == ["rank", str(r), "size", "2", "host", HOST, "sum", "1"]
    assert all(j.finished and not j.not_inited() for j in jobs)
    per: dict[int, list[int]] = {}  # one on_fence per server per epoch
    for k, e, s in owner.fences:
        per.setdefault(e, []).append(s)
    assert per and all(sorted(v) == list(range(len(servers))) for v in per.values()), per
    for j in jobs:
        j.close()
    _no_shm_left(jobs)


def test_core_rank_names_descriptor_3():
    srv = PmiServer()
    job = srv.add_job(_kvs("corerank"), 2, [0, 1])
    fd, env = pmi.core_rank(job, 1)
    assert fd == job.rank_fds[1] and env["PMI_FD"] == "3" == str(pmi.RANK_FD)
    assert (env["PMI_RANK"], env["PMI_SIZE"]) == ("1", "2")
    job.close_rank_fds()
    with pytest.raises(ValueError, match="released"):
        pmi.core_rank(job, 0)
    with pytest.raises(ValueError, match="not a local rank"):
        pmi.core_rank(job, 5)
    srv.close()
