/* Chains for the rooted collectives: Broadcast down the ring from the root
 * and Reduce up it to the root (the communicator's ring order, a host's
 * ranks together), one chain per channel, each streaming slot by slot. */
#include "algo/build.h"

static int chainSupports(int coll, int nranks) {
  return nranks >= 2 && (coll == collBroadcast || coll == collReduce);
}

static ncclResult_t chainBroadcast(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                   size_t off, size_t cnt) {
  int n = c->nranks, r = ringPosOf(c, c->rank), pos = mod(r - ringPosOf(c, d->root), n);
  size_t esz = dtypeSize(d->dtype);
  struct conn *in = pos > 0 ? connRecv(c->conns, ringRank(c, r - 1), ch) : NULL;
  struct conn *out = pos < n - 1 ? connSend(c->conns, ringRank(c, r + 1), ch) : NULL;
  CHECK(laneTask(s, c, d, ch));
  char *dst = (char *)d->recvbuff + off * esz;
  if (pos == 0) ADD(s, stepCopySend, 0, NULL, out, (const char *)d->sendbuff + off * esz, dst, cnt * esz);
  else if (out) ADD(s, stepRecvCopySend, 0, in, out, NULL, dst, cnt * esz);
  else ADD(s, stepRecv, 0, in, NULL, NULL, dst, cnt * esz);
  return ncclSuccess;
}

static ncclResult_t chainReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                size_t off, size_t cnt) {
  int n = c->nranks, r = ringPosOf(c, c->rank), pos = mod(r - ringPosOf(c, d->root) - 1, n);
  size_t esz = dtypeSize(d->dtype);
  struct conn *in = pos > 0 ? connRecv(c->conns, ringRank(c, r - 1), ch) : NULL;
  struct conn *out = pos < n - 1 ? connSend(c->conns, ringRank(c, r + 1), ch) : NULL;
  CHECK(laneTask(s, c, d, ch));
  const char *src = (const char *)d->sendbuff + off * esz;
  if (pos == 0) ADD(s, stepSend, REDUCE_PRE, NULL, out, src, NULL, cnt * esz);
  else if (out) ADD(s, stepRecvReduceSend, REDUCE_PRE, in, out, src, NULL, cnt * esz);
  else ADD(s, stepRecvReduceCopy, REDUCE_PRE | REDUCE_POST, in, NULL, src, (char *)d->recvbuff + off * esz, cnt * esz);
  return ncclSuccess;
}

static ncclResult_t chainBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  return perChannel(d->coll == collBroadcast ? chainBroadcast : chainReduce, s, c, d, nch, 0);
}

/* Broadcast forwards what it wrote into the output; Reduce sends partial sums. */
static int chainStableSends(int coll) { return coll == collBroadcast; }

const struct algoFamily chainAlgo = {.supports = chainSupports, .build = chainBuild, .stableSends = chainStableSends};
