"""Mandelbulb in situ: an MPI mini-app renders an isosurface of its field every iteration
through a pilotfish staging area that grows while it runs (Colza's Figure 9; seed 002).

    .venv/bin/python examples/insitu_mandelbulb.py [--iterations 12] [--n 48] [--out DIR] [--warm]

Run like this, it is the driver: it starts a local pilot and a staging area of 1 server,
creates the "isosurface" pipeline, runs itself as a 2-rank MPI task (--area NAME), grows the
area to 4 servers while the task runs, and prints each iteration's activate/stage/execute/
deactivate times and servers. The images are DIR/isosurface.NNNNN.png.

As the MPI client (what the driver submits):
    mpiexec -n 2 python examples/insitu_mandelbulb.py --area NAME [--iterations 12] [--n 48]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def mandelbulb(n: int, z0: int, z1: int, power: float, steps: int = 8) -> np.ndarray:
    """Escape-time field on planes z0..z1 (inclusive) of an n^3 grid over [-1.2, 1.2]^3."""
    ax = np.linspace(-1.2, 1.2, n)
    z, y, x = np.meshgrid(ax[z0:z1 + 1], ax, ax, indexing="ij")
    cx, cy, cz = x.copy(), y.copy(), z.copy()
    out = np.zeros(x.shape)
    alive = np.ones(x.shape, bool)
    for i in range(steps):
        r = np.sqrt(x * x + y * y + z * z)
        alive &= r < 2.0
        theta = np.arccos(np.clip(z / np.maximum(r, 1e-12), -1, 1)) * power
        phi = np.arctan2(y, x) * power
        rp = r ** power
        x = np.where(alive, rp * np.sin(theta) * np.cos(phi) + cx, x)
        y = np.where(alive, rp * np.sin(theta) * np.sin(phi) + cy, y)
        z = np.where(alive, rp * np.cos(theta) + cz, z)
        out += alive
    return out / steps


def client(a) -> int:
    from mpi4py import MPI

    from pilotfish import insitu

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    area = insitu.connect(a.area)
    h = area.pipeline("isosurface", comm=comm)
    # planes z0..z1 of this rank: neighbours share one plane (surfaces meet without a gap)
    z0 = rank * (a.n - 1) // size
    z1 = (rank + 1) * (a.n - 1) // size
    spacing = 2.4 / (a.n - 1)
    for it in range(a.iterations):
        field = mandelbulb(a.n, z0, z1, power=6.0 + 0.25 * it)
        h.activate(it)
        h.stage(rank, field, {"origin": [-1.2, -1.2, -1.2 + z0 * spacing],
                              "spacing": [spacing] * 3})
        path = h.execute(it)
        h.deactivate(it)
        if rank == 0:
            t = h.times[-1]
            print(json.dumps({"iteration": it, "servers": t["servers"], "image": path,
                              **{k: round(t[k], 4) for k in
                                 ("activate", "stage", "execute", "deactivate")}}), flush=True)
    h.close()
    return 0


def driver(a) -> int:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import pilotfish as pf
    from pilotfish import insitu

    out = os.path.abspath(a.out)
    with pf.Session() as s:
        pilot = pf.PilotManager(s).submit_pilots(pf.PilotDescription(
            nodes=1, cores_per_node=8, runtime="30m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        area = insitu.StagingArea(tmgr, servers=1)
        area.create_pipeline("isosurface", {"isovalue": 0.9, "image_size": [400, 400],
                                            "output": out})
        task = tmgr.submit_tasks(pf.TaskDescription(
            executable=sys.executable, ranks=2,
            arguments=[os.path.abspath(__file__), "--area", area.name,
                       "--iterations", str(a.iterations), "--n", str(a.n)]))
        task.wait(pf.EXECUTING, timeout=120)
        for servers in (2, 3, 4):  # grown while it runs: joins land between iterations
            time.sleep(a.grow_every)
            area.resize(servers, wait=a.warm, warm=a.warm)
        state = task.wait(timeout=600)
        if state != pf.DONE:
            print(f"the mini-app {state}: {task.reason}\n{task.stderr}", file=sys.stderr)
            return 1
        print("iteration servers activate   stage      execute    deactivate")
        rows = [json.loads(line) for line in task.stdout.splitlines() if line.startswith("{")]
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f)
        for r in rows:
            if True:
                print(f"{r['iteration']:9d} {r['servers']:7d} {r['activate'] * 1000:7.1f} ms "
                      f"{r['stage'] * 1000:7.1f} ms {r['execute'] * 1000:7.1f} ms "
                      f"{r['deactivate'] * 1000:7.1f} ms")
        print(f"images: {out}/isosurface.*.png")
        area.close()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--area")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--out", default="mandelbulb-images")
    ap.add_argument("--grow-every", type=float, default=1.0)
    ap.add_argument("--warm", action="store_true", help="grow with warm spares")
    ap.add_argument("--json", help="write the per-iteration rows here")
    a = ap.parse_args(argv)
    return client(a) if a.area else driver(a)


if __name__ == "__main__":
    sys.exit(main())
