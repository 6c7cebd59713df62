"""MPI_Comm_spawn through a process manager that does not spawn (pilotfish's PMI server
answers PMI-1's multi-line spawn command with an error): the call must fail, not hang. Prints
"spawn refused" and exits 0 when it failed, exits 3 when a child world appeared."""

import os
import sys

from mpi4py import MPI

try:
    MPI.COMM_SELF.Spawn(sys.executable, args=["-c", "pass"], maxprocs=1)
except MPI.Exception as e:
    os.write(1, f"spawn refused {e.Get_error_class()}\n".encode())
    raise SystemExit(0)
raise SystemExit(3)
