/* AlltoAll, Gather and Scatter as NCCL builds them: grouped sends and
 * receives between pairs (block p of a buffer is at p * count). The rank's
 * own block is a local copy (none when already in place). */
#include "algo/build.h"

static int pairwiseSupports(int coll, int nranks) {
  (void)nranks;
  return coll == collAlltoAll || coll == collGather || coll == collScatter;
}

static ncclResult_t pairwiseBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  (void)nch;
  int n = c->nranks, r = c->rank, root = d->root;
  size_t bytes = d->count * dtypeSize(d->dtype);
  const char *in = d->sendbuff;
  char *out = d->recvbuff;
  int staged = -1; /* in-place AlltoAll: the copy every send and receive waits for */
  if (d->coll == collAlltoAll && in == out && n > 1) {
    char *stage = scheduleTemp(s, bytes * n);
    if (!stage) return ncclSystemError;
    CHECK(laneTask(s, c, d, 0));
    ADD(s, stepCopy, 0, NULL, NULL, in, stage, bytes * n);
    staged = s->ntasks - 1;
    in = stage;
  }
  for (int j = 0; j < n; j++) {
    int p = mod(r + j, n); /* start with different peers on different ranks */
    int sendTo = d->coll == collAlltoAll || (d->coll == collGather && p == root) || (d->coll == collScatter && r == root);
    int recvFrom = d->coll == collAlltoAll || (d->coll == collGather && r == root) || (d->coll == collScatter && p == root);
    const char *sblk = d->coll == collScatter || d->coll == collAlltoAll ? in + p * bytes : in;
    char *rblk = d->coll == collGather || d->coll == collAlltoAll ? out + p * bytes : out;
    if (p == r) {
      if (sendTo && recvFrom && sblk != rblk) {
        CHECK(laneTask(s, c, d, 0));
        ADD(s, stepCopy, 0, NULL, NULL, sblk, rblk, bytes);
      }
      continue;
    }
    if (sendTo) {
      CHECK(p2pTask(s, c, d, 1, p, sblk, bytes));
      s->tasks[s->ntasks - 1].dep2 = staged;
    }
    if (recvFrom) {
      CHECK(p2pTask(s, c, d, 0, p, rblk, bytes));
      s->tasks[s->ntasks - 1].dep2 = staged;
    }
  }
  return ncclSuccess;
}

/* Every send reads the input (or, in place, the staging copy made before any send). */
static int pairwiseStableSends(int coll) { return pairwiseSupports(coll, 2); }

const struct algoFamily pairwiseAlgo = {
    .supports = pairwiseSupports, .build = pairwiseBuild, .stableSends = pairwiseStableSends};
