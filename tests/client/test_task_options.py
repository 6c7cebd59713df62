"""What RADICAL-Pilot users expect of a task's surroundings, end to end on real local pilots:
an MPI launcher for multi-rank tasks, named environments, tarball staging, output staging of
failed tasks only when asked, and the TaskManager's routing policies."""

from __future__ import annotations

import os

import pytest

import pilotfish as pf
from pilotfish.launch import installed_mpi_launcher

MPI = installed_mpi_launcher()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    path = tmp_path_factory.mktemp("options") / "session"
    with pf.Session(path=path) as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(nodes=2, cores_per_node=4,
                                                       runtime="10m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
        yield s, pilot, tmgr


@pytest.mark.mpi
@pytest.mark.skipif(MPI is None, reason="no MPI launcher installed")
def test_multi_rank_task_on_a_local_pilot_gets_an_installed_mpi_launcher(local):
    """ranks > 1 and no launcher named (task or pilot): an installed MPI launcher starts the
    ranks, so they see MPI's rank variables (direct launch gave none) and all their output
    comes back; launcher='direct' still means direct."""
    _, _, tmgr = local
    show = 'echo "rank=$PILOTFISH_RANK mpi=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-none}}"'
    mpi, direct = tmgr.submit_tasks([
        pf.TaskDescription(executable="/bin/sh", ranks=3, arguments=["-c", show]),
        pf.TaskDescription(executable="/bin/sh", ranks=3, arguments=["-c", show],
                           launcher="direct")])
    tmgr.wait_tasks([mpi.uid, direct.uid], timeout=60)
    assert mpi.state == pf.DONE, mpi.reason
    assert sorted(mpi.stdout.split()) == [f"rank={r}" for r in range(3)] + \
        [f"mpi={r}" for r in range(3)] or sorted(mpi.stdout.splitlines()) == \
        [f"rank={r} mpi={r}" for r in range(3)], mpi.stdout
    assert direct.state == pf.DONE
    assert direct.stdout.splitlines() == [f"rank={r} mpi=none" for r in range(3)]


def test_named_environments(local, tmp_path):
    """pilot.prepare_env makes a venv on the pilot (by a task there); tasks naming it run
    activated, after its pre_exec; a 'shell' environment is its pre_exec only. Unknown names
    are rejected at submit; bad specs at prepare_env."""
    _, pilot, tmgr = local
    rec = pilot.prepare_env("ve", {"type": "venv", "pre_exec": ["export FROM_ENV=venv"]})
    assert rec["path"] == os.path.join(pilot.sandbox, "env", "ve")
    pilot.prepare_env("sh", {"type": "shell", "pre_exec": ["export FROM_ENV=shell"]})
    show = 'echo "$FROM_ENV $(python -c "import sys; print(sys.prefix)")"'
    a, b = tmgr.submit_tasks([
        pf.TaskDescription(executable="/bin/sh", arguments=["-c", show], named_env="ve",
                           pre_exec=['test "$FROM_ENV" = venv']),
        pf.TaskDescription(executable="/bin/sh", arguments=["-c", "echo $FROM_ENV"],
                           named_env="sh")])
    tmgr.wait_tasks([a.uid, b.uid], timeout=60)
    assert a.state == pf.DONE, (a.reason, a.stderr)
    assert a.stdout.split() == ["venv", rec["path"]]
    assert b.state == pf.DONE and b.stdout.strip() == "shell"
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", named_env="nope"))
    assert e.value.field == "named_env" and "prepare_env" in str(e.value)
    for name, spec, why in (("a/b", {}, "without '/'"), ("x", {"kind": "venv"}, "unknown keys"),
                            ("x", {"type": "conda"}, "not supported")):
        with pytest.raises(ValueError, match=why):
            pilot.prepare_env(name, spec)
    with pytest.raises(pf.PilotfishError, match="prepare_env 'broken'"):
        pilot.prepare_env("broken", {"python": str(tmp_path / "no-such-python")})


def test_tarball_staging_and_outputs_of_failed_tasks(local, tmp_path):
    """tarball carries a tree as one archive and unpacks it at the target, both ways. A
    FAILED task's outputs are staged only with stage_on_error=True, and its reason stays its
    own failure (a missing output file no longer hides the exit code)."""
    _, _, tmgr = local
    tree = tmp_path / "tree" / "sub"
    tree.mkdir(parents=True)
    (tree / "a.txt").write_text("A\n")
    script = "cat tree/sub/a.txt; mkdir res; echo R > res/r.txt; exit $CODE"
    descs = [pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", script], environment={"CODE": str(code)},
        input_staging=[{"source": str(tmp_path / "tree"), "target": "tree",
                        "action": "tarball"}],
        output_staging=[{"source": "res", "target": str(tmp_path / f"res.{i}"),
                         "action": "tarball"}] + extra,
        stage_on_error=on_error)
        for i, (code, on_error, extra) in enumerate([
            (0, False, []), (3, False, [{"source": "nothing", "target": str(tmp_path / "n")}]),
            (3, True, [{"source": "nothing", "target": str(tmp_path / "n")}])])]
    ok, quiet, staged = tmgr.submit_tasks(descs)
    tmgr.wait_tasks([ok.uid, quiet.uid, staged.uid], timeout=60)
    assert ok.state == pf.DONE, ok.reason
    assert ok.stdout == "A\n" and (tmp_path / "res.0" / "r.txt").read_text() == "R\n"
    assert quiet.state == pf.FAILED and quiet.reason == "exit code 3"
    assert not (tmp_path / "res.1").exists()
    assert staged.state == pf.FAILED and staged.reason.startswith("exit code 3; output staging "
                                                                  "failed too:")
    assert (tmp_path / "res.2" / "r.txt").read_text() == "R\n"
    assert not [f for f in os.listdir(ok.sandbox) if f.startswith(".stage.")]


def test_round_robin_and_backfilling_routing(tmp_path):
    """TaskManager(scheduler='round_robin') deals tasks to the pilots in turn; the default
    ('backfilling') by free capacity; an unknown policy is a ValueError."""
    with pytest.raises(ValueError, match="round_robin"):
        pf.TaskManager(pf.Session(path=tmp_path / "x"), scheduler="random")
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilots = pmgr.submit_pilots([pf.PilotDescription(nodes=1, cores_per_node=c,
                                                         runtime="5m") for c in (1, 3)])
        rr = pf.TaskManager(s, scheduler="round_robin")
        bf = pf.TaskManager(s)
        for tm in (rr, bf):
            tm.add_pilots(pilots)
        for p in pilots:
            assert p.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        descs = [pf.TaskDescription(executable="/bin/true") for _ in range(8)]
        a, b = pilots[0].uid, pilots[1].uid
        assert [t.pilot for t in rr.submit_tasks(descs)] == [a, b] * 4
        assert sorted(t.pilot for t in bf.submit_tasks(descs)) == [a] * 2 + [b] * 6
        rr.wait_tasks(timeout=60)
        bf.wait_tasks(timeout=60)
