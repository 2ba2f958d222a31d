/* ncclCommShrink makes a working communicator of the survivors:
 *   dead - 4 ranks, rank 2 SIGKILLs itself mid-loop; the others get
 *          ncclRemoteError, shrink with NCCL_SHRINK_ABORT excluding it, and
 *          run validated collectives on the 3-rank result (ranks keep the
 *          parent's order), then destroy both communicators.
 *   live - 4 healthy ranks, 0..2 shrink away rank 3 (NCCL_SHRINK_DEFAULT);
 *          rank 3 trying to shrink itself away, a NULL or empty list, an
 *          out-of-range rank and bad flags all give ncclInvalidArgument.
 *   differ - ranks 0 and 1 exclude rank 3, rank 2 excludes 1 and 3: each
 *          of the three gets ncclInvalidUsage naming a rank it disagrees
 *          with (host and pid) within 2 s (measured 0-200 ms), none a
 *          communicator.
 *   leader - the same where the lists disagree on the first survivor, who
 *          hands out the new rendezvous: ranks 0 and 1 exclude rank 3,
 *          rank 2 excludes rank 0 (until 2026-12-06 every rank waited for
 *          its timeout); and cycle - 3 ranks, each excludes the next one:
 *          no two agree, and no rank keeps a rank that keeps it, so no
 *          rank can tell the others' lists from their next shrinks (as
 *          torch's new_group makes them, subsets at their own pace): each
 *          fails at its timeout, naming the rank it waited for, or is told
 *          by one that did.
 *   subsets - subsets of 4 ranks made by their members alone, each at its
 *          own pace, as torch's new_group makes them (subsetsRank).
 *   abort - 3 ranks; rank 1 alone calls ncclCommShrink (excluding rank 2),
 *          then ncclCommSplit and ncclCommGrow, each on a communicator of
 *          its own, while the others are busy elsewhere; a second thread
 *          ncclCommAborts that parent after 0.3 s: each call returns
 *          ncclInvalidUsage ("ended by ncclCommAbort") within a second, not
 *          at the 4 s timeout (until 2026-12-06 the shrink's wait did not
 *          look at the abort flag, and none of the three held the parent,
 *          so the abort freed what they read: ASan builds see that).
 *   test_shrink <case> */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* The survivors' new communicator works: counts, order and results. */
static int checkChild(ncclComm_t child, int parentRank, const int *survivors, int m) {
  int count, rank;
  NCCLCHECK(ncclCommCount(child, &count));
  NCCLCHECK(ncclCommUserRank(child, &rank));
  EXPECT(count == m, "child has %d ranks, expected %d", count, m);
  EXPECT(survivors[rank] == parentRank, "parent rank %d became child rank %d", parentRank, rank);
  int mine = parentRank, all[8];
  NCCLCHECK(ncclAllGather(&mine, all, 1, ncclInt32, child, NULL));
  for (int i = 0; i < m; i++) EXPECT(all[i] == survivors[i], "AllGather[%d] = %d, expected %d", i, all[i], survivors[i]);
  double x = parentRank + 1, sum = 0, want = 0;
  for (int i = 0; i < m; i++) want += survivors[i] + 1;
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclDouble, ncclSum, child, NULL));
  EXPECT(sum == want, "AllReduce gave %g, expected %g", sum, want);
  return 0;
}

static int deadRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = 1;
  ncclResult_t res = ncclSuccess;
  for (int iter = 0; res == ncclSuccess; iter++) {
    if (rank == 2 && iter == 5) raise(SIGKILL);
    res = ncclAllReduce(buf, buf, 256, ncclFloat, ncclSum, comm, NULL);
  }
  EXPECT(res == ncclRemoteError, "rank %d: got %s", rank, ncclGetErrorString(res));
  int exclude[] = {2}, survivors[] = {0, 1, 3};
  ncclComm_t child;
  double t0 = nowSec();
  NCCLCHECK(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_ABORT));
  double t = nowSec() - t0;
  EXPECT(t < 2.0, "shrink took %.2f s", t);
  if (checkChild(child, rank, survivors, 3)) return 1;
  fprintf(stderr, "rank %d: shrink after rank 2 died took %.0f ms; the 3-rank communicator works\n", rank, t * 1e3);
  faultTime("ncclCommShrink(NCCL_SHRINK_ABORT) after a death", ncclSuccess, t * 1e3);
  NCCLCHECK(ncclCommDestroy(child));
  t0 = nowSec();
  NCCLCHECK(ncclCommDestroy(comm)); /* after a failure: must not block */
  EXPECT(nowSec() - t0 < 1.0, "destroying the failed parent took %.2f s", nowSec() - t0);
  return 0;
}

static int liveRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm, child = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  int exclude[] = {3}, survivors[] = {0, 1, 2}, bad[] = {7};
  EXPECT(ncclCommShrink(comm, NULL, 1, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument, "NULL list");
  EXPECT(ncclCommShrink(comm, exclude, 0, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument, "empty list");
  EXPECT(ncclCommShrink(comm, bad, 1, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument, "rank out of range");
  EXPECT(ncclCommShrink(comm, exclude, 1, &child, NULL, 5) == ncclInvalidArgument, "bad flags");
  EXPECT(ncclCommShrink(comm, exclude, 1, NULL, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument, "NULL newcomm");
  if (rank == 3) {
    EXPECT(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument,
           "an excluded rank's shrink");
    EXPECT(strstr(ncclGetLastError(comm), "excluded ranks must not call"), "last error '%s'", ncclGetLastError(comm));
    usleep(1000000); /* the others are done with the parent's mesh by then */
  } else {
    NCCLCHECK(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
    if (checkChild(child, rank, survivors, 3)) return 1;
    NCCLCHECK(ncclCommDestroy(child));
    /* The parent still works too, with every rank. */
  }
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Lists that differ (arg: which case): every rank that calls fails within
 * 2 s (measured: 0-200 ms) with ncclInvalidUsage naming a rank (host and pid), gets no
 * communicator, and none waits for its timeout. */
struct differCase {
  int exclude[4][2]; /* each rank's list, -1 ended; none: it does not call */
  int count[4];
  int atTimeout; /* no two ranks that keep each other disagree: each fails at its timeout (5 s) or is told */
};

static int differRank(int rank, int n, ncclUniqueId id, void *arg) {
  const struct differCase *c = arg;
  ncclComm_t comm, child = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  int *exclude = (int *)c->exclude[rank];
  double t0 = nowSec();
  if (c->count[rank] == 0) { /* excluded by all: takes no part */
    usleep(1500000);
    NCCLCHECK(ncclCommDestroy(comm));
    return 0;
  }
  ncclResult_t res = ncclCommShrink(comm, exclude, c->count[rank], &child, NULL, NCCL_SHRINK_DEFAULT);
  double s = nowSec() - t0;
  const char *why = ncclGetLastError(NULL);
  fprintf(stderr, "rank %d: %s after %.0f ms: %s\n", rank, ncclGetErrorString(res), s * 1e3, why);
  if (c->atTimeout)
    EXPECT((res == ncclTimeout || res == ncclInvalidUsage) && strstr(why, "ncclCommShrink") && strstr(why, " pid ") &&
               s < 7.0,
           "rank %d: %s after %.2f s: %s", rank, ncclGetErrorString(res), s, why);
  else
    EXPECT(res == ncclInvalidUsage && strstr(why, "ncclCommShrink") && strstr(why, "exclude") && strstr(why, " pid ") &&
               s < 2.0,
           "rank %d: %s after %.2f s: %s", rank, ncclGetErrorString(res), s, why);
  EXPECT(child == NULL, "rank %d: a failed shrink left a communicator", rank);
  faultTime("ncclCommShrink with exclude lists that differ", res, s * 1e3);
  ncclCommAbort(comm); /* the mesh saw failures: no goodbyes */
  return 0;
}

/* Subsets of 4 ranks, each made by its members alone at their own pace, as
 * torch's new_group makes them: {0,2}, {1,3}, {3}, {0,3}, {0,1,2}, every
 * rank in its order. Rank 1 comes to {1,3} late, so rank 3 waits there
 * while rank 0, done with {0,2}, sends rank 3 its list for {0,3}: the
 * next shrink of the two, not a disagreement. Each child must work. */
static int subsetsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  static const int layouts[][4] = {{0, 2, -1}, {1, 3, -1}, {3, -1}, {0, 3, -1}, {0, 1, 2, -1}};
  ncclComm_t comm, child[5] = {NULL};
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  for (int l = 0; l < 5; l++) {
    int in = 0, m = 0, me = -1, excl[4], nexcl = 0;
    for (int k = 0; k < 4 && layouts[l][k] >= 0; k++) {
      if (layouts[l][k] == rank) me = m;
      in |= 1 << layouts[l][k];
      m++;
    }
    if (me < 0) continue;
    for (int r = 0; r < n; r++)
      if (!(in & (1 << r))) excl[nexcl++] = r;
    if (rank == 1 && l == 1) usleep(300000);
    NCCLCHECK(ncclCommShrink(comm, excl, nexcl, &child[l], NULL, NCCL_SHRINK_DEFAULT));
    int x = rank + 1, sum = 0, want = 0;
    for (int k = 0; k < m; k++) want += layouts[l][k] + 1;
    NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclInt, ncclSum, child[l], NULL));
    EXPECT(sum == want, "rank %d: the AllReduce of subset %d gave %d, want %d", rank, l, sum, want);
  }
  for (int l = 0; l < 5; l++)
    if (child[l]) NCCLCHECK(ncclCommDestroy(child[l]));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

struct abortAfter {
  ncclComm_t comm;
  double at, took; /* when the abort began, how long it took */
};

static void *abortAfter(void *p) {
  struct abortAfter *a = p;
  usleep(300000);
  a->at = nowSec();
  ncclCommAbort(a->comm);
  a->took = nowSec() - a->at;
  return NULL;
}

/* Rank 1 alone calls what (0 shrink, 1 split, 2 grow) on comm, which a
 * second thread aborts meanwhile. */
static int abortedCall(ncclComm_t comm, int what) {
  static const char *const names[] = {"ncclCommShrink", "ncclCommSplit", "ncclCommGrow"};
  struct abortAfter a = {comm, 0, 0};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, abortAfter, &a) == 0, "a thread");
  ncclComm_t child = NULL;
  int exclude[] = {2};
  ncclResult_t res = what == 0   ? ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT)
                     : what == 1 ? ncclCommSplit(comm, 0, 0, &child, NULL)
                                 : ncclCommGrow(comm, 4, NULL, -1, &child, NULL);
  double end = nowSec();
  pthread_join(t, NULL);
  const char *why = ncclGetLastError(NULL);
  fprintf(stderr, "rank 1: %s returned %s %.1f ms after ncclCommAbort began, which took %.1f ms: %s\n", names[what],
          ncclGetErrorString(res), (end - a.at) * 1e3, a.took * 1e3, why);
  EXPECT(res == ncclInvalidUsage && strstr(why, "ended by ncclCommAbort"), "%s: %s: %s", names[what],
         ncclGetErrorString(res), why);
  EXPECT(end - a.at < 1.0 && a.took < 1.0, "%s returned %.2f s after the abort began, which took %.2f s", names[what],
         end - a.at, a.took);
  EXPECT(child == NULL, "%s left a communicator", names[what]);
  faultTime(what == 0 ? "ncclCommAbort of the parent during ncclCommShrink" : what == 1 ?
            "ncclCommAbort of the parent during ncclCommSplit" : "ncclCommAbort of the parent during ncclCommGrow",
            res, (end - a.at) * 1e3);
  return 0;
}

static int abortRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm[3];
  NCCLCHECK(ncclCommInitRank(&comm[0], n, id, rank));
  NCCLCHECK(ncclCommSplit(comm[0], 0, rank, &comm[1], NULL));
  NCCLCHECK(ncclCommSplit(comm[0], 0, rank, &comm[2], NULL));
  if (rank != 1) { /* busy elsewhere until rank 1 is done */
    usleep(2500000);
    for (int i = 0; i < 3; i++) ncclCommAbort(comm[i]); /* rank 1 aborted: no goodbyes */
    return 0;
  }
  for (int what = 0; what < 3; what++)
    if (abortedCall(comm[what], what)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "dead";
  int failed;
  if (strcmp(which, "dead") == 0) failed = runRanks(4, deadRank, NULL, 30) != 1; /* rank 2 dies */
  else if (strcmp(which, "differ") == 0 || strcmp(which, "leader") == 0 || strcmp(which, "cycle") == 0) {
    static const struct differCase differ = {{{3, -1}, {3, -1}, {1, 3}, {-1}}, {1, 1, 2, 0}, 0};
    static const struct differCase leader = {{{3, -1}, {3, -1}, {0, -1}, {-1}}, {1, 1, 1, 0}, 0};
    static const struct differCase cycle = {{{1, -1}, {2, -1}, {0, -1}, {-1}}, {1, 1, 1, 0}, 1};
    setenv("CHORUS_TIMEOUT", "5", 1); /* a rank left waiting fails the test within seconds */
    failed = which[0] == 'd' ? runRanks(4, differRank, (void *)&differ, 30)
             : which[0] == 'l' ? runRanks(4, differRank, (void *)&leader, 30)
                               : runRanks(3, differRank, (void *)&cycle, 30);
  }
  else if (strcmp(which, "subsets") == 0) {
    setenv("CHORUS_TIMEOUT", "5", 1);
    failed = runRanks(4, subsetsRank, NULL, 30);
  }
  else if (strcmp(which, "abort") == 0) {
    setenv("CHORUS_TIMEOUT", "4", 1); /* a call the abort does not end fails the test within seconds */
    failed = runRanks(3, abortRank, NULL, 30);
  }
  else failed = runRanks(4, liveRank, NULL, 30);
  printf("test_shrink %s: %s\n", which, failed ? "FAILED" : "passed");
  return failed != 0;
}
