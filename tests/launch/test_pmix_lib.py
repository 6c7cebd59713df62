"""A PMIx server per node, fences across them (agent/pmix_lib.py; issue 51 item 2 across
hosts, its server side): each "node" is a process of its own with its own OpenPMIx server
(tests/launch/pmix_node.py) serving its ranks of one world; the test plays the agent --
when every node's server reports a fence with its ranks' blob, each gets the union, node
by node in node order. Real Open MPI ranks (the C world against libmpi.so.40) form ONE world
across the servers: size, distinct ranks, an allreduce. The official Python binding cannot
do this (agent/pmix_lib.py says why): its fence copies the binary blob with strdup."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mpi_programs import build_ompi_hello

from pilotfish.agent.pmix_lib import load

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(load() is None, reason="needs libpmix.so.2 (package libpmix2)"),
]

NODE = Path(__file__).resolve().parent / "pmix_node.py"


@pytest.fixture(scope="module")
def ompi(tmp_path_factory) -> str:
    return build_ompi_hello(tmp_path_factory)


def run_world(nodes: list[str], argv: list[str], log: Path) -> tuple[dict, str, int]:
    """(each node's rank exit codes, every rank's output, fences relayed)."""
    order = list(dict.fromkeys(nodes))
    err = log.open("w")
    servers = {
        n: subprocess.Popen(
            [sys.executable, str(NODE), n, ",".join(nodes), "pf.test.world", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        for n in order
    }
    lock = threading.Lock()
    seen = dict.fromkeys(order, 0)
    fences: dict[int, dict[str, tuple[int, str]]] = {}
    rcs: dict[str, list[int]] = {}

    def pump(n: str) -> None:
        for line in servers[n].stdout:  # type: ignore[union-attr]
            m = json.loads(line)
            if "rcs" in m:
                rcs[n] = m["rcs"]
                continue
            with lock:
                f = fences.setdefault(seen[n], {})
                seen[n] += 1
                f[n] = (m["fence"], m["blob"])
                if len(f) == len(order):  # every node in: the union, in node order
                    union = "".join(f[x][1] for x in order)
                    for x in order:
                        w = servers[x].stdin
                        w.write(json.dumps({"key": f[x][0], "blob": union}) + "\n")  # type: ignore[union-attr]
                        w.flush()  # type: ignore[union-attr]

    threads = [threading.Thread(target=pump, args=(n,)) for n in order]
    for t in threads:
        t.start()
    for n in order:
        servers[n].wait(timeout=120)
    for t in threads:
        t.join(10)
    err.close()
    return rcs, log.read_text(), len(fences)


@pytest.mark.parametrize("nodes", [["nA", "nB"], ["nA", "nA", "nB", "nB"], ["nA", "nB", "nC"]])
def test_open_mpi_ranks_on_several_servers_form_one_world(ompi, nodes, tmp_path):
    rcs, out, fences = run_world(nodes, [ompi], tmp_path / "ranks.out")
    n = len(nodes)
    assert all(rc == [0] * nodes.count(node) for node, rc in rcs.items()), (rcs, out)
    assert len(rcs) == len(set(nodes)), (rcs, out)
    rows = sorted(
        ln.split()[:4] + ln.split()[-2:] for ln in out.splitlines() if ln.startswith("rank ")
    )
    assert rows == [
        ["rank", str(r), "size", str(n), "sum", str(n * (n - 1) // 2)] for r in range(n)
    ], out
    assert fences >= 2, fences  # (MPI_Init's modex and MPI_Finalize's, at least: across servers)


def test_the_ctypes_layouts_match_the_headers(tmp_path):
    """agent/pmix_lib.py's structures and constants against libpmix-dev's pmix_server.h."""
    import ctypes
    import shutil

    from pilotfish.agent import pmix_lib as L

    inc = Path("/usr/lib/x86_64-linux-gnu/pmix2/include")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not (inc / "pmix_server.h").exists() or cc is None:
        pytest.skip("needs libpmix-dev's headers and a C compiler")
    src = tmp_path / "sz.c"
    src.write_text(
        '#include <stdio.h>\n#include <pmix_server.h>\nint main(void){printf("%zu %zu %zu %d '
        '%d %d %d %d %d %d %d %d %d\\n", sizeof(pmix_proc_t), sizeof(pmix_data_array_t), '
        "sizeof(pmix_server_module_t), PMIX_MAX_NSLEN, PMIX_STRING, PMIX_UINT16, PMIX_UINT32, "
        "PMIX_INFO, PMIX_DATA_ARRAY, PMIX_PROC_RANK, PMIX_REGEX, PMIX_OPERATION_SUCCEEDED, "
        "PMIX_SUCCESS);return 0;}\n"
    )
    exe = tmp_path / "sz"
    subprocess.run([cc, f"-I{inc}", "-o", str(exe), str(src)], check=True, timeout=120)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    want = [
        ctypes.sizeof(L.Proc),
        ctypes.sizeof(L.DataArray),
        ctypes.sizeof(L.Module),
        L.NSLEN,
        L.PMIX_STRING,
        L.PMIX_UINT16,
        L.PMIX_UINT32,
        L.PMIX_INFO,
        L.PMIX_DATA_ARRAY,
        L.PMIX_PROC_RANK,
        L.PMIX_REGEX,
        L.PMIX_OPERATION_SUCCEEDED,
        L.PMIX_SUCCESS,
    ]
    assert [int(x) for x in got] == want


def test_the_rank_spec_marker_is_the_same_on_both_sides():
    from pilotfish.agent.pmix_node import RANK_ARGV0 as node_side
    from pilotfish.launch.pmix import RANK_ARGV0 as agent_side

    assert node_side == agent_side
