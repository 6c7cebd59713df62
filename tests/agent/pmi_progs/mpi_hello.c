/* One MPI world, checked: every rank prints its rank, the size and MPI_Get_processor_name in
 * one write, then an allreduce of the ranks is checked against n(n-1)/2.
 *
 *   mpi_hello            -- the normal run (exit 0 when the sum is right, 3 when not)
 *   mpi_hello abort R    -- rank R calls MPI_Abort(MPI_COMM_WORLD, 5) after MPI_Init
 *   mpi_hello exit R C   -- rank R exits with status C after MPI_Init (no MPI_Finalize)
 *   mpi_hello sleep S    -- every rank sleeps S seconds after MPI_Init (cancel, timeout, a
 *                           node lost mid-task), then goes on
 *   mpi_hello presleep S -- every rank sleeps S seconds before MPI_Init (the init timeout)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, len, sum = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    char line[512];

    if (argc >= 3 && strcmp(argv[1], "presleep") == 0)
        sleep(atoi(argv[2]));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    if (argc >= 3 && strcmp(argv[1], "abort") == 0 && rank == atoi(argv[2]))
        MPI_Abort(MPI_COMM_WORLD, 5);
    if (argc >= 4 && strcmp(argv[1], "exit") == 0 && rank == atoi(argv[2]))
        _exit(atoi(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "sleep") == 0)
        sleep(atoi(argv[2]));
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int n = snprintf(line, sizeof(line), "rank %d size %d host %s sum %d\n",
                     rank, size, name, sum);
    if (write(1, line, n) != n)
        return 4;
    MPI_Finalize();
    return sum == size * (size - 1) / 2 ? 0 : 3;
}
