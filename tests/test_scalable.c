/* ncclCommInitRankScalable: ranks given nId unique ids, made as NCCL's users
 * make them (the first rank of each block calls ncclGetUniqueId and every
 * rank gets all of them: here through shared memory, as MPI_Bcast would).
 *   blocks   - 5 ranks with 2 ids and 3 ranks with 3 (one per rank): the
 *              communicator works (AllReduce and AllGather checked, count and
 *              rank right), and the root of an id that nobody meets at ends
 *              at once (its port refuses) instead of waiting out the timeout.
 *   mismatch - one rank passes another second id: every rank's init fails
 *              with ncclInvalidUsage within 2 s, saying why.
 *   args     - nId 0 or past nranks, and NULL ids: ncclInvalidArgument at once.
 *   nonblocking - config.blocking = 0: ncclInProgress, then success.
 *   test_scalable <case> */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define MAX_IDS 4
struct shared {
  ncclUniqueId ids[MAX_IDS];
  ncclUniqueId other; /* the mismatch case's odd second id */
  int published[MAX_IDS + 1];
};
static struct shared *sh;

struct plan {
  int nId;
  int mismatch; /* the last rank passes `other` as its second id */
  int blocking;
};

/* Block k's first rank, as NCCL splits them: contiguous blocks of
 * nranks / nId, the remainder to the first blocks. */
static int firstRankOf(int k, int nranks, int nId) {
  int base = nranks / nId, extra = nranks % nId;
  return k * base + (k < extra ? k : extra);
}

static int scalableRank(int rank, int n, ncclUniqueId unused, void *arg) {
  (void)unused;
  const struct plan *p = arg;
  for (int k = 0; k < p->nId; k++)
    if (rank == firstRankOf(k, n, p->nId)) {
      NCCLCHECK(ncclGetUniqueId(&sh->ids[k]));
      if (k == 1 && p->mismatch) NCCLCHECK(ncclGetUniqueId(&sh->other));
      __atomic_store_n(&sh->published[k], 1, __ATOMIC_RELEASE);
    }
  double t0 = nowSec();
  for (int k = 0; k < p->nId; k++)
    while (!__atomic_load_n(&sh->published[k], __ATOMIC_ACQUIRE)) {
      EXPECT(nowSec() - t0 < 10, "rank %d: id %d never published", rank, k);
      usleep(1000);
    }
  ncclUniqueId ids[MAX_IDS];
  memcpy(ids, sh->ids, sizeof ids);
  if (p->mismatch && rank == n - 1) ids[1] = sh->other;
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = p->blocking;
  t0 = nowSec();
  ncclResult_t res = ncclCommInitRankScalable(&comm, n, rank, p->nId, ids, &config);
  if (p->mismatch) {
    EXPECT(res == ncclInvalidUsage, "rank %d: a mismatched second id gave %s", rank, ncclGetErrorString(res));
    EXPECT(nowSec() - t0 < 2.0, "rank %d: the mismatch took %.2f s", rank, nowSec() - t0);
    const char *err = ncclGetLastError(NULL);
    EXPECT(strstr(err, "passed other unique ids than rank 0"), "rank %d: last error '%s'", rank, err);
    EXPECT(comm == NULL, "rank %d: a failed init left a communicator", rank);
    return 0;
  }
  if (!p->blocking) {
    EXPECT(res == ncclInProgress || res == ncclSuccess, "rank %d: nonblocking init gave %s", rank,
           ncclGetErrorString(res));
    do NCCLCHECK(ncclCommGetAsyncError(comm, &res));
    while (res == ncclInProgress && nowSec() - t0 < 10);
  }
  EXPECT(res == ncclSuccess, "rank %d: init gave %s", rank, ncclGetErrorString(res));
  int count = -1, me = -1;
  NCCLCHECK(ncclCommCount(comm, &count));
  NCCLCHECK(ncclCommUserRank(comm, &me));
  EXPECT(count == n && me == rank, "rank %d: count %d, rank %d", rank, count, me);
  enum { N = 1001 };
  float *in = guardAlloc(N * sizeof(float)), *out = guardAlloc((size_t)N * n * sizeof(float));
  for (int i = 0; i < N; i++) in[i] = (float)(rank * 1000 + i % 13);
  NCCLCHECK(ncclAllReduce(in, out, N, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < N; i++) {
    float want = (float)(1000 * n * (n - 1) / 2 + n * (i % 13));
    EXPECT(out[i] == want, "rank %d: AllReduce element %d is %g, expected %g", rank, i, out[i], want);
  }
  NCCLCHECK(ncclAllGather(in, out, N, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < N; i++)
      EXPECT(out[r * N + i] == (float)(r * 1000 + i % 13), "rank %d: AllGather block %d element %d", rank, r, i);
  EXPECT(!guardCheck(in) && !guardCheck(out), "rank %d: guard bytes", rank);
  /* The roots this rank ran for ids past the first are gone (an unused
   * root would have listened until CHORUS_TIMEOUT). */
  for (int k = 1; k < p->nId; k++)
    if (rank == firstRankOf(k, n, p->nId) && memcmp(&ids[k], &ids[0], sizeof ids[0]) != 0) {
      EXPECT(idRootGone(&ids[k], 2), "rank %d: the root of id %d still listens", rank, k);
    }
  NCCLCHECK(ncclCommDestroy(comm));
  guardFree(in);
  guardFree(out);
  return 0;
}

static int run(int n, struct plan p) {
  memset(sh, 0, sizeof *sh);
  ncclUniqueId unused;
  memset(&unused, 0, sizeof unused);
  return runRanksWithId(n, unused, scalableRank, &p, 60);
}

/* Bad arguments, in one process: refused before any rendezvous. */
static int args(void) {
  setenv("CHORUS_TIMEOUT", "1", 1); /* an init that went ahead would fail in a second, not hang */
  ncclUniqueId ids[2];
  NCCLCHECK(ncclGetUniqueId(&ids[0]));
  ids[1] = ids[0];
  ncclComm_t comm = NULL;
  double t0 = nowSec();
  ncclResult_t a = ncclCommInitRankScalable(&comm, 2, 0, 0, ids, NULL);
  ncclResult_t b = ncclCommInitRankScalable(&comm, 2, 0, 3, ids, NULL);
  ncclResult_t c = ncclCommInitRankScalable(&comm, 2, 0, 1, NULL, NULL);
  ncclResult_t d = ncclCommInitRankScalable(NULL, 2, 0, 1, ids, NULL);
  EXPECT(a == ncclInvalidArgument && b == ncclInvalidArgument && c == ncclInvalidArgument &&
             d == ncclInvalidArgument,
         "nId 0: %s, nId 3 of 2: %s, NULL ids: %s, NULL comm: %s", ncclGetErrorString(a), ncclGetErrorString(b),
         ncclGetErrorString(c), ncclGetErrorString(d));
  EXPECT(strstr(ncclGetLastError(NULL), "commIds") || strstr(ncclGetLastError(NULL), "comm"),
         "last error '%s'", ncclGetLastError(NULL));
  EXPECT(comm == NULL && nowSec() - t0 < 1.0, "refusals left a communicator or took %.2f s", nowSec() - t0);
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setenv("CHORUS_TIMEOUT", "10", 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  int failed;
  if (!strcmp(c, "blocks"))
    failed = run(5, (struct plan){2, 0, 1}) + run(3, (struct plan){3, 0, 1}) + run(2, (struct plan){1, 0, 1});
  else if (!strcmp(c, "mismatch")) failed = run(3, (struct plan){2, 1, 1});
  else if (!strcmp(c, "args")) failed = args();
  else if (!strcmp(c, "nonblocking")) failed = run(4, (struct plan){2, 0, 0});
  else {
    fprintf(stderr, "usage: test_scalable blocks|mismatch|args|nonblocking\n");
    return 2;
  }
  printf("test_scalable %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
