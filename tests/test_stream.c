/* Asynchronous streams: calls return at once and run in order in the
 * background; synchronize waits; query reports progress. Also the
 * one-thread-many-ranks pattern with one stream per rank and no group. */
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define N_OPS 16
#define COUNT (1 << 18)

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t st;
  NCCLCHECK(chorusStreamCreate(&st));
  float *buf[N_OPS];
  for (int k = 0; k < N_OPS; k++) {
    buf[k] = guardAlloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) buf[k][i] = (float)(rank + k + i % 3);
  }
  double t0 = nowSec();
  for (int k = 0; k < N_OPS; k++) NCCLCHECK(ncclAllReduce(buf[k], buf[k], COUNT, ncclFloat, ncclSum, comm, st));
  double issue = nowSec() - t0;
  ncclResult_t q = chorusStreamQuery(st);
  EXPECT(q == ncclInProgress || q == ncclSuccess, "query returned %s", ncclGetErrorString(q));
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(chorusStreamQuery(st) == ncclSuccess, "query after synchronize");
  for (int k = 0; k < N_OPS; k++) {
    for (int i = 0; i < COUNT; i++) {
      float want = (float)(n * (n - 1) / 2 + n * (k + i % 3));
      EXPECT(buf[k][i] == want, "op %d element %d: got %g want %g", k, i, buf[k][i], want);
    }
    EXPECT(!guardCheck(buf[k]), "guard bytes");
    guardFree(buf[k]);
  }
  /* A group on a stream, then a NULL-stream call: order is kept. */
  int a = rank, b = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&a, &b, 1, ncclInt, ncclSum, comm, st));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(b == n * (n - 1) / 2, "grouped stream allreduce got %d", b);
  NCCLCHECK(chorusStreamDestroy(st));
  NCCLCHECK(ncclCommDestroy(comm));
  fprintf(stderr, "rank %d: issued %d ops in %.1f us\n", rank, N_OPS, issue * 1e6);
  return 0;
}

/* One thread drives all ranks of ncclCommInitAll, one stream each, no group. */
static int threadsMain(int n) {
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  int vals[8], outs[8];
  NCCLCHECK(ncclCommInitAll(comms, n, NULL));
  for (int r = 0; r < n; r++) NCCLCHECK(chorusStreamCreate(&streams[r]));
  for (int iter = 0; iter < 50; iter++) {
    for (int r = 0; r < n; r++) {
      vals[r] = r * iter;
      NCCLCHECK(ncclAllReduce(&vals[r], &outs[r], 1, ncclInt, ncclSum, comms[r], streams[r]));
    }
    for (int r = 0; r < n; r++) NCCLCHECK(chorusStreamSynchronize(streams[r]));
    for (int r = 0; r < n; r++) EXPECT(outs[r] == iter * n * (n - 1) / 2, "iter %d rank %d got %d", iter, r, outs[r]);
  }
  for (int r = 0; r < n; r++) {
    NCCLCHECK(chorusStreamDestroy(streams[r]));
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int failed = runRanks(n, rankMain, NULL, 120) + threadsMain(n);
  /* Bad stream handles are rejected. */
  static uint64_t fake[16]; /* not a stream, but readable */
  cudaStream_t bogus = (cudaStream_t)fake;
  if (chorusStreamSynchronize(bogus) != ncclInvalidArgument) failed++;
  if (chorusStreamCreate(NULL) != ncclInvalidArgument) failed++;
  printf("test_stream %d ranks: %s\n", n, failed ? "FAILED" : "passed");
  return failed != 0;
}
