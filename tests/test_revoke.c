/* ncclCommRevoke ends what runs on a communicator and leaves it for
 * destroy, split and shrink only:
 *   stuck  - 3 ranks; 0 and 1 start an AllReduce (on a thread of their
 *            own) that rank 2 never joins; each revokes: the AllReduce
 *            returns an error within 2 s, saying it was ended by a revoke,
 *            and the revoke succeeds; then a collective and a send on the
 *            revoked communicator are ncclInvalidUsage saying "revoked",
 *            ncclCommFinalize and a second revoke are ncclInvalidArgument
 *            (as NCCL's), ncclCommGetAsyncError says ncclSuccess, and all
 *            3 split it into a working communicator.
 *   shrink - the same, but rank 2 exits at once (dead): 0 and 1 revoke
 *            and shrink it away, and the 2-rank result works.
 *   timedout - rank 2 revokes and splits at once; 0 and 1 time out in an
 *            AllReduce it skips, then revoke and split: the reports of that
 *            timeout, which reach rank 2 in its split, fail no split.
 *   args   - bad flags are ncclInvalidArgument and change nothing; a NULL
 *            communicator is ncclSuccess, as for destroy and abort.
 *   group  - one thread drives 3 ranks (ncclCommInitAll), revokes them and
 *            splits them in a group, then revokes the children and shrinks
 *            rank 2 away in a group: a revoked parent is no reason for a
 *            group to fail, and both results work.
 *   test_revoke <case> */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

struct inFlight {
  ncclComm_t comm;
  float x[64], y[64];
  ncclResult_t res;
  double ended;
};

static void *allReduceThread(void *p) {
  struct inFlight *f = p;
  f->res = ncclAllReduce(f->x, f->y, 64, ncclFloat, ncclSum, f->comm, NULL);
  f->ended = nowSec();
  return NULL;
}

/* A working communicator of n ranks where this one is rank `rank`. */
static int works(ncclComm_t c, int rank, int n) {
  int count = -1, me = -1;
  NCCLCHECK(ncclCommCount(c, &count));
  NCCLCHECK(ncclCommUserRank(c, &me));
  EXPECT(count == n && me == rank, "new communicator: count %d rank %d, expected %d %d", count, me, n, rank);
  double x = rank + 1, sum = 0;
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclDouble, ncclSum, c, NULL));
  EXPECT(sum == n * (n + 1) / 2.0, "new communicator's AllReduce gave %g", sum);
  return 0;
}

/* Starts an AllReduce nobody completes, revokes, checks the aftermath
 * (with a dead peer, the AllReduce may end by finding it gone first). */
static int revokeStuck(ncclComm_t comm, int rank, int peerDead) {
  struct inFlight f = {.comm = comm, .res = ncclSuccess};
  pthread_t t;
  if (pthread_create(&t, NULL, allReduceThread, &f) != 0) return 1;
  usleep(200000); /* it is waiting for rank 2 by now */
  double t0 = nowSec();
  ncclResult_t r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  pthread_join(t, NULL);
  EXPECT(r == ncclSuccess, "rank %d: revoke gave %s", rank, ncclGetErrorString(r));
  EXPECT(f.res != ncclSuccess, "rank %d: the AllReduce in flight succeeded", rank);
  EXPECT(peerDead || strstr(ncclGetLastError(NULL), "ncclCommRevoke"), "rank %d: the AllReduce's error does not name the revoke: %s",
         rank, ncclGetLastError(NULL));
  EXPECT(f.ended - t0 < 2.0 && nowSec() - t0 < 2.0, "rank %d: revoke took %.2f s", rank, nowSec() - t0);
  return 0;
}

/* What a revoked communicator still says and refuses. */
static int revokedRules(ncclComm_t comm, int rank) {
  ncclResult_t r = ncclCommFinalize(comm);
  EXPECT(r == ncclInvalidArgument, "rank %d: finalize after revoke gave %s", rank, ncclGetErrorString(r));
  float a = 1, b = 0;
  r = ncclAllReduce(&a, &b, 1, ncclFloat, ncclSum, comm, NULL);
  EXPECT(r == ncclInvalidUsage, "rank %d: AllReduce on a revoked communicator gave %s", rank, ncclGetErrorString(r));
  EXPECT(strstr(ncclGetLastError(comm), "revoked"), "rank %d: last error '%s'", rank, ncclGetLastError(comm));
  r = ncclSend(&a, 1, ncclFloat, (rank + 1) % 2, comm, NULL);
  EXPECT(r == ncclInvalidUsage, "rank %d: Send on a revoked communicator gave %s", rank, ncclGetErrorString(r));
  ncclResult_t async = ncclInProgress;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "rank %d: async error after revoke: %s", rank, ncclGetErrorString(async));
  r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  EXPECT(r == ncclInvalidArgument && strstr(ncclGetLastError(comm), "already revoked"),
         "rank %d: a second revoke gave %s: %s", rank, ncclGetErrorString(r), ncclGetLastError(comm));
  EXPECT(b == 0, "rank %d: a refused call wrote its output", rank);
  return 0;
}

static int stuckRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank < 2) {
    if (revokeStuck(comm, rank, 0) || revokedRules(comm, rank)) return 1;
  } else {
    usleep(400000); /* the others revoke meanwhile */
    NCCLCHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  }
  ncclComm_t child;
  NCCLCHECK(ncclCommSplit(comm, 0, n - 1 - rank, &child, NULL)); /* reversed order */
  if (works(child, n - 1 - rank, n)) return 1;
  NCCLCHECK(ncclCommDestroy(child));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Rank 2 revokes at once and waits in its split; ranks 0 and 1 time out
 * in an AllReduce rank 2 never joins (their reports of it reach rank 2
 * while it waits), then revoke and split too, rank 1 a second later: the
 * split works on every rank (the reports concern what the revoke ended). */
static int timedOutRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm, child;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank < 2) {
    NCCLCHECK(chorusCommSetTimeout(comm, 1000));
    float x = 1, y = 0;
    ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
    EXPECT(r == ncclTimeout || r == ncclRemoteError, "rank %d: the AllReduce rank 2 skips gave %s", rank,
           ncclGetErrorString(r));
    NCCLCHECK(chorusCommSetTimeout(comm, 0)); /* the split's: CHORUS_TIMEOUT's 5 s */
    if (rank == 1) usleep(1000000);
  }
  NCCLCHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &child, NULL));
  if (works(child, rank, n)) return 1;
  NCCLCHECK(ncclCommDestroy(child));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int shrinkRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 2) _exit(0); /* dies without a word */
  if (revokeStuck(comm, rank, 1)) return 1;
  int dead = 2;
  ncclComm_t child;
  NCCLCHECK(ncclCommShrink(comm, &dead, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
  if (works(child, rank, 2)) return 1;
  NCCLCHECK(ncclCommDestroy(child));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int argsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  ncclResult_t r = ncclCommRevoke(comm, 1);
  EXPECT(r == ncclInvalidArgument, "revoke with flags 1 gave %s", ncclGetErrorString(r));
  EXPECT(strstr(ncclGetLastError(comm), "revokeFlags"), "last error '%s'", ncclGetLastError(comm));
  r = ncclCommRevoke(NULL, 0);
  EXPECT(r == ncclSuccess, "revoke of NULL gave %s", ncclGetErrorString(r));
  if (works(comm, rank, n)) return 1; /* unchanged */
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* An AllReduce over the n communicators one thread drives: sum n(n+1)/2 on each. */
static int groupWorks(ncclComm_t *c, int n) {
  double x[8], sum[8];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    x[r] = r + 1;
    sum[r] = 0;
    NCCLCHECK(ncclAllReduce(&x[r], &sum[r], 1, ncclDouble, ncclSum, c[r], NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    int count = -1, me = -1;
    NCCLCHECK(ncclCommCount(c[r], &count));
    NCCLCHECK(ncclCommUserRank(c[r], &me));
    EXPECT(count == n && me == r, "communicator %d: count %d rank %d", r, count, me);
    EXPECT(sum[r] == n * (n + 1) / 2.0, "communicator %d's AllReduce gave %g", r, sum[r]);
  }
  return 0;
}

static int groupCase(void) {
  enum { n = 3 };
  ncclComm_t comm[n], split[n], shrunk[n - 1];
  NCCLCHECK(ncclCommInitAll(comm, n, NULL));
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommRevoke(comm[r], NCCL_REVOKE_DEFAULT));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommSplit(comm[r], 0, r, &split[r], NULL));
  ncclResult_t res = ncclGroupEnd();
  EXPECT(res == ncclSuccess, "splitting revoked communicators in a group: %s (%s)", ncclGetErrorString(res),
         ncclGetLastError(NULL));
  if (groupWorks(split, n)) return 1;
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommRevoke(split[r], NCCL_REVOKE_DEFAULT));
  int gone = n - 1;
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n - 1; r++) NCCLCHECK(ncclCommShrink(split[r], &gone, 1, &shrunk[r], NULL, NCCL_SHRINK_DEFAULT));
  res = ncclGroupEnd();
  EXPECT(res == ncclSuccess, "shrinking revoked communicators in a group: %s (%s)", ncclGetErrorString(res),
         ncclGetLastError(NULL));
  if (groupWorks(shrunk, n - 1)) return 1;
  for (int r = 0; r < n - 1; r++) NCCLCHECK(ncclCommDestroy(shrunk[r]));
  for (int r = 0; r < n; r++) {
    NCCLCHECK(ncclCommDestroy(split[r]));
    NCCLCHECK(ncclCommDestroy(comm[r]));
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setenv("CHORUS_TIMEOUT", "5", 1); /* past the 2 s a revoke may take: it, not a timeout, must end the wait */
  int failed;
  if (!strcmp(c, "stuck")) failed = runRanks(3, stuckRank, NULL, 30);
  else if (!strcmp(c, "shrink")) failed = runRanks(3, shrinkRank, NULL, 30);
  else if (!strcmp(c, "args")) failed = runRanks(2, argsRank, NULL, 30);
  else if (!strcmp(c, "timedout")) failed = runRanks(3, timedOutRank, NULL, 30);
  else if (!strcmp(c, "group")) failed = groupCase();
  else {
    fprintf(stderr, "usage: test_revoke stuck|shrink|args|timedout|group\n");
    return 2;
  }
  printf("test_revoke %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
