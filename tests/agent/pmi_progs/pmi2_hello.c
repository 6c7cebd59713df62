/* PMI-2 through a real client library (Slurm's libpmi2, Debian's libpmi2-0-dev): init, the
 * job id, a put / fence / get of every rank's key, the process mapping (a job attribute), a
 * node attribute put by the lowest rank and waited for by the others, finalize. One line:
 *
 *   pmi2 rank R size N jobid J got <sum of the ranks read back> map <mapping> node <attr>
 *
 *   pmi2_hello abort R   -- rank R calls PMI2_Abort(1, "pmi2 abort from rank R") after init
 */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(what, rc) do { if ((rc) != PMI2_SUCCESS) { \
    fprintf(stderr, "%s failed: %d\n", what, rc); return 2; } } while (0)

int main(int argc, char **argv)
{
    int spawned, size, rank, appnum, len, found, sum = 0;
    char jobid[256], key[64], val[1024], map[1024] = "none", node[1024] = "none", line[4096];

    CHECK("PMI2_Init", PMI2_Init(&spawned, &size, &rank, &appnum));
    CHECK("PMI2_Job_GetId", PMI2_Job_GetId(jobid, sizeof(jobid)));
    if (argc >= 3 && strcmp(argv[1], "abort") == 0 && rank == atoi(argv[2])) {
        snprintf(val, sizeof(val), "pmi2 abort from rank %d", rank);
        PMI2_Abort(1, val);
    }
    snprintf(key, sizeof(key), "k-%d", rank);
    snprintf(val, sizeof(val), "%d;%d", rank, rank * 7);  /* a ';' travels escaped */
    CHECK("PMI2_KVS_Put", PMI2_KVS_Put(key, val));
    CHECK("PMI2_KVS_Fence", PMI2_KVS_Fence());
    for (int r = 0; r < size; r++) {
        int a, b;
        snprintf(key, sizeof(key), "k-%d", r);
        CHECK("PMI2_KVS_Get", PMI2_KVS_Get(jobid, r, key, val, sizeof(val), &len));
        if (sscanf(val, "%d;%d", &a, &b) != 2 || a != r || b != r * 7) {
            fprintf(stderr, "k-%d = %s\n", r, val);
            return 3;
        }
        sum += a;
    }
    CHECK("PMI2_Info_GetJobAttr",
          PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof(map), &found));
    if (!found)
        strcpy(map, "none");
    if (argc >= 2 && strcmp(argv[1], "node") == 0) {
        /* the node's lowest rank (argv[2]) puts, the others wait for it */
        if (rank == atoi(argv[2])) {
            CHECK("PMI2_Info_PutNodeAttr", PMI2_Info_PutNodeAttr("nodekey", "from-lowest"));
        }
        CHECK("PMI2_Info_GetNodeAttr",
              PMI2_Info_GetNodeAttr("nodekey", node, sizeof(node), &found, 1));
    }
    CHECK("PMI2_KVS_Fence", PMI2_KVS_Fence());
    int n = snprintf(line, sizeof(line), "pmi2 rank %d size %d jobid %s got %d map %s node %s\n",
                     rank, size, jobid, sum, map, node);
    if (write(1, line, n) != n)
        return 4;
    CHECK("PMI2_Finalize", PMI2_Finalize());
    return 0;
}
