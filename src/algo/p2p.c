/* Send and Recv: one task on the point-to-point lane of the peer, in each
 * direction its own lane, so sends and receives of a group never wait on
 * each other. */
#include "algo/build.h"

static int p2pSupports(int coll, int nranks) {
  (void)nranks;
  return coll == collSend || coll == collRecv;
}

/* What a count-0 send carries: a slot, for its descriptor alone. Without
 * it a receive of 0 would match nothing, and the peer's next send would
 * meet the receive after it (the data of one call in another's buffer). */
static const uint64_t token;

static ncclResult_t p2pBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  (void)nch;
  size_t bytes = d->count * dtypeSize(d->dtype);
  if (bytes == 0) /* a receive's token has no destination: only its descriptor counts */
    return p2pTask(s, c, d, d->coll == collSend, d->root, d->coll == collSend ? &token : NULL, sizeof token);
  return d->coll == collSend ? p2pTask(s, c, d, 1, d->root, d->sendbuff, bytes)
                             : p2pTask(s, c, d, 0, d->root, d->recvbuff, bytes);
}

/* A send's buffer is the caller's until the operation ends. */
static int p2pStableSends(int coll) { return coll == collSend; }

const struct algoFamily p2pAlgo = {.supports = p2pSupports, .build = p2pBuild, .stableSends = p2pStableSends};
