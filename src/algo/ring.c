/* Rings: AllReduce as reduce-scatter then all-gather, AllGather and
 * ReduceScatter as one pass; each channel has its own ring over its own
 * connections, and each step streams slot by slot, so the ring is
 * pipelined. The ring visits the ranks in the communicator's ring order
 * (algoRingOrder: a host's ranks together), so below "position" is a
 * place on the ring and blocks that belong to a rank are named by rank. */
#include "algo/build.h"

static int ringSupports(int coll, int nranks) {
  return nranks >= 2 && (coll == collAllReduce || coll == collAllGather || coll == collReduceScatter);
}

/* AllReduce of elements [off, off + cnt) on channel ch: 2(n-1) steps. */
static ncclResult_t ringAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                  size_t off, size_t cnt) {
  int n = c->nranks, r = ringPosOf(c, c->rank); /* AllReduce's blocks are the ring's: by position */
  size_t esz = dtypeSize(d->dtype), align = 64 / esz;
  size_t per = ((cnt + n - 1) / n + align - 1) / align * align;
  struct conn *in = connRecv(c->conns, ringRank(c, r - 1), ch), *out = connSend(c->conns, ringRank(c, r + 1), ch);
  const char *src = d->sendbuff;
  char *dst = d->recvbuff;
#define BLOCK(b, O, N)                                              \
  size_t O = off + (size_t)(b)*per < off + cnt ? off + (size_t)(b)*per : off + cnt; \
  size_t N = ((O + per < off + cnt) ? O + per : off + cnt) - O
  CHECK(laneTask(s, c, d, ch));
  {
    /* With two ranks the next one's sum of this block is its result here
     * too: it may write it here itself (stepSend's dst, schedule.h). */
    BLOCK(mod(r - 1, n), o, k);
    ADD(s, stepSend, REDUCE_PRE, NULL, out, src + o * esz, n == 2 ? dst + o * esz : NULL, k * esz);
  }
  for (int j = 2; j < n; j++) {
    BLOCK(mod(r - j, n), o, k);
    ADD(s, stepRecvReduceSend, REDUCE_PRE, in, out, src + o * esz, NULL, k * esz);
  }
  {
    BLOCK(r, o, k);
    ADD(s, stepRecvReduceCopySend, REDUCE_PRE | REDUCE_POST, in, out, src + o * esz, dst + o * esz, k * esz);
  }
  for (int j = 1; j < n - 1; j++) {
    BLOCK(mod(r - j, n), o, k);
    ADD(s, stepRecvCopySend, 0, in, out, NULL, dst + o * esz, k * esz);
  }
  {
    BLOCK(mod(r + 1, n), o, k);
    ADD(s, stepRecv, 0, in, NULL, NULL, dst + o * esz, k * esz);
  }
#undef BLOCK
  return ncclSuccess;
}

/* AllGather: my block travels n-1 hops; block b sits at recvbuff + b*count. */
static ncclResult_t ringAllGather(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                  size_t off, size_t cnt) {
  int n = c->nranks, p = ringPosOf(c, c->rank);
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  struct conn *in = connRecv(c->conns, ringRank(c, p - 1), ch), *out = connSend(c->conns, ringRank(c, p + 1), ch);
  char *dst = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  /* At step j the block that arrives started j positions back. */
  ADD(s, stepCopySend, 0, NULL, out, (const char *)d->sendbuff + off * esz, dst + c->rank * blk, bytes);
  for (int j = 1; j < n - 1; j++)
    ADD(s, stepRecvCopySend, 0, in, out, NULL, dst + ringRank(c, p - j) * blk, bytes);
  ADD(s, stepRecv, 0, in, NULL, NULL, dst + ringRank(c, p + 1) * blk, bytes);
  return ncclSuccess;
}

/* ReduceScatter: block b of sendbuff (at b*count) ends reduced on rank b. */
static ncclResult_t ringReduceScatter(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                      size_t off, size_t cnt) {
  int n = c->nranks, p = ringPosOf(c, c->rank);
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  struct conn *in = connRecv(c->conns, ringRank(c, p - 1), ch), *out = connSend(c->conns, ringRank(c, p + 1), ch);
  const char *src = (const char *)d->sendbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  /* The block of the rank j positions back passes here on its way to it. */
  ADD(s, stepSend, REDUCE_PRE, NULL, out, src + ringRank(c, p - 1) * blk, NULL, bytes);
  for (int j = 2; j < n; j++)
    ADD(s, stepRecvReduceSend, REDUCE_PRE, in, out, src + ringRank(c, p - j) * blk, NULL, bytes);
  ADD(s, stepRecvReduceCopy, REDUCE_PRE | REDUCE_POST, in, NULL, src + c->rank * blk,
      (char *)d->recvbuff + off * esz, bytes);
  return ncclSuccess;
}

static ncclResult_t ringBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  size_t piece = pieceElems(c, dtypeSize(d->dtype));
  switch (d->coll) {
    case collAllReduce: return perChannel(ringAllReduce, s, c, d, nch, piece * c->nranks);
    case collAllGather: return perChannel(ringAllGather, s, c, d, nch, piece);
    case collReduceScatter: return perChannel(ringReduceScatter, s, c, d, nch, piece);
    default: return ncclInternalError;
  }
}

void algoRingOrder(const int *hostOf, int n, int *order, int *pos) {
  int k = 0;
  for (int h = 0; h < n && k < n; h++) /* hosts are numbered in the order of their first rank */
    for (int r = 0; r < n; r++)
      if ((hostOf ? hostOf[r] : 0) == h) order[k++] = r;
  for (int i = 0; i < n; i++) pos[order[i]] = i;
}

void algoHostFirst(const int *hostOf, int n, int nhosts, int *first) {
  for (int h = 0; h < nhosts; h++) first[h] = -1;
  for (int r = 0; r < n; r++)
    if (first[hostOf[r]] < 0) first[hostOf[r]] = r;
}

/* AllGather sends its input and output blocks it wrote once; AllReduce and
 * ReduceScatter send sums (and in place AllReduce overwrites a block it sent). */
static int ringStableSends(int coll) { return coll == collAllGather; }

/* AllReduce's and ReduceScatter's sends that may be references are the
 * caller's input and results written once (partial sums go through the
 * FIFOs), and an input block an in-place AllReduce overwrites gets its
 * result only after its reader has used it. */
static int ringMappedSends(const struct collDesc *d, int nranks) {
  (void)nranks;
  return d->coll == collAllReduce || d->coll == collReduceScatter;
}

const struct algoFamily ringAlgo = {
    .supports = ringSupports, .build = ringBuild, .stableSends = ringStableSends, .mappedSends = ringMappedSends};
