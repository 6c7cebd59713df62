"""A pipeline written as MPI code: sums staged values with Allreduce on a numpy buffer over
the servers' communicator (self.comm.mpi)."""

import numpy as np

from pilotfish.insitu import Pipeline, pipeline


@pipeline("mpi_sums")
class MpiSums(Pipeline):
    def activate(self, iteration):
        self.total = np.zeros(1)

    def stage(self, block_id, array, meta):
        self.total += array.sum()

    def execute(self, iteration):
        from mpi4py import MPI

        comm = self.comm.mpi
        out = np.zeros(1)
        comm.Allreduce(self.total, out, op=MPI.SUM)
        ranks = comm.gather(comm.Get_rank(), root=0)
        if comm.Get_rank() == 0:
            return {"total": float(out[0]), "size": comm.Get_size(), "ranks": ranks}
        return None
