"""The four tasks every launcher's golden test builds, and the resources they run on."""

from __future__ import annotations

from pilotfish._wire import NodeInfo, RankSlot, TaskSpec
from pilotfish.agent.resources import Resources

UID = "task.000042"

NODES = [NodeInfo("nid001", 4, 0, 1024), NodeInfo("nid002", 4, 0, 1024),
         NodeInfo("gpu01", 2, 2, 1024)]
SLURM = Resources(NODES, "slurm")
EMULATED = Resources([NodeInfo(f"node{i:04d}", 4, 2, 0) for i in range(3)], "declared")

# 1. one rank, one core
ONE = TaskSpec(uid=UID, executable="/bin/hostname")
ONE_SLOTS = [RankSlot("nid001", 0, (3,), ())]

# 2. four ranks x two cores over two nodes
FOUR = TaskSpec(uid=UID, executable="/bin/hostname", ranks=4, cores_per_rank=2)
FOUR_SLOTS = [RankSlot("nid001", 0, (0, 1), ()), RankSlot("nid001", 0, (2, 3), ()),
              RankSlot("nid002", 1, (0, 1), ()), RankSlot("nid002", 1, (2, 3), ())]

# 3. two ranks with a GPU each on one node
GPU = TaskSpec(uid=UID, executable="./train", arguments=["--epochs", "3"], ranks=2,
               gpus_per_rank=1)
GPU_SLOTS = [RankSlot("gpu01", 2, (0,), (0,)), RankSlot("gpu01", 2, (1,), (1,))]

# 4. pre_exec / post_exec around a plain command with an argument that needs quoting
SHELL = TaskSpec(uid=UID, executable="python3", arguments=["sim.py", "a b"],
                 environment={"MODE": "fast", "OMP_NUM_THREADS": "1"},
                 pre_exec=["module load foo"], post_exec=["echo done"])
SHELL_SLOTS = [RankSlot("nid002", 1, (1,), ())]

SHELL_SCRIPT = "module load foo\npython3 sim.py 'a b'\n_pf_rc=$?\necho done\nexit $_pf_rc"

# what rank_wrapped makes of FOUR: the variables that differ per rank come from a table
FOUR_TABLE = (
    'case "$PILOTFISH_RANK" in\n'
    "0) export PILOTFISH_NODE=nid001 PILOTFISH_NODE_INDEX=0 PILOTFISH_CORES=0,1;;\n"
    "1) export PILOTFISH_NODE=nid001 PILOTFISH_NODE_INDEX=0 PILOTFISH_CORES=2,3;;\n"
    "2) export PILOTFISH_NODE=nid002 PILOTFISH_NODE_INDEX=1 PILOTFISH_CORES=0,1;;\n"
    "3) export PILOTFISH_NODE=nid002 PILOTFISH_NODE_INDEX=1 PILOTFISH_CORES=2,3;;\n"
    "esac\n")


def four_payload(rank_expr: str) -> list[str]:
    return ["/bin/sh", "-c",
            f'PILOTFISH_RANK="{rank_expr}"\nexport PILOTFISH_RANK\n{FOUR_TABLE}exec /bin/hostname']


def gpu_payload(rank_expr: str, with_cuda: bool) -> list[str]:
    cvd0 = " CUDA_VISIBLE_DEVICES=0" if with_cuda else ""
    cvd1 = " CUDA_VISIBLE_DEVICES=1" if with_cuda else ""
    script = (f'PILOTFISH_RANK="{rank_expr}"\nexport PILOTFISH_RANK\n'
              'case "$PILOTFISH_RANK" in\n'
              f"0) export PILOTFISH_CORES=0 PILOTFISH_GPUS=0{cvd0};;\n"
              f"1) export PILOTFISH_CORES=1 PILOTFISH_GPUS=1{cvd1};;\n"
              "esac\n"
              "exec ./train --epochs 3")
    return ["/bin/sh", "-c", script]


# placement shared by all ranks, as launchers that start all ranks at once export it
ONE_ENV = {"OMP_NUM_THREADS": "1", "PILOTFISH_TASK_UID": UID, "PILOTFISH_RANKS": "1",
           "PILOTFISH_NODELIST": "nid001", "PILOTFISH_RANK": "0", "PILOTFISH_NODE": "nid001",
           "PILOTFISH_NODE_INDEX": "0", "PILOTFISH_CORES": "3", "PILOTFISH_GPUS": "",
           "CUDA_VISIBLE_DEVICES": ""}
FOUR_ENV = {"OMP_NUM_THREADS": "2", "PILOTFISH_TASK_UID": UID, "PILOTFISH_RANKS": "4",
            "PILOTFISH_NODELIST": "nid001,nid002", "PILOTFISH_GPUS": "",
            "CUDA_VISIBLE_DEVICES": ""}
GPU_ENV = {"OMP_NUM_THREADS": "1", "PILOTFISH_TASK_UID": UID, "PILOTFISH_RANKS": "2",
           "PILOTFISH_NODELIST": "gpu01", "PILOTFISH_NODE": "gpu01",
           "PILOTFISH_NODE_INDEX": "2"}
SHELL_ENV = {"MODE": "fast", "OMP_NUM_THREADS": "1", "PILOTFISH_TASK_UID": UID,
             "PILOTFISH_RANKS": "1", "PILOTFISH_NODELIST": "nid002", "PILOTFISH_RANK": "0",
             "PILOTFISH_NODE": "nid002", "PILOTFISH_NODE_INDEX": "1", "PILOTFISH_CORES": "1",
             "PILOTFISH_GPUS": "", "CUDA_VISIBLE_DEVICES": ""}
