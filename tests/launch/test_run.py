"""Built commands really run: direct ProcSpecs, the /bin/sh wrapper, the per-rank prelude."""

from __future__ import annotations

import os
import subprocess
import sys

from launch_cases import EMULATED, UID
from pilotfish._wire import RankSlot, TaskSpec
from pilotfish.launch import get_launcher, payload_argv
from pilotfish.launch.base import RANK_TABLE_LIMIT, rank_wrapped

SLOTS = [RankSlot("node0000", 0, (0, 1), (0,)), RankSlot("node0001", 1, (2, 3), ())]
SHOW = 'echo "$PILOTFISH_RANK/$PILOTFISH_RANKS $PILOTFISH_NODE $PILOTFISH_NODE_INDEX ' \
       '$PILOTFISH_CORES [$CUDA_VISIBLE_DEVICES] $OMP_NUM_THREADS $PILOTFISH_NODELIST $MODE"'
EXPECTED = ["0/2 node0000 0 0,1 [0] 2 node0000,node0001 x",
            "1/2 node0001 1 2,3 [] 2 node0000,node0001 x"]


def run(argv, env, cwd, extra=None):
    # the agent's environment underneath, less anything placement must decide
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PILOTFISH_", "CUDA_VISIBLE_DEVICES", "PMIX_RANK", "SLURM_"))}
    full.update(env)
    full.update(extra or {})
    return subprocess.run(argv, env=full, cwd=cwd, capture_output=True, text=True, timeout=30)


def test_direct_procspecs_run(tmp_path):
    task = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", SHOW], ranks=2,
                    cores_per_rank=2, environment={"MODE": "x", "PILOTFISH_RANK": "ignored"})
    procs = get_launcher("direct", EMULATED).build(task, SLOTS, str(tmp_path))
    out = [run(p.argv, p.env, tmp_path).stdout.strip() for p in procs]
    assert out == EXPECTED  # placement wins over the task's own PILOTFISH_RANK


def test_shell_wrapper_keeps_exit_code_and_runs_post_exec(tmp_path):
    task = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", "echo main $X; exit 7"],
                    pre_exec=["export X=from-pre", "echo pre"],
                    post_exec=["echo post $X > post.txt"])
    argv = payload_argv(task)
    assert argv[:2] == ["/bin/sh", "-c"]
    r = run(argv, {}, tmp_path)
    assert r.returncode == 7
    assert r.stdout == "pre\nmain from-pre\n"
    assert (tmp_path / "post.txt").read_text() == "post from-pre\n"


def test_shell_true_exit_cannot_skip_post_exec(tmp_path):
    task = TaskSpec(uid=UID, executable="echo $((2 + 3)) | cat; exit 5", shell=True,
                    post_exec=["touch post-ran"])
    r = run(payload_argv(task), {}, tmp_path)
    assert (r.returncode, r.stdout) == (5, "5\n")
    assert (tmp_path / "post-ran").exists()


def test_arguments_survive_the_shell_unchanged(tmp_path):
    args = ["a b", "$HOME", "it's", '"q"', "*", "x;y", ""]
    task = TaskSpec(uid=UID, executable=sys.executable,
                    arguments=["-c", "import sys; print(repr(sys.argv[1:]))", *args],
                    pre_exec=["true"])
    r = run(payload_argv(task), {}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr(args)


def test_plain_task_needs_no_shell():
    task = TaskSpec(uid=UID, executable="/bin/true", arguments=["a b"])
    assert payload_argv(task) == ["/bin/true", "a b"]


def test_rank_prelude_gives_each_rank_its_placement(tmp_path):
    """What an MPI launcher's ranks see: the launcher sets its rank variable, the prelude
    exports the rank's own values (here PMIX_RANK stands in for mpirun)."""
    task = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", SHOW], ranks=2,
                    cores_per_rank=2, environment={"MODE": "x"})
    argv, placement = rank_wrapped(task, SLOTS, "${PMIX_RANK:-}")
    env = {**task.environment, "OMP_NUM_THREADS": "2", **placement}
    out = [run(argv, env, tmp_path, {"PMIX_RANK": str(r)}).stdout.strip() for r in (0, 1)]
    assert out == EXPECTED


def test_rank_prelude_with_pre_and_post_exec(tmp_path):
    task = TaskSpec(uid=UID, executable="/bin/sh", arguments=["-c", "exit 3"], ranks=2,
                    pre_exec=["echo pre $PILOTFISH_CORES"], post_exec=["echo post"])
    argv, placement = rank_wrapped(task, SLOTS, "${SLURM_PROCID:-}")
    r = run(argv, placement, tmp_path, {"SLURM_PROCID": "1"})
    assert (r.returncode, r.stdout) == (3, "pre 2,3\npost\n")


def test_huge_tasks_drop_the_table_but_still_run(tmp_path):
    n = RANK_TABLE_LIMIT // 40
    slots = [RankSlot(f"node{i:05d}", i, (i % 64,), ()) for i in range(n)]
    task = TaskSpec(uid=UID, executable="/bin/sh",
                    arguments=["-c", 'echo "$PILOTFISH_RANK:$PILOTFISH_CORES"'], ranks=n)
    argv, placement = rank_wrapped(task, slots, "${PMIX_RANK:-}")
    assert len(argv[2]) < RANK_TABLE_LIMIT and "case" not in argv[2]
    r = run(argv, placement, tmp_path, {"PMIX_RANK": "5"})
    assert r.stdout == "5:\n"
