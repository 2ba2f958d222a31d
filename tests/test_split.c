/* ncclCommSplit: colors group the ranks, keys order them (reversed here),
 * NCCL_SPLIT_NOCOLOR gives NULL, and the new communicators work; across
 * forked processes and for ncclCommInitAll ranks split inside a group from
 * one thread. */
#include <string.h>

#include "harness.h"

static int checkChild(ncclComm_t child, int parentRank, int n, int color) {
  int members = 0, before = 0;
  for (int r = 0; r < n; r++)
    if (r % 3 == color && r != n - 1) {
      members++;
      if (r > parentRank) before++; /* key = -rank: higher parent ranks come first */
    }
  int rank, count;
  NCCLCHECK(ncclCommUserRank(child, &rank));
  NCCLCHECK(ncclCommCount(child, &count));
  EXPECT(count == members && rank == before, "parent rank %d: child rank %d of %d, expected %d of %d", parentRank,
         rank, count, before, members);
  int x = parentRank, sum = 0, want = 0;
  for (int r = 0; r < n; r++)
    if (r % 3 == color && r != n - 1) want += r;
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclInt, ncclSum, child, NULL));
  EXPECT(sum == want, "parent rank %d: sum over its color %d, expected %d", parentRank, sum, want);
  return 0;
}

/* The last rank opts out; the others split by rank % 3. */
static int colorOf(int r, int n) { return r == n - 1 ? NCCL_SPLIT_NOCOLOR : r % 3; }

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
  EXPECT(ncclCommSplit(comm, -5, 0, &child, NULL) == ncclInvalidArgument, "negative color accepted");
  EXPECT(ncclCommSplit(comm, 0, 0, NULL, NULL) == ncclInvalidArgument, "NULL newcomm accepted");
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

int main(void) {
  int failed = 0;
  for (int n = 2; n <= 7; n += 5) failed += runRanks(n, rankMain, NULL, 60);
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
  for (int r = 0; r < n; r++) {
    NCCLCHECK(ncclCommDestroy(children[r]));
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  printf("test_split: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
