/* Small messages in one hop.
 * AllReduce: every rank sends its pre-multiplied input to every peer (each
 * rank scales by its own scalar, as PreMulSum allows ranks to differ) and
 * adds all inputs in rank order, so all ranks get the same bits.
 * ReduceScatter: the same with block p of the input sent to rank p only.
 * AllGather: every rank sends its block to every peer.
 * Broadcast: the root sends its input to every peer. Under CHORUS_CHECK,
 * whose agreement already has every rank send a token to every other (one
 * round up to AGREE_RADIX ranks), the root's tokens carry the data: the
 * Broadcast costs the agreement alone, not the agreement and then a chain.
 * One round instead of recursive doubling's log2(n) or a ring's n-1: with
 * more ranks than cores a round is a trip through the scheduler. The
 * tuner keeps it to messages (a rank's block) that fit a slot and the
 * scratch. */
#include "algo/build.h"

static int oneHopSupports(int coll, int nranks) {
  return nranks >= 2 &&
         (coll == collAllReduce || coll == collBroadcast || coll == collReduceScatter || coll == collAllGather);
}

static int oneHopAgrees(int coll, int nranks) { return coll == collBroadcast && nranks <= AGREE_RADIX; }

static ncclResult_t oneHopBroadcast(struct schedule *s, struct algoCtx *c, const struct collDesc *d) {
  int n = c->nranks, r = c->rank, root = d->root;
  size_t bytes = d->count * dtypeSize(d->dtype);
  int copy = r == root && d->sendbuff != d->recvbuff;
  if (c->check && oneHopAgrees(d->coll, n)) {
    if (copy) {
      CHECK(laneTask(s, c, d, 0));
      ADD(s, stepCopy, 0, NULL, NULL, d->sendbuff, d->recvbuff, bytes);
    }
    struct agreeData data = {root, d->sendbuff, d->recvbuff, bytes};
    return agreeBuild(s, c, d, &data);
  }
  CHECK(laneTask(s, c, d, 0));
  if (r != root) {
    ADD(s, stepRecv, 0, connRecv(c->conns, root, 0), NULL, NULL, d->recvbuff, bytes);
    return ncclSuccess;
  }
  for (int j = 1; j < n; j++)
    ADD(s, stepSend, 0, NULL, connSend(c->conns, mod(r + j, n), 0), d->sendbuff, NULL, bytes);
  if (copy) ADD(s, stepCopy, 0, NULL, NULL, d->sendbuff, d->recvbuff, bytes);
  return ncclSuccess;
}

/* dst = the n ranks' inputs (own is mine) added in rank order; every
 * peer's arrives on its channel-0 connection. */
static ncclResult_t addInRankOrder(struct schedule *s, struct algoCtx *c, const char *own, char *dst, size_t bytes) {
  int n = c->nranks, r = c->rank;
  if (own == dst && r != 0) { /* the output is written before our own turn */
    ADD(s, stepCopy, 0, NULL, NULL, own, c->scratch, bytes);
    own = c->scratch;
  }
  for (int i = 0; i < n; i++) {
    int post = i == n - 1 ? REDUCE_POST : 0;
    struct conn *in = i == r ? NULL : connRecv(c->conns, i, 0);
    if (i == 0)
      ADD(s, in ? stepRecv : stepCopy, in ? post : REDUCE_PRE | post, in, NULL, own, dst, bytes);
    else
      ADD(s, in ? stepRecvAcc : stepLocalAcc, in ? post : REDUCE_PRE | post, in, NULL, own, dst, bytes);
  }
  return ncclSuccess;
}

static ncclResult_t oneHopBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  (void)nch;
  if (d->coll == collBroadcast) return oneHopBroadcast(s, c, d);
  int n = c->nranks, r = c->rank;
  size_t bytes = d->count * dtypeSize(d->dtype);
  const char *in = d->sendbuff;
  char *out = d->recvbuff;
  CHECK(laneTask(s, c, d, 0));
  for (int j = 1; j < n; j++) {
    int p = mod(r + j, n);
    const char *what = d->coll == collReduceScatter ? in + (size_t)p * bytes : in;
    ADD(s, stepSend, d->coll == collAllGather ? 0 : REDUCE_PRE, NULL, connSend(c->conns, p, 0), what, NULL, bytes);
  }
  /* ReduceScatter's input and AllGather's output are n blocks of bytes */
  if (d->coll == collReduceScatter) return addInRankOrder(s, c, in + (size_t)r * bytes, out, bytes);
  if (d->coll == collAllReduce) return addInRankOrder(s, c, in, out, bytes);
  if (in != out + (size_t)r * bytes) ADD(s, stepCopy, 0, NULL, NULL, in, out + (size_t)r * bytes, bytes);
  for (int j = 1; j < n; j++) {
    int p = mod(r - j, n);
    ADD(s, stepRecv, 0, connRecv(c->conns, p, 0), NULL, NULL, out + (size_t)p * bytes, bytes);
  }
  return ncclSuccess;
}

/* Its sends are the caller's input: ReduceScatter's blocks for the others
 * and AllGather's block, which even in place it never writes (the output is
 * the other blocks), and AllReduce's whole input, which only in place it
 * overwrites. */
static int oneHopMappedSends(const struct collDesc *d, int nranks) {
  (void)nranks;
  return d->coll == collReduceScatter || d->coll == collAllGather ||
         (d->coll == collAllReduce && d->sendbuff != d->recvbuff);
}

const struct algoFamily oneHopAlgo = {
    .supports = oneHopSupports, .build = oneHopBuild, .mappedSends = oneHopMappedSends, .agrees = oneHopAgrees};
