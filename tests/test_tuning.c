/* Tuning variables that differ between ranks never give wrong data: rank
 * 0's hold for the communicator (as CHORUS_CHECK's do), so every rank picks
 * the same algorithm. Each rank sets its own CHORUS_SMALL_THRESHOLD (rank 0:
 * 0, the one-hop algorithm never; the others: 65536, always for these
 * sizes) and NCCL_MAX_NCHANNELS, and execs itself, since chorus reads its
 * variables once per process; then it checks AllReduce results at sizes on
 * both sides of the thresholds against the exact sums.
 *   test_tuning [nranks]                                                  */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static int tuningRank(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
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
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int execRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  char hex[2 * sizeof id.internal + 1], r[16], nr[16];
  for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
  snprintf(r, sizeof r, "%d", rank);
  snprintf(nr, sizeof nr, "%d", n);
  setenv("CHORUS_SMALL_THRESHOLD", rank == 0 ? "0" : "65536", 1);
  setenv("NCCL_MAX_NCHANNELS", rank == 0 ? "2" : "4", 1);
  execl("/proc/self/exe", "test_tuning", "rank", r, nr, hex, (char *)NULL);
  perror("exec");
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "rank") == 0) {
    ncclUniqueId id;
    for (size_t i = 0; i < sizeof id.internal; i++) {
      unsigned v;
      sscanf(argv[4] + 2 * i, "%2x", &v);
      id.internal[i] = (char)v;
    }
    return tuningRank(atoi(argv[2]), atoi(argv[3]), id);
  }
  int n = argc > 1 ? atoi(argv[1]) : 3;
  int failed = runRanks(n, execRank, NULL, 60);
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
