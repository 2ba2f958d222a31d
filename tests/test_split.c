/* ncclCommSplit: colors group the ranks, keys order them (reversed here),
 * NCCL_SPLIT_NOCOLOR gives NULL, and the new communicators work; across
 * forked processes and for ncclCommInitAll ranks split inside a group from
 * one thread. */
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* child is rank `rank` of `count` and sums the parent ranks in `want` */
static int checkMembers(ncclComm_t child, int parentRank, int rank, int count, int want, const char *what) {
  int r, c, x = parentRank, sum = -1;
  NCCLCHECK(ncclCommUserRank(child, &r));
  NCCLCHECK(ncclCommCount(child, &c));
  EXPECT(r == rank && c == count, "parent rank %d: %s is rank %d of %d, expected %d of %d", parentRank, what, r, c,
         rank, count);
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclInt, ncclSum, child, NULL));
  EXPECT(sum == want, "parent rank %d: %s summed %d, expected %d", parentRank, what, sum, want);
  return 0;
}

/* The child of parent rank parentRank by color (r % 3, the last rank out),
 * keys reversed: higher parent ranks come first. */
static int checkChild(ncclComm_t child, int parentRank, int n, int color) {
  int members = 0, before = 0, want = 0;
  for (int r = 0; r < n; r++)
    if (r % 3 == color && r != n - 1) {
      members++;
      before += r > parentRank;
      want += r;
    }
  return checkMembers(child, parentRank, before, members, want, "the child of its color");
}

/* The last rank opts out; the others split by rank % 3. */
static int colorOf(int r, int n) { return r == n - 1 ? NCCL_SPLIT_NOCOLOR : r % 3; }

/* Several splits and a shrink of one parent in one group: each is what it
 * would be called alone, in the order called (they ran at once, their
 * agreements' messages crossed on the parent's bootstrap, and the ranks
 * failed or waited out the timeout, 600 s by default). The last rank is
 * left out of the shrink, which it does not call. */
static int groupedSplits(ncclComm_t comm, int rank, int n) {
  ncclComm_t byColor = NULL, whole = NULL, byParity = NULL, shrunk = NULL;
  int last = n - 1;
  NCCLCHECK(ncclGroupStart());
  ncclResult_t a = ncclCommSplit(comm, colorOf(rank, n), -rank, &byColor, NULL);
  ncclResult_t b = ncclCommSplit(comm, 0, rank, &whole, NULL);
  ncclResult_t c = rank == last ? ncclSuccess : ncclCommShrink(comm, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
  ncclResult_t d = ncclCommSplit(comm, rank % 2, n - rank, &byParity, NULL);
  ncclResult_t end = ncclGroupEnd(); /* before any check: a failed one must not leave the group open */
  EXPECT(a == ncclSuccess && b == ncclSuccess && c == ncclSuccess && d == ncclSuccess && end == ncclSuccess,
         "rank %d: splits and a shrink in one group: %s %s %s %s, ncclGroupEnd %s", rank, ncclGetErrorString(a),
         ncclGetErrorString(b), ncclGetErrorString(c), ncclGetErrorString(d), ncclGetErrorString(end));
  if (rank == last) EXPECT(byColor == NULL, "NCCL_SPLIT_NOCOLOR in a group gave a communicator");
  else if (checkChild(byColor, rank, n, rank % 3)) return 1;
  if (checkMembers(whole, rank, rank, n, n * (n - 1) / 2, "the split of every rank")) return 1;
  if (rank != last && checkMembers(shrunk, rank, rank, n - 1, (n - 1) * (n - 2) / 2, "the shrink")) return 1;
  int same = 0, higher = 0, sum = 0; /* key n - rank: the higher parent ranks first */
  for (int r = 0; r < n; r++)
    if (r % 2 == rank % 2) same++, higher += r > rank, sum += r;
  if (checkMembers(byParity, rank, higher, same, sum, "the split by parity")) return 1;
  if (byColor) NCCLCHECK(ncclCommDestroy(byColor));
  if (shrunk) NCCLCHECK(ncclCommDestroy(shrunk));
  NCCLCHECK(ncclCommDestroy(whole));
  NCCLCHECK(ncclCommDestroy(byParity));
  return 0;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm, child;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(ncclCommSplit(comm, colorOf(rank, n), -rank, &child, NULL));
  if (rank == n - 1) {
    EXPECT(child == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    if (checkChild(child, rank, n, rank % 3)) return 1;
    NCCLCHECK(ncclCommDestroy(child));
  }
  /* The parent still works after the split. */
  int x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, comm, NULL));
  EXPECT(y == n, "parent allreduce gave %d", y);
  if (groupedSplits(comm, rank, n)) return 1;
  /* Any color but NCCL_SPLIT_NOCOLOR groups ranks, a negative one too, as
   * NCCL's source takes it (its docs ask for >= 0): refused on the ranks
   * that passed it, it had left the others waiting for their timeout. */
  NCCLCHECK(ncclCommSplit(comm, rank % 2 ? -5 : 3, rank, &child, NULL));
  int members = 0, want = 0;
  for (int r = rank % 2; r < n; r += 2) members++, want += r;
  if (checkMembers(child, rank, rank / 2, members, want, "the child of a negative color")) return 1;
  NCCLCHECK(ncclCommDestroy(child));
  EXPECT(ncclCommSplit(comm, 0, 0, NULL, NULL) == ncclInvalidArgument, "NULL newcomm accepted");
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* A group's second split of a parent waits for the first, which waits for
 * a rank that never splits, and another thread aborts the parent: the
 * group fails, in about the abort's time. The waiting split held the
 * parent meanwhile, so the abort waited for it too (it had waited
 * unheld, and split over the bootstrap the abort had closed: 14 of 20
 * runs died of SIGSEGV, says a review). */
static void *abortLater(void *arg) {
  usleep(200000);
  ncclCommAbort(*(ncclComm_t *)arg);
  return NULL;
}
static int abortWhileWaiting(int rank, int n, ncclUniqueId id, void *arg) {
  (void)rank, (void)n, (void)arg;
  ncclComm_t one, comms[2], a = NULL, b = NULL;
  NCCLCHECK(ncclCommInitRank(&one, 1, id, 0)); /* the harness's id, used */
  NCCLCHECK(ncclCommDestroy(one));
  NCCLCHECK(ncclCommInitAll(comms, 2, NULL));
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, abortLater, &comms[0]) == 0, "a thread");
  double t0 = nowSec();
  NCCLCHECK(ncclGroupStart());
  ncclResult_t first = ncclCommSplit(comms[0], 0, 0, &a, NULL);
  ncclResult_t second = ncclCommSplit(comms[0], 0, 0, &b, NULL);
  ncclResult_t end = ncclGroupEnd();
  pthread_join(t, NULL);
  double took = nowSec() - t0;
  EXPECT(first == ncclSuccess && second == ncclSuccess && end != ncclSuccess && a == NULL && b == NULL,
         "splits of an aborted parent: %s, %s, ncclGroupEnd %s, handles %p %p", ncclGetErrorString(first),
         ncclGetErrorString(second), ncclGetErrorString(end), (void *)a, (void *)b);
  EXPECT(took < 5, "the group of an aborted parent's splits took %.1f s", took);
  NCCLCHECK(ncclCommAbort(comms[1]));
  return 0;
}

/* A rank late to a split (3 s, with a 1 s timeout): rank 0 gives up on it
 * first and leaves; rank 1, which came 0.4 s later and waits for the same
 * rank, must name the late rank too, not rank 0 whose leaving it sees
 * first; the late rank fails at once when it comes. */
#include "chorus.h"
static int lateSplit(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm, child = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(chorusCommSetTimeout(comm, 1000));
  if (rank > 0) usleep(rank == n - 1 ? 3000000 : 400000);
  double t0 = nowSec();
  ncclResult_t res = ncclCommSplit(comm, 0, rank, &child, NULL);
  double took = nowSec() - t0;
  const char *why = ncclGetLastError(comm);
  char late[32];
  snprintf(late, sizeof late, "rank %d ", n - 1);
  EXPECT(res != ncclSuccess && child == NULL, "rank %d: a split without rank %d: %s", rank, n - 1,
         ncclGetErrorString(res));
  if (rank < n - 1) EXPECT(strstr(why, late) != NULL, "rank %d's error names someone else: %s", rank, why);
  EXPECT(took < 2.5, "rank %d's split failed after %.1f s (timeout 1 s)", rank, took);
  ncclCommAbort(comm);
  return 0;
}

static int countFds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* What a communicator costs in descriptors once its processes share one
 * already (a torch group is two more, and programs make dozens under
 * RLIMIT_NOFILE's 1024): per local peer a bootstrap connection and the
 * pair's one shared-memory socket, and the monitor's eventfd; the pidfds
 * that watch the peers are the first communicator's, and the listener
 * closes once the peers have connected. (Before: 4 per peer and 2.) */
static int splitDescriptors(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm, child;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  int before = countFds();
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &child, NULL));
  int x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, child, NULL));
  EXPECT(y == n, "the child's allreduce gave %d", y);
  int after = countFds(), budget = 2 * (n - 1) + 1;
  EXPECT(after - before <= budget, "rank %d: a split of %d local ranks took %d descriptors (at most %d)", rank, n,
         after - before, budget);
  NCCLCHECK(ncclCommDestroy(child));
  EXPECT(countFds() == before, "rank %d: %d descriptors after the child's destroy, %d before", rank, countFds(),
         before);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

int main(void) {
  int failed = 0;
  if (!getenv("NCCL_SHM_DISABLE")) failed += runRanks(4, splitDescriptors, NULL, 30);
  failed += runRanks(3, lateSplit, NULL, 30);
  for (int n = 2; n <= 7; n += 5) failed += runRanks(n, rankMain, NULL, 60);
  for (int i = 0; i < 5; i++) failed += runRanks(1, abortWhileWaiting, NULL, 30);
  /* One thread, several ranks: the splits go in a group. */
  int n = 5;
  ncclComm_t comms[5], children[5];
  NCCLCHECK(ncclCommInitAll(comms, n, NULL));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommSplit(comms[r], colorOf(r, n), -r, &children[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    if (r == n - 1) {
      EXPECT(children[r] == NULL, "NOCOLOR child");
      continue;
    }
    int rank, count;
    NCCLCHECK(ncclCommUserRank(children[r], &rank));
    NCCLCHECK(ncclCommCount(children[r], &count));
    int members = 0, before = 0;
    for (int q = 0; q < n - 1; q++)
      if (q % 3 == r % 3) members++, before += q > r;
    EXPECT(rank == before && count == members, "grouped split: rank %d got %d of %d", r, rank, count);
  }
  /* and two splits of each rank in one group, from one thread */
  ncclComm_t halves[5], wholes[5];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommSplit(comms[r], r < 2, r, &halves[r], NULL));
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommSplit(comms[r], 7, -r, &wholes[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    int rank, count;
    NCCLCHECK(ncclCommUserRank(halves[r], &rank));
    NCCLCHECK(ncclCommCount(halves[r], &count));
    EXPECT(rank == (r < 2 ? r : r - 2) && count == (r < 2 ? 2 : 3), "two grouped splits: rank %d got %d of %d", r,
           rank, count);
    NCCLCHECK(ncclCommUserRank(wholes[r], &rank));
    NCCLCHECK(ncclCommCount(wholes[r], &count));
    EXPECT(rank == n - 1 - r && count == n, "two grouped splits: rank %d got %d of %d in the second", r, rank, count);
  }
  for (int r = 0; r < n; r++) {
    NCCLCHECK(ncclCommDestroy(halves[r]));
    NCCLCHECK(ncclCommDestroy(wholes[r]));
    NCCLCHECK(ncclCommDestroy(children[r]));
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  printf("test_split: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
