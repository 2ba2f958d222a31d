/* Small messages in one hop.
 * AllReduce: every rank sends its pre-multiplied input to every peer (each
 * rank scales by its own scalar, as PreMulSum allows ranks to differ) and
 * adds all inputs in rank order, so all ranks get the same bits.
 * Broadcast: the root sends its input to every peer. Under CHORUS_CHECK,
 * whose agreement already has every rank send a token to every other (one
 * round up to AGREE_RADIX ranks), the root's tokens carry the data: the
 * Broadcast costs the agreement alone, not the agreement and then a chain.
 * The tuner keeps it to messages that fit a slot and the scratch. */
#include "algo/build.h"

static int oneHopSupports(int coll, int nranks) {
  return nranks >= 2 && (coll == collAllReduce || coll == collBroadcast);
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

static ncclResult_t oneHopBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  (void)nch;
  if (d->coll == collBroadcast) return oneHopBroadcast(s, c, d);
  int n = c->nranks, r = c->rank;
  size_t bytes = d->count * dtypeSize(d->dtype);
  const char *own = d->sendbuff;
  char *dst = d->recvbuff;
  CHECK(laneTask(s, c, d, 0));
  for (int j = 1; j < n; j++) {
    int p = mod(r + j, n);
    ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, p, 0), own, NULL, bytes);
  }
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

const struct algoFamily oneHopAlgo = {oneHopSupports, oneHopBuild, NULL, oneHopAgrees};
