/* The tuner as users drive it. Each rank execs itself with its own
 * environment (chorus reads its variables once per process).
 *   test_tuning N differ    ranks' CHORUS_SMALL_THRESHOLD and NCCL_MAX_NCHANNELS
 *                           differ (rank 0: 0 and 2, the others: 65536 and 4), and
 *                           only rank 0 sets NCCL_ALGO=Ring: rank 0's hold, and
 *                           AllReduce results at sizes on both sides of the
 *                           thresholds are exact on every rank
 *   test_tuning N impossible  NCCL_ALGO="allreduce:nvls" (chorus has no NVLS)
 *                           on every rank: AllReduce fails with ncclInvalidUsage
 *                           and NCCL's "No algorithm/protocol available" on every
 *                           rank, changing nothing; inside a group the group fails;
 *                           Broadcast still works
 *   test_tuning N impossible-proto  the same with NCCL_PROTO="allreduce:LL128"
 *   test_tuning N badname   NCCL_ALGO=Rnig on rank 0 only: init fails on every rank
 *                           with ncclInvalidUsage
 *   test_tuning N noprefix  NCCL_ALGO="allreduce:tree;ring" on rank 0 only (an entry
 *                           after the first without a collective): the same, with
 *                           NCCL's "All entries except the first must have a prefix" */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char *mode;

static int differRank(int rank, int n, ncclComm_t comm) {
  static const size_t counts[] = {1, 2, 7, 64, 1000, 4096, 16384, 300000, 1 << 21};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t count = counts[k];
    int32_t *in = guardAlloc(count * sizeof *in), *out = guardAlloc(count * sizeof *out);
    for (size_t i = 0; i < count; i++) in[i] = (int32_t)((i * 7 + 1) * (size_t)(rank + 1) % 1000);
    memset(out, 0xee, count * sizeof *out);
    NCCLCHECK(ncclAllReduce(in, out, count, ncclInt32, ncclSum, comm, NULL));
    for (size_t i = 0; i < count; i++) {
      int64_t want = 0;
      for (int r = 0; r < n; r++) want += (int64_t)((i * 7 + 1) * (size_t)(r + 1) % 1000);
      EXPECT(out[i] == want, "rank %d count %zu: out[%zu] = %d, want %lld", rank, count, i, out[i],
             (long long)want);
    }
    EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d count %zu: guard bytes overwritten", rank, count);
    guardFree(in);
    guardFree(out);
  }
  return 0;
}

static int impossibleRank(int rank, int n, ncclComm_t comm) {
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)(rank + 1), out[i] = -1.0f;
  ncclResult_t res = ncclAllReduce(in, out, 64, ncclFloat, ncclSum, comm, NULL);
  EXPECT(res == ncclInvalidUsage, "rank %d: AllReduce returned %s", rank, ncclGetErrorString(res));
  const char *err = ncclGetLastError(comm);
  EXPECT(strstr(err, "No algorithm/protocol available for function AllReduce"), "rank %d: last error '%s'", rank, err);
  EXPECT(out[0] == -1.0f, "rank %d: the refused call wrote its output", rank);
  /* In a group the call succeeds and ncclGroupEnd fails, as NCCL chooses
   * the algorithm there. */
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclBroadcast(in, out, 64, ncclFloat, 0, comm, NULL));
  res = ncclAllReduce(in, out, 64, ncclFloat, ncclSum, comm, NULL);
  EXPECT(res == ncclSuccess, "rank %d: AllReduce in a group returned %s", rank, ncclGetErrorString(res));
  res = ncclGroupEnd();
  EXPECT(res == ncclInvalidUsage, "rank %d: the group returned %s", rank, ncclGetErrorString(res));
  EXPECT(out[0] == -1.0f, "rank %d: the refused group ran", rank);
  /* The communicator is fine: what is possible runs, and every rank agrees on the numbering. */
  NCCLCHECK(ncclBroadcast(in, out, 64, ncclFloat, n - 1, comm, NULL));
  EXPECT(out[63] == (float)n, "rank %d: Broadcast gave %g", rank, out[63]);
  NCCLCHECK(ncclReduceScatter(in, out, 64 / n, ncclFloat, ncclSum, comm, NULL));
  EXPECT(out[0] == (float)(n * (n + 1) / 2), "rank %d: ReduceScatter gave %g", rank, out[0]);
  return 0;
}

static int tuningRank(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  if (strcmp(mode, "peerbad") == 0) { /* rank 1's NCCL_ALGO does not parse: every rank's init fails, naming it */
    EXPECT(res == ncclInvalidUsage, "rank %d: init with rank 1's NCCL_ALGO=Rnig returned %s", rank,
           ncclGetErrorString(res));
    const char *err = ncclGetLastError(NULL);
    EXPECT(strstr(err, "rank 1's NCCL_ALGO \"Rnig\""), "rank %d: last error '%s'", rank, err);
    return 0;
  }
  if (strcmp(mode, "differ") == 0 && rank > 0) { /* overridden by rank 0's: said on this rank */
    const char *err = ncclGetLastError(NULL);
    EXPECT(strstr(err, "differ from rank 0's") && strstr(err, "which hold for the communicator"),
           "rank %d: last error '%s'", rank, err);
  }
  if (strcmp(mode, "badname") == 0 || strcmp(mode, "noprefix") == 0) {
    EXPECT(res == ncclInvalidUsage, "rank %d: init with rank 0's NCCL_ALGO=%s returned %s", rank,
           mode[0] == 'b' ? "Rnig" : "allreduce:tree;ring", ncclGetErrorString(res));
    const char *err = ncclGetLastError(NULL);
    EXPECT(mode[0] == 'b' || strstr(err, "All entries except the first must have a prefix"), "rank %d: last error '%s'",
           rank, err);
    return 0;
  }
  NCCLCHECK(res);
  int rc = strcmp(mode, "differ") == 0 ? differRank(rank, n, comm) : impossibleRank(rank, n, comm);
  if (rc == 0) NCCLCHECK(ncclCommDestroy(comm));
  return rc;
}

static int execRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1], r[16], nr[16];
  idToHex(&id, hex);
  snprintf(r, sizeof r, "%d", rank);
  snprintf(nr, sizeof nr, "%d", n);
  if (strcmp(mode, "differ") == 0) {
    setenv("CHORUS_SMALL_THRESHOLD", rank == 0 ? "0" : "65536", 1);
    setenv("NCCL_MAX_NCHANNELS", rank == 0 ? "2" : "4", 1);
    if (rank == 0) setenv("NCCL_ALGO", "Ring", 1);
  } else if (strcmp(mode, "impossible") == 0) {
    setenv("NCCL_ALGO", "allreduce:nvls", 1); /* a name NCCL knows, an algorithm chorus does not have */
  } else if (strcmp(mode, "impossible-proto") == 0) {
    setenv("NCCL_PROTO", "allreduce:LL128", 1); /* a name NCCL knows, a protocol chorus does not have */
  } else if (strcmp(mode, "peerbad") == 0) {
    if (rank == 1) setenv("NCCL_ALGO", "Rnig", 1);
  } else if (rank == 0) {
    setenv("NCCL_ALGO", strcmp(mode, "noprefix") == 0 ? "allreduce:tree;ring" : "Rnig", 1);
  }
  execl("/proc/self/exe", "test_tuning", "rank", r, nr, hex, mode, (char *)NULL);
  perror("exec");
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "rank") == 0) {
    ncclUniqueId id;
    if (idFromHex(argv[4], &id)) return 2;
    mode = argv[5];
    if (strcmp(mode, "impossible-proto") == 0) mode = "impossible";
    return tuningRank(atoi(argv[2]), atoi(argv[3]), id);
  }
  int n = argc > 1 ? atoi(argv[1]) : 3;
  mode = argc > 2 ? argv[2] : "differ";
  int failed = runRanks(n, execRank, NULL, 60);
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
