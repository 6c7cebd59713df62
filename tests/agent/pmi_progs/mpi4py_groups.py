"""MPI-4 communicators from groups through mpi4py (issue 51): the two halves of COMM_WORLD make an
intercommunicator (Intercomm_create), then MPI_Intercomm_create_from_groups builds it again from
its local and remote groups and MPI_Comm_create_from_group a copy of COMM_WORLD from its group.
MPICH identifies each rank's world by the KVS name its process manager told it: ranks told
different names abort here ("allreduce_group.c ... (cdst) != MPI_UNDEFINED"). Every rank prints
`rank R intercomm <compare> world <compare>` in one write; exit 3 when either is not CONGRUENT."""

import os

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
half = rank < size // 2
local = world.Split(int(half), rank)
inter = local.Create_intercomm(0, world, size // 2 if half else 0, 7)
lgroup, rgroup = inter.Get_group(), inter.Get_remote_group()
again = MPI.Intercomm.Create_from_groups(lgroup, 0, rgroup, 0, "pf.groups.inter")
c_inter = MPI.Comm.Compare(inter, again)
wgroup = world.Get_group()
copy = MPI.Intracomm.Create_from_group(wgroup, "pf.groups.world")
c_world = MPI.Comm.Compare(world, copy)
names = {MPI.IDENT: "ident", MPI.CONGRUENT: "congruent", MPI.SIMILAR: "similar"}
os.write(
    1,
    f"rank {rank} intercomm {names.get(c_inter, 'unequal')} "
    f"world {names.get(c_world, 'unequal')}\n".encode(),
)
for x in (again, copy, inter, local):
    x.Free()
for g in (lgroup, rgroup, wgroup):
    g.Free()
raise SystemExit(0 if c_inter == c_world == MPI.CONGRUENT else 3)
