"""The OpenPMIx server of one host (agent/pmix_server.py) on its own, outside any agent: it
registers a world, its ranks -- real Open MPI programs spawned with the environment it gives
-- form ONE world (size 2, distinct ranks, an allreduce across them), and what it refuses.
The launch method `pmix` end to end on a local pilot: tests/launch/test_pmix_launch.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mpi_programs import OPENMPI_LIB, build_ompi_hello

from pilotfish.launch import LaunchError
from pilotfish.launch.mpirun import MCA_DEFAULTS, openmpi_env
from pilotfish.launch.pmix import PmixHelper, available

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not available(), reason="needs libpmix2 (OpenPMIx)"),
]

VENV = Path(sys.prefix)
PY = str(VENV / "bin" / "python")
MPI4PY = (
    "from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "print(f'rank {c.rank} size {c.size} sum {c.allreduce(c.rank)}', flush=True)"
)


@pytest.fixture(scope="module")
def ompi(tmp_path_factory) -> str:
    return build_ompi_hello(tmp_path_factory)


@pytest.fixture
def helper(tmp_path):
    h = PmixHelper(str(tmp_path / "pmix"), str(tmp_path / "pmix.log"))
    deadline = time.monotonic() + 30
    while not h.poll():
        assert time.monotonic() < deadline, (tmp_path / "pmix.log").read_text()
        time.sleep(0.01)
    yield h
    h.close()
    assert h.proc.returncode == 0, (tmp_path / "pmix.log").read_text()


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMIX_", "OMPI_", "PRTE_"))}
    env.update(MCA_DEFAULTS)
    env.update(openmpi_env(str(VENV / "bin" / "prterun")))
    return env


def _run_world(envs: list[dict[str, str]], argv: list[str], extra=None) -> list[tuple[int, str]]:
    procs = [
        subprocess.Popen(
            argv,
            env={**_base_env(), **(extra or {}), **e},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for e in envs
    ]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=60)
        out.append((p.returncode, o + e))
    return out


def test_two_open_mpi_c_ranks_form_one_world(helper, ompi):
    envs = helper.register("pf.test.c", 2, "localhost", 10)
    assert [e["PMIX_RANK"] for e in envs] == ["0", "1"]
    assert {e["PMIX_NAMESPACE"] for e in envs} == {"pf.test.c"}
    res = _run_world(envs, [ompi])
    assert [rc for rc, _ in res] == [0, 0], res
    lines = sorted(
        ln.split()[:4] + ln.split()[-2:]
        for _, o in res
        for ln in o.splitlines()
        if ln.startswith("rank")
    )
    assert lines == [["rank", "0", "size", "2", "sum", "1"], ["rank", "1", "size", "2", "sum", "1"]]
    helper.drop("pf.test.c")


def test_mpi4py_ranks_form_one_world_and_worlds_stay_apart(helper):
    a = helper.register("pf.test.a", 2, "localhost", 10)
    b = helper.register("pf.test.b", 3, "localhost", 10)
    lib = {"MPI4PY_LIBMPI": str(OPENMPI_LIB)}
    ra = _run_world(a, [PY, "-c", MPI4PY], lib)
    rb = _run_world(b, [PY, "-c", MPI4PY], lib)
    assert sorted(o.strip() for _, o in ra) == ["rank 0 size 2 sum 1", "rank 1 size 2 sum 1"], ra
    assert sorted(o.strip() for _, o in rb) == [f"rank {r} size 3 sum 3" for r in range(3)], rb


def test_a_rank_naming_a_namespace_not_registered_does_not_join(helper, ompi):
    """The namespace is the capability: a process that knows the server's address but not a
    registered namespace (here: a guessed one) is refused at its connection (Open MPI then
    falls back to a singleton of its own and fails): it never joins the world, and the
    server still serves the registered one."""
    envs = helper.register("pf.test.real", 2, "localhost", 10)
    forged = dict(envs[0], PMIX_NAMESPACE="pf.test.guess")
    ((rc, out),) = _run_world([forged], [ompi])
    assert rc != 0, out
    assert "size 2" not in out, out
    res = _run_world(envs, [ompi])
    assert [rc for rc, _ in res] == [0, 0], res
    assert all("size 2" in o for _, o in res), res


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"ns": "has space", "size": 2}, "ns="),
        ({"ns": "pf.x", "size": 0}, "size=0"),
        ({"ns": "pf.x", "size": True}, "size=True"),
        ({"ns": "pf.x", "size": 2, "host": "a;b"}, "host="),
    ],
)
def test_bad_requests_are_refused_naming_the_field(helper, bad, field):
    import json

    req = {"op": "register", "host": "localhost", **bad}
    helper.sock.sendall(json.dumps(req).encode() + b"\n")
    msg = helper._read(10)
    assert msg is not None and field in msg["error"], msg
    # and the server still answers
    assert len(helper.register("pf.test.after", 1, "localhost", 10)) == 1


def test_a_namespace_twice_is_refused(helper):
    helper.register("pf.test.twice", 1, "localhost", 10)
    with pytest.raises(LaunchError, match="already registered"):
        helper.register("pf.test.twice", 1, "localhost", 10)


@pytest.fixture
def two_servers(tmp_path):
    """Two server processes: the agent's (the relay) and a node executor's."""
    hs = []
    for name in ("agent", "node"):
        h = PmixHelper(str(tmp_path / name), str(tmp_path / f"{name}.log"))
        deadline = time.monotonic() + 30
        while not h.poll():
            assert time.monotonic() < deadline, (tmp_path / f"{name}.log").read_text()
            time.sleep(0.01)
        hs.append(h)
    yield hs
    for h in hs:
        h.close()


@pytest.mark.parametrize("nodes", [["nA", "nB"], ["nA", "nA", "nB", "nB"], ["nB", "nA", "nB"]])
def test_a_world_across_two_servers_fences_through_the_relay(two_servers, ompi, nodes):
    """The agent's server relays the fences of a world whose ranks two servers serve (as
    across hosts: agent/pmix_relay.py); the ranks form one world."""
    agent, node = two_servers
    relay = agent.request({"op": "listen", "host": "127.0.0.1"}, 10)
    assert set(relay) == {"relay", "token"}, relay
    ns = "pf.test.span"
    mine_a = [r for r, n in enumerate(nodes) if n == "nA"]
    mine_b = [r for r, n in enumerate(nodes) if n == "nB"]
    envs_a = agent.register_world({"ns": ns, "nodes": nodes, "here": "nA"}, len(mine_a), 10)
    envs_b = node.register_world({"ns": ns, "nodes": nodes, "here": "nB", **relay}, len(mine_b), 10)
    res = _run_world(envs_a + envs_b, [ompi], {"OMPI_MCA_btl_tcp_if_include": "lo"})
    assert [rc for rc, _ in res] == [0] * len(nodes), res
    n = len(nodes)
    rows = sorted(r.split()[:4] for _, o in res for r in o.splitlines() if r.startswith("rank"))
    assert rows == [["rank", str(r), "size", str(n)] for r in range(n)], res
    assert all(f"sum {n * (n - 1) // 2}" in o for _, o in res), res
    agent.drop(ns)
    node.drop(ns)


def test_the_relay_closes_a_connection_without_the_token(two_servers, ompi):
    """Someone who reaches the relay's port but has not the pilot's token is closed at its
    first line; the world that has it is not disturbed."""
    import json
    import socket

    agent, node = two_servers
    relay = agent.request({"op": "listen", "host": "127.0.0.1"}, 10)
    host, _, port = relay["relay"].rpartition(":")
    intruder = socket.create_connection((host, int(port)), timeout=10)
    intruder.sendall(json.dumps({"token": "00" * 16, "node": "nB"}).encode() + b"\n")
    intruder.sendall(json.dumps({"fence": "pf.test.x", "seq": 0, "blob": ""}).encode() + b"\n")
    assert intruder.recv(100) == b""  # closed
    ns = "pf.test.after"
    (ea,) = agent.register_world({"ns": ns, "nodes": ["nA", "nB"], "here": "nA"}, 1, 10)
    (eb,) = node.register_world({"ns": ns, "nodes": ["nA", "nB"], "here": "nB", **relay}, 1, 10)
    res = _run_world([ea, eb], [ompi], {"OMPI_MCA_btl_tcp_if_include": "lo"})
    assert [rc for rc, _ in res] == [0, 0], res
