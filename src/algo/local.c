/* One rank: every collective is a copy of its input (reduced alone: the
 * pre- and post-scaling of avg and PreMulSum still apply). */
#include "algo/build.h"

static int localSupports(int coll, int nranks) {
  return nranks == 1 && (coll == collAllReduce || coll == collBroadcast || coll == collReduce ||
                         coll == collAllGather || coll == collReduceScatter);
}

static ncclResult_t localBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  (void)nch;
  CHECK(laneTask(s, c, d, 0));
  size_t bytes = d->count * dtypeSize(d->dtype);
  ADD(s, stepCopy, REDUCE_PRE | REDUCE_POST, NULL, NULL, d->sendbuff, d->recvbuff, bytes);
  return ncclSuccess;
}

const struct algoFamily localAlgo = {.supports = localSupports, .build = localBuild};
