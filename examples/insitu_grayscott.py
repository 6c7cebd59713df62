"""Gray-Scott reaction-diffusion, distributed over MPI ranks, staging U into a pilotfish
staging area every iteration (Colza's mini-app pattern; seed 002).

As a task of a pilot that runs a staging area (what examples and tests do):
    mpiexec -n 2 python examples/insitu_grayscott.py --area NAME [--iterations 10] [--n 64]
        [--steps 20] [--check] [--pipeline statistics] [--wait-at IT:SERVERS ...]

The n x n x n domain is cut into slabs along z, one per rank, each staged as two blocks. With
--check, rank 0 gathers the whole field every iteration and compares the area's statistics
with numpy's (exact count, min, max and histogram; mean to 1e-12). Prints one JSON line per
iteration on rank 0: iteration, servers, times, ok.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

F, K, DU, DV, DT = 0.04, 0.06, 0.2, 0.1, 1.0


class GrayScott:
    def __init__(self, n: int, comm):
        self.comm = comm
        rank, size = comm.Get_rank(), comm.Get_size()
        self.n = n
        self.z0 = rank * n // size
        self.z1 = (rank + 1) * n // size
        nz = self.z1 - self.z0
        self.u = np.ones((nz + 2, n, n))
        self.v = np.zeros((nz + 2, n, n))
        c = n // 2
        r = max(1, n // 8)
        for z in range(self.z0, self.z1):
            if c - r <= z < c + r:
                self.u[z - self.z0 + 1, c - r:c + r, c - r:c + r] = 0.25
                self.v[z - self.z0 + 1, c - r:c + r, c - r:c + r] = 0.33

    def _halo(self, a):
        comm, rank, size = self.comm, self.comm.Get_rank(), self.comm.Get_size()
        up, down = (rank + 1) % size, (rank - 1) % size
        a[0] = comm.sendrecv(a[-2].copy(), dest=up, source=down) if size > 1 else a[-2]
        a[-1] = comm.sendrecv(a[1].copy(), dest=down, source=up) if size > 1 else a[1]

    def _lap(self, a):
        c = a[1:-1]
        return (a[2:] + a[:-2] + np.roll(c, 1, 1) + np.roll(c, -1, 1) + np.roll(c, 1, 2)
                + np.roll(c, -1, 2) - 6 * c)

    def step(self):
        self._halo(self.u)
        self._halo(self.v)
        u, v = self.u[1:-1], self.v[1:-1]
        uvv = u * v * v
        du = DU * self._lap(self.u) - uvv + F * (1 - u)
        dv = DV * self._lap(self.v) + uvv - (F + K) * v
        u += DT * du
        v += DT * dv

    @property
    def field(self):
        return self.u[1:-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--area", required=True)
    ap.add_argument("--pipeline", default="statistics")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--wait-at", action="append", default=[],
                    help="IT:SERVERS -- before iteration IT, wait until the area has SERVERS "
                         "servers (and write a file 'at-IT' in the working directory)")
    a = ap.parse_args(argv)
    from mpi4py import MPI

    from pilotfish import insitu

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    area = insitu.connect(a.area)
    h = area.pipeline(a.pipeline, comm=comm)
    sim = GrayScott(a.n, comm)
    waits = {int(x.split(":")[0]): int(x.split(":")[1]) for x in a.wait_at}
    ok_all = True
    for it in range(a.iterations):
        if it in waits and rank == 0:
            open(f"at-{it}", "w").close()
            area.wait_for_servers(waits[it])
        for _ in range(a.steps):
            sim.step()
        h.activate(it)
        f = sim.field
        half = f.shape[0] // 2
        for k, part in enumerate((f[:half], f[half:])):
            h.stage([sim.z0, k], part, {"z0": sim.z0 + (half if k else 0)})
        stats = h.execute(it)
        h.deactivate(it)
        if a.check:
            whole = comm.gather(f.copy(), root=0)
            if rank == 0:
                full = np.concatenate(whole).ravel()
                lo, hi = float(full.min()), float(full.max())
                hist = np.histogram(full, bins=len(stats["histogram"]),
                                    range=tuple(stats["range"]))[0].tolist()
                ok = (stats["count"] == full.size and stats["min"] == lo and stats["max"] == hi
                      and abs(stats["mean"] - float(full.mean())) < 1e-12
                      and stats["histogram"] == hist)
                ok_all &= ok
        if rank == 0:
            t = h.times[-1]
            print(json.dumps({"iteration": it, "servers": t["servers"], "ok": ok_all if a.check
                              else None, **{k: round(t[k], 6) for k in
                                            ("activate", "stage", "execute", "deactivate")}}),
                  flush=True)
    h.close()
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
