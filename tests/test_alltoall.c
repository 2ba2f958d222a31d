/* AlltoAll, Gather and Scatter: every datatype, every root, in place and out
 * of place, counts 0, 1, odd and larger than a FIFO slot,
 * guard bytes around every buffer; on forked processes.
 *   test_alltoall <nranks> */
#include <string.h>

#include "harness.h"
#include "values.h"

/* Element i of the block that rank `from` sends to rank `to`. */
static double val(int from, int to, size_t i, int t) {
  return (double)((from * 7 + to * 3 + i) % (t >= ncclFloat8e4m3 ? 2 : 4));
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  static const size_t counts[] = {0, 1, 1001, 300001};
  for (int ci = 0; ci < 4; ci++)
    for (int t = 0; t < ncclNumTypes; t++) {
      size_t count = counts[ci], esz = typeSize(t), blk = count * esz;
      if (ci == 3 && t != ncclFloat32) continue;
      char *s = guardAlloc(blk * n), *r = guardAlloc(blk * n);
      /* AlltoAll */
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) putValue(t, s + p * blk, i, val(rank, p, i, t));
      memset(r, 0x5c, blk * n);
      NCCLCHECK(ncclAlltoAll(s, r, count, t, comm, NULL));
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
          EXPECT(getValue(t, r + p * blk, i) == val(p, rank, i, t), "alltoall type %d count %zu: block %d element %zu",
                 t, count, p, i);
      /* In place: staged through a copy, so blocks are not overwritten before they are sent. */
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) putValue(t, r + p * blk, i, val(rank, p, i, t));
      NCCLCHECK(ncclAlltoAll(r, r, count, t, comm, NULL));
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
          EXPECT(getValue(t, r + p * blk, i) == val(p, rank, i, t), "in-place alltoall type %d count %zu: block %d",
                 t, count, p);
      for (int root = 0; root < n; root++)
        for (int inplace = 0; inplace < 2; inplace++) {
          /* Gather: everyone's block `rank` ends on the root at rank * count. */
          memset(r, 0x5c, blk * n);
          char *gs = inplace && rank == root ? r + rank * blk : s;
          for (size_t i = 0; i < count; i++) putValue(t, gs, i, val(rank, root, i, t));
          NCCLCHECK(ncclGather(gs, r, count, t, root, comm, NULL));
          if (rank == root)
            for (int p = 0; p < n; p++)
              for (size_t i = 0; i < count; i++)
                EXPECT(getValue(t, r + p * blk, i) == val(p, root, i, t), "gather root %d: block %d element %zu",
                       root, p, i);
          /* Scatter: the root's block p ends on rank p. */
          char *rs = inplace && rank == root ? s + rank * blk : r;
          if (rank == root)
            for (int p = 0; p < n; p++)
              for (size_t i = 0; i < count; i++) putValue(t, s + p * blk, i, val(root, p, i, t));
          if (!(inplace && rank == root)) memset(rs, 0x5c, blk);
          NCCLCHECK(ncclScatter(s, rs, count, t, root, comm, NULL));
          for (size_t i = 0; i < count; i++)
            EXPECT(getValue(t, rs, i) == val(root, rank, i, t), "scatter root %d: element %zu", root, i);
        }
      EXPECT(!guardCheck(s) && !guardCheck(r), "guard bytes");
      guardFree(s);
      guardFree(r);
    }
  float x[8];
  EXPECT(ncclGather(x, x, 1, ncclFloat, n, comm, NULL) == ncclInvalidArgument, "bad gather root accepted");
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int failed = runRanks(n, rankMain, NULL, 300);
  printf("test_alltoall %d ranks: %s\n", n, failed ? "FAILED" : "passed");
  return failed != 0;
}
