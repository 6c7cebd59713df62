"""Resource discovery against real-world batch-system strings."""

from __future__ import annotations

import socket

import pytest
from pilotfish._util import machine_shape
from pilotfish._wire import NodeInfo
from pilotfish.agent.resources import Resources, discover, expand_counts, expand_hostlist

CORES, GPUS, MEM = machine_shape()


# -- compressed host lists ------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("n1", ["n1"]),
    ("nid[001-004,010]", ["nid001", "nid002", "nid003", "nid004", "nid010"]),
    ("frontier[00001-00004]", [f"frontier0000{i}" for i in range(1, 5)]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("n1,n[3-5],login-7", ["n1", "n3", "n4", "n5", "login-7"]),
    ("n[08-10]", ["n08", "n09", "n10"]),                  # width of the low bound kept
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("rack[1-2]-node[1,3]-ib", ["rack1-node1-ib", "rack1-node3-ib", "rack2-node1-ib",
                                "rack2-node3-ib"]),
    ("nid[00012-00013],nid00100", ["nid00012", "nid00013", "nid00100"]),   # Cray
    ("cn[7]", ["cn7"]),
    ("node-1.cluster,gpu[1-2].cluster", ["node-1.cluster", "gpu1.cluster", "gpu2.cluster"]),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, why", [
    ("", "empty node list"),
    ("   ", "empty node list"),
    ("nid[001-004", "unclosed"),
    ("nid001-004]", "unmatched"),
    ("nid[4-1]", "backwards"),
    ("nid[a-b]", "bad range"),
    ("nid[]", "bad range"),
    ("nid[1-2,]", "bad range"),
    ("n1,,n2", "empty host name"),
    ("n[[1-2]]", "nested"),
    ("n[0-99999999]", "more than"),
    ("n 1", "bad host name"),
])
def test_expand_hostlist_errors_name_the_variable_and_value(text, why):
    with pytest.raises(ValueError, match=why) as e:
        expand_hostlist(text, "SLURM_JOB_NODELIST")
    assert str(e.value).startswith(f"SLURM_JOB_NODELIST = {text!r}")


def test_expand_counts():
    assert expand_counts("64(x4),32") == [64, 64, 64, 64, 32]
    assert expand_counts("128") == [128]
    assert expand_counts("2(x2),1,4(x1)") == [2, 2, 1, 4]
    with pytest.raises(ValueError, match="SLURM_JOB_CPUS_PER_NODE = '64x4'"):
        expand_counts("64x4", "SLURM_JOB_CPUS_PER_NODE")


# -- local and emulated -----------------------------------------------------------------------

def test_local_defaults_to_this_machine():
    r = discover("local", None, None, None, None)
    assert r == Resources([NodeInfo(socket.gethostname(), CORES, GPUS, MEM)], "local")
    assert r.emulated


def test_local_smaller_than_this_machine_is_local():
    r = discover("local", 1, 1, 0, 1)
    assert (r.source, r.nodes[0].name, r.nodes[0].cores, r.overrides) == \
        ("local", socket.gethostname(), 1, ("cores", "gpus", "mem"))


def test_larger_or_more_nodes_is_an_emulated_machine():
    r = discover("local", 3, 128, 4, 512_000)
    assert r.source == "declared" and r.emulated
    assert r.nodes == [NodeInfo(f"node000{i}", 128, 4, 512_000) for i in range(3)]
    assert discover("local", 2, None, None, None).nodes[1] == NodeInfo("node0001", CORES, GPUS, MEM)
    assert discover("local", 1, CORES + 1, None, None).source == "declared"
    assert discover("local", 1, None, GPUS + 1, None).source == "declared"


# -- Slurm ------------------------------------------------------------------------------------

def test_slurm_cray_nodes_with_per_node_cpus():
    env = {"SLURM_JOB_NODELIST": "nid[001-004,010]", "SLURM_JOB_CPUS_PER_NODE": "64(x4),32",
           "SLURM_MEM_PER_NODE": "240000", "SLURM_GPUS_ON_NODE": "4"}
    r = discover("slurm", None, None, None, None, env=env)
    assert r.source == "slurm" and not r.emulated and r.overrides == ()
    assert r.nodes == [NodeInfo("nid001", 64, 4, 240000), NodeInfo("nid002", 64, 4, 240000),
                       NodeInfo("nid003", 64, 4, 240000), NodeInfo("nid004", 64, 4, 240000),
                       NodeInfo("nid010", 32, 4, 240000)]


def test_slurm_frontier_like():
    env = {"SLURM_JOB_NODELIST": "frontier[00001-00004]", "SLURM_CPUS_ON_NODE": "56",
           "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURM_MEM_PER_NODE": "512000"}
    r = discover("slurm", None, None, None, None, env=env)
    assert [n.name for n in r.nodes] == [f"frontier0000{i}" for i in range(1, 5)]
    assert {(n.cores, n.gpus, n.mem) for n in r.nodes} == {(56, 8, 512000)}


def test_slurm_fallbacks_and_older_variable():
    env = {"SLURM_NODELIST": "n[1-2]", "CUDA_VISIBLE_DEVICES": "0,1"}
    r = discover("slurm", None, None, None, None, env=env)
    assert r.nodes == [NodeInfo("n1", CORES, 2, MEM), NodeInfo("n2", CORES, 2, MEM)]


def test_slurm_declared_shape_overrides_and_nodes_truncates():
    env = {"SLURM_JOB_NODELIST": "n[1-4]", "SLURM_JOB_CPUS_PER_NODE": "2(x4)"}
    r = discover("slurm", 3, 64, 8, None, env=env)
    assert r.nodes == [NodeInfo(f"n{i}", 64, 8, MEM) for i in (1, 2, 3)]
    assert r.overrides == ("cores", "gpus")
    with pytest.raises(ValueError, match="5 nodes requested but slurm gives 4"):
        discover("slurm", 5, None, None, None, env=env)


@pytest.mark.parametrize("env, message", [
    ({}, "SLURM_JOB_NODELIST is not set"),
    ({"SLURM_JOB_NODELIST": ""}, "SLURM_JOB_NODELIST = '': empty node list"),
    ({"SLURM_JOB_NODELIST": "nid[01-"}, r"SLURM_JOB_NODELIST = 'nid\[01-': unclosed"),
    ({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)"},
     "describes 2 nodes but SLURM_JOB_NODELIST has 3"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_ON_NODE": "lots"},
     "SLURM_CPUS_ON_NODE = 'lots': not an integer"),
])
def test_slurm_errors(env, message):
    with pytest.raises(ValueError, match=message):
        discover("slurm", None, None, None, None, env=env)


# -- PBS ----------------------------------------------------------------------------------------

def test_pbs_nodefile_counts_slots(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x1001\nx1001\nx1001\nx1002\nx1002\nx1002\n")
    r = discover("pbs", None, None, None, None, env={"PBS_NODEFILE": str(nodefile)})
    assert (r.source, [(n.name, n.cores) for n in r.nodes]) == ("pbs", [("x1001", 3), ("x1002", 3)])


def test_pbs_cores_from_ppn_or_ncpus(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x3001.hsn.polaris\nx3002.hsn.polaris\n")  # one line per mpiproc
    env = {"PBS_NODEFILE": str(nodefile), "NCPUS": "64"}
    assert [n.cores for n in discover("pbs", None, None, None, None, env=env).nodes] == [64, 64]
    env["PBS_NUM_PPN"] = "32"
    assert [n.cores for n in discover("pbs", None, None, None, None, env=env).nodes] == [32, 32]


def test_pbs_errors(tmp_path):
    with pytest.raises(ValueError, match="PBS_NODEFILE is not set"):
        discover("pbs", None, None, None, None, env={})
    missing = str(tmp_path / "gone")
    with pytest.raises(ValueError, match=f"PBS_NODEFILE = '{missing}': cannot read"):
        discover("pbs", None, None, None, None, env={"PBS_NODEFILE": missing})
    (tmp_path / "empty").write_text("\n\n")
    with pytest.raises(ValueError, match="no hosts"):
        discover("pbs", None, None, None, None, env={"PBS_NODEFILE": str(tmp_path / "empty")})


# -- LSF ------------------------------------------------------------------------------------------

def test_lsf_summit_keeps_the_batch_node_first():
    env = {"LSB_MCPU_HOSTS": "batch3 1 a01n01 42 a01n02 42"}
    r = discover("lsf", None, None, None, None, env=env)
    assert r.source == "lsf"
    assert [(n.name, n.cores) for n in r.nodes] == [("batch3", 1), ("a01n01", 42), ("a01n02", 42)]


def test_lsf_djob_hostfile(tmp_path):
    hostfile = tmp_path / "djob"
    hostfile.write_text("batch1\n" + "h1\n" * 4 + "h2\n" * 4)
    r = discover("lsf", None, None, None, None, env={"LSB_DJOB_HOSTFILE": str(hostfile)})
    assert [(n.name, n.cores) for n in r.nodes] == [("batch1", 1), ("h1", 4), ("h2", 4)]


@pytest.mark.parametrize("value, why", [
    ("", "expected pairs"), ("h1 4 h2", "expected pairs"), ("h1 four", "is not a number")])
def test_lsf_errors(value, why):
    with pytest.raises(ValueError, match=f"LSB_MCPU_HOSTS = {value!r}: .*{why}"):
        discover("lsf", None, None, None, None, env={"LSB_MCPU_HOSTS": value})


# -- host files -----------------------------------------------------------------------------------

def test_hostfile_formats(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the machine\n"
                        "n1 slots=4 max_slots=8\n"
                        "n2:2\n"
                        "n3\nn3   # two lines, two slots\n"
                        "\n"
                        "n1 slots=4\n")
    r = discover("local", None, None, 1, None, hostfile=str(hostfile))
    assert r.source == "hostfile" and not r.emulated
    assert [(n.name, n.cores, n.gpus) for n in r.nodes] == [("n1", 8, 1), ("n2", 2, 1), ("n3", 2, 1)]


def test_hostfile_errors(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=many\n")
    with pytest.raises(ValueError, match="hosts:1: bad slots"):
        discover("slurm", None, None, None, None, hostfile=str(hostfile))
    hostfile.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no hosts"):
        discover("slurm", None, None, None, None, hostfile=str(hostfile))


def test_unknown_and_flux():
    with pytest.raises(ValueError, match="unknown resource 'cloud'"):
        discover("cloud", None, None, None, None, env={})
    with pytest.raises(ValueError, match="hostfile"):
        discover("flux", None, None, None, None, env={})
