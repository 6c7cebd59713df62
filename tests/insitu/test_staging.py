"""In situ staging areas end to end: real staging servers (service-group members), real MPI
clients (mpi4py under the pilot's MPI launcher), resizes between iterations."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import pilotfish as pf
from pilotfish import insitu

from substrate_helpers import python_script, start_pilot  # tests/substrates (on the path: conftest)

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # mpi_sums, for the servers too
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(Path(__file__).resolve().parent)] + os.environ.get("PYTHONPATH", "").split(os.pathsep))


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    path = tmp_path_factory.mktemp("insitu") / "session"
    with pf.Session(path=path) as s:
        p, tmgr = start_pilot(s, nodes=1, cores_per_node=8, runtime="20m")
        yield s, p, tmgr


@pytest.mark.mpi
def test_grayscott_two_ranks_through_a_2_3_2_area_exact(pilot):
    _, p, tmgr = pilot
    area = insitu.StagingArea(tmgr, servers=2, mpi=True)
    area.create_pipeline("statistics", {"bins": 8})
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable=sys.executable, ranks=2,
        arguments=[str(ROOT / "examples" / "insitu_grayscott.py"), "--area", area.name,
                   "--iterations", "10", "--n", "16", "--steps", "5", "--check",
                   "--wait-at", "3:3", "--wait-at", "7:2"]))
    t.wait(pf.EXECUTING, timeout=60)
    cwd = Path(t.sandbox)
    deadline = time.monotonic() + 120
    while not (cwd / "at-3").exists() and t.state not in pf.FINAL and time.monotonic() < deadline:
        time.sleep(0.05)
    area.resize(3)
    while not (cwd / "at-7").exists() and t.state not in pf.FINAL and time.monotonic() < deadline:
        time.sleep(0.05)
    area.resize(2)
    assert t.wait(timeout=120) == pf.DONE, (t.reason, t.stderr)
    rows = [json.loads(line) for line in t.stdout.splitlines() if line.startswith("{")]
    assert [r["iteration"] for r in rows] == list(range(10))
    assert all(r["ok"] for r in rows), rows
    assert [r["servers"] for r in rows] == [2, 2, 2, 3, 3, 3, 3, 2, 2, 2]
    area.close()


def test_user_program_client_and_bad_input(pilot):
    _, _, tmgr = pilot
    area = insitu.StagingArea(tmgr, servers=2, mpi=False)  # the ZeroMQ collectives
    with pytest.raises(insitu.InsituError, match="unknown pipeline 'nope'"):
        area.create_pipeline("nope")
    with pytest.raises(insitu.InsituError, match="bins"):
        area.create_pipeline("statistics", {"bins": 0})
    with pytest.raises(insitu.InsituError, match="unknown pipeline"):
        area.pipeline("statistics")  # the failed create left nothing
    area.create_pipeline("statistics", {"bins": 5, "range": [0, 1]})
    h = area.pipeline("statistics")
    with pytest.raises(insitu.InsituError, match="stage before activate"):
        h.stage(0, np.zeros(4))
    with pytest.raises(insitu.InsituError, match="not active"):
        h.execute(0)
    rng = np.random.default_rng(1)
    for it in range(3):
        h.activate(it)
        blocks = [rng.random(100) for _ in range(5)]
        for b, a in enumerate(blocks):
            h.stage(b, a)
        if it == 1:
            h.stage(0, blocks[0])  # a block staged twice: refused, the area keeps serving
            with pytest.raises(insitu.InsituError, match="staged twice"):
                h.execute(it)
            h.deactivate(it)
            continue
        fut = h.execute_async(it)
        stats = fut.result(timeout=60)
        h.deactivate(it)
        full = np.concatenate(blocks)
        assert stats["count"] == 500 and stats["min"] == full.min() and stats["max"] == full.max()
        assert stats["histogram"] == np.histogram(full, 5, (0, 1))[0].tolist()
    assert [t["servers"] for t in h.times] == [2, 2, 2]
    # a client whose view is stale is refused at activate, naming it (the handle refreshes
    # its view and retries; here a request with an old epoch goes straight to a server)
    from pilotfish.insitu._client import _Channel

    ch = _Channel(area._keys)
    m = area.members[0]
    ch.send(m.endpoint, {"op": "activate", "pipeline": "statistics", "iteration": 9,
                         "epoch": area.epoch - 1,
                         "members": [[x.uid, x.endpoint] for x in area.members]})
    ((ok, why, _),) = ch.collect().values()
    ch.close()
    assert not ok and why.startswith("stale view") and str(area.epoch) in why
    h.activate(3)  # the area keeps serving
    h.stage(0, np.zeros(3))
    assert h.execute(3)["count"] == 3
    h.deactivate(3)
    area.close()


def _field(n):
    z, y, x = np.mgrid[0:n, 0:n, 0:n] / (n - 1) * 2 - 1
    return np.sqrt(x ** 2 + 1.5 * y ** 2 + 0.7 * z ** 2) + 0.15 * np.sin(5 * x)


@pytest.mark.slow
def test_isosurface_composite_matches_a_single_process_rendering(pilot, tmp_path):
    from matplotlib import image

    from pilotfish.insitu.pipelines.isosurface import (block_bounds, camera_for, render,
                                                       write_png)

    _, _, tmgr = pilot
    area = insitu.StagingArea(tmgr, servers=3, mpi=False)
    out = tmp_path / "images"
    with pytest.raises(insitu.InsituError, match="isovalue"):
        area.create_pipeline("isosurface", {"image_size": [64, 64], "output": str(out)})
    area.create_pipeline("isosurface", {"isovalue": 0.7, "image_size": [200, 160],
                                        "output": str(out)})
    h = area.pipeline("isosurface")
    n = 40
    f = _field(n)
    cuts = [0, 10, 20, 30, n - 1]  # neighbouring blocks share one plane
    paths = []
    for it in range(2):
        h.activate(it)
        for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
            h.stage(k, f[a:b + 1], {"origin": [0.0, 0.0, float(a)], "spacing": [1.0, 1.0, 1.0]})
        paths.append(h.execute(it))
        h.deactivate(it)
    assert paths == [str(out / "isosurface.00000.png"), str(out / "isosurface.00001.png")]
    meta = {"origin": [0.0, 0.0, 0.0], "spacing": [1.0, 1.0, 1.0]}
    whole, depth = render([(f, meta)], 0.7, (200, 160), camera_for(block_bounds(f, meta)))
    write_png(str(tmp_path / "whole.png"), whole)
    ref = image.imread(str(tmp_path / "whole.png"))
    for p in paths:
        img = image.imread(p)  # a valid PNG of the asked size
        assert img.shape[:2] == (160, 200)
        differ = np.any(np.abs(img[..., :3] - ref[..., :3]) > 8 / 255, axis=2).mean()
        assert differ <= 0.01, differ
        assert (depth < 1).mean() > 0.05  # the surface is in the picture
    area.close()


@pytest.mark.mpi
def test_mpi_style_pipeline_code_runs_on_the_servers_communicator(pilot):
    """On MPI, self.comm.mpi is an Intracomm of the view's servers in view order, rebuilt
    when the view changes: buffer collectives (Allreduce) run unchanged."""
    _, _, tmgr = pilot
    area = insitu.StagingArea(tmgr, servers=2, mpi=True)
    area.create_pipeline("sums", module="mpi_sums", type="mpi_sums")
    h = area.pipeline("sums")
    seen = []
    for it in range(4):
        if it == 2:
            area.resize(3)
        h.activate(it)
        for b in range(6):
            h.stage(b, np.full(5, float(b + it)))
        seen.append(h.execute(it))
        h.deactivate(it)
    expect = [float(sum(5 * (b + it) for b in range(6))) for it in range(4)]
    assert [r["total"] for r in seen] == expect
    assert [r["size"] for r in seen] == [2, 2, 3, 3]
    assert all(r["ranks"] == list(range(r["size"])) for r in seen)
    area.close()


AREA_CLIENT = """
import sys, time, numpy as np, pilotfish as pf
from pilotfish import insitu
path, resume = sys.argv[1], sys.argv[2] == "resume"
s = pf.Session(path=path, resume=resume, heartbeat_s=0.5, client_timeout=60)
pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(nodes=1, cores_per_node=4,
                                                             runtime="10m"))
tm = pf.TaskManager(s)
tm.add_pilots(pilot)
area = insitu.StagingArea(tm, servers=2, mpi=False)  # no name: the program's first area
area.create_pipeline("statistics", {"bins": 4, "range": [0, 4]})
h = area.pipeline("statistics")
print("area", area.name, " ".join(m.uid for m in area.members), flush=True)
for it in range(2):
    h.activate(it)
    for b in range(4):
        h.stage(b, np.full(10, float(b)) + 0.5)
    if it == 1 and not resume:
        print("mid", flush=True)
        time.sleep(600)  # killed here, iteration 1 active on the servers
    print("stats", it, h.execute(it)["histogram"], flush=True)
    h.deactivate(it)
area.close()
s.close()
"""


@pytest.mark.slow
def test_resumed_program_reattaches_its_staging_area(tmp_path):
    """The same program run again on a resumed session gets the staging area its live agent
    still runs (the default name is the area's number in the program): the same servers, not
    restarted, their pipeline made again without a fuss, the iteration the killed run left
    active abandoned, and they keep serving."""
    path = tmp_path / "session"
    first = python_script(AREA_CLIENT, path, "first")
    area = first.stdout.readline().split()
    assert area[:2] == ["area", "staging-0"] and len(area) == 4, (area, first.stderr.read())
    assert first.stdout.readline().strip() == "stats 0 [10, 10, 10, 10]"
    assert first.stdout.readline().strip() == "mid"
    first.kill()
    first.wait()
    second = python_script(AREA_CLIENT, path, "resume")
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].split() == area, lines  # the same servers
    assert lines[1:] == ["stats 0 [10, 10, 10, 10]", "stats 1 [10, 10, 10, 10]"], lines
