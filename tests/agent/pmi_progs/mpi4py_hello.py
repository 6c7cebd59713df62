"""One MPI world through mpi4py (MPICH's ABI: MPI4PY_LIBMPI=<venv>/lib/libmpi.so.12): every
rank prints its rank, the size and its processor name in one write, checks an allreduce of the
ranks and a pickled bcast from rank 0; exit 3 when either is wrong."""

import os

from mpi4py import MPI

c = MPI.COMM_WORLD
rank, size = c.Get_rank(), c.Get_size()
total = c.allreduce(rank, op=MPI.SUM)
obj = c.bcast({"from": 0, "items": list(range(size)), "text": "pickled"} if rank == 0 else None,
              root=0)
good = total == size * (size - 1) // 2 and obj == {"from": 0, "items": list(range(size)),
                                                  "text": "pickled"}
os.write(1, f"rank {rank} size {size} host {MPI.Get_processor_name()} sum {total} "
            f"bcast {'ok' if good else 'bad'}\n".encode())
raise SystemExit(0 if good else 3)
