/* Recursive doubling, for small AllReduce and AllGather, and its mirror,
 * recursive halving, for ReduceScatter: log2(n) rounds in
 * which each rank exchanges everything it holds with the rank whose index
 * differs in one bit, so a message crosses log2(n) hops instead of a ring's
 * n - 1. With n = 2^k + e ranks, the first 2e fold in pairs first: the
 * even rank of a pair hands its data to the odd one, which takes part in
 * the rounds for both and hands the result back at the end (MPICH's
 * scheme). Partners reduce in mirrored order (a + b against b + a), which
 * IEEE arithmetic makes the same bits, so every rank gets the same result.
 * Each exchange sends before it receives, so a piece must fit half a FIFO
 * (pieceElems): messages are cut into such pieces, each running all rounds. */
#include "algo/build.h"

static int rdSupports(int coll, int nranks) {
  if (coll == collReduceScatter) return nranks >= 2 && (nranks & (nranks - 1)) == 0; /* halving: powers of two */
  return nranks >= 2 && (coll == collAllReduce || coll == collAllGather);
}

struct rdShape {
  int pow2;  /* 2^k <= n */
  int extra; /* n - 2^k: ranks 0..2*extra-1 fold in pairs */
  int index; /* this rank's index among the 2^k that take part, -1 when folded out */
};

static struct rdShape rdShapeOf(int rank, int n) {
  struct rdShape sh;
  sh.pow2 = 1;
  while (sh.pow2 * 2 <= n) sh.pow2 *= 2;
  sh.extra = n - sh.pow2;
  if (rank < 2 * sh.extra) sh.index = rank % 2 ? rank / 2 : -1;
  else sh.index = rank - sh.extra;
  return sh;
}

/* The rank with index i, and the ranks whose blocks index i holds: [lo, hi). */
static int rdRank(const struct rdShape *sh, int i) { return i < sh->extra ? 2 * i + 1 : i + sh->extra; }
static int rdLo(const struct rdShape *sh, int i) { return i < sh->extra ? 2 * i : i + sh->extra; }

static ncclResult_t rdAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch, size_t off,
                                size_t cnt) {
  int n = c->nranks, r = c->rank;
  struct rdShape sh = rdShapeOf(r, n);
  size_t esz = dtypeSize(d->dtype), bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  char *dst = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  if (sh.index < 0) { /* folded out: hand over, get the result back */
    ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, r + 1, ch), src, NULL, bytes);
    ADD(s, stepRecv, 0, connRecv(c->conns, r + 1, ch), NULL, NULL, dst, bytes);
    return ncclSuccess;
  }
  if (r < 2 * sh.extra) ADD(s, stepRecvReduceCopy, REDUCE_PRE, connRecv(c->conns, r - 1, ch), NULL, src, dst, bytes);
  else ADD(s, stepCopy, REDUCE_PRE, NULL, NULL, src, dst, bytes);
  for (int bit = 1; bit < sh.pow2; bit <<= 1) {
    int peer = rdRank(&sh, sh.index ^ bit);
    ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), dst, NULL, bytes);
    ADD(s, stepRecvAcc, bit * 2 == sh.pow2 ? REDUCE_POST : 0, connRecv(c->conns, peer, ch), NULL, NULL, dst, bytes);
  }
  if (r < 2 * sh.extra) ADD(s, stepSend, 0, NULL, connSend(c->conns, r - 1, ch), dst, NULL, bytes);
  return ncclSuccess;
}

/* AllGather of elements [off, off + cnt) of every rank's block: block b
 * sits at recvbuff + b * count; after the round of bit, index i holds the
 * blocks of indices i & ~(2 bit - 1) .. i | (2 bit - 1), whose ranks are
 * contiguous. */
static ncclResult_t rdAllGather(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch, size_t off,
                                size_t cnt) {
  int n = c->nranks, r = c->rank;
  struct rdShape sh = rdShapeOf(r, n);
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  char *out = (char *)d->recvbuff + off * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  if (sh.index < 0) { /* folded out: hand over my block, get all of them back */
    ADD(s, stepCopySend, 0, NULL, connSend(c->conns, r + 1, ch), src, out + (size_t)r * blk, bytes);
    for (int b = 0; b < n; b++)
      if (b != r) ADD(s, stepRecv, 0, connRecv(c->conns, r + 1, ch), NULL, NULL, out + (size_t)b * blk, bytes);
    return ncclSuccess;
  }
  ADD(s, stepCopy, 0, NULL, NULL, src, out + (size_t)r * blk, bytes);
  if (r < 2 * sh.extra) ADD(s, stepRecv, 0, connRecv(c->conns, r - 1, ch), NULL, NULL, out + (size_t)(r - 1) * blk, bytes);
  for (int bit = 1; bit < sh.pow2; bit <<= 1) {
    int mine = sh.index & ~(bit - 1), theirs = (sh.index ^ bit) & ~(bit - 1), peer = rdRank(&sh, sh.index ^ bit);
    /* A step per block (a block's piece is not contiguous with the next
     * block's), sends and receives alternating: neither partner is ever
     * more than one block ahead, whatever the FIFO holds. */
    int sb = rdLo(&sh, mine), se = rdLo(&sh, mine + bit), rb = rdLo(&sh, theirs), re = rdLo(&sh, theirs + bit);
    while (sb < se || rb < re) {
      if (sb < se) ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), out + (size_t)sb++ * blk, NULL, bytes);
      if (rb < re) ADD(s, stepRecv, 0, connRecv(c->conns, peer, ch), NULL, NULL, out + (size_t)rb++ * blk, bytes);
    }
  }
  if (r < 2 * sh.extra)
    for (int b = 0; b < n; b++)
      if (b != r - 1) ADD(s, stepSend, 0, NULL, connSend(c->conns, r - 1, ch), out + (size_t)b * blk, NULL, bytes);
  return ncclSuccess;
}

/* ReduceScatter by recursive halving (n a power of two): in the round of
 * bit (n/2 down to 1) a rank keeps the half of its current range of blocks
 * on its own side of bit, sends the other half to the rank across it and
 * adds what that rank sends for its half; after the last round the range
 * is its own block. The partial sums gather in a staging buffer (sendbuff
 * is the caller's; in place, recvbuff is a block of it), block by block,
 * sends and receives alternating so that no FIFO bound can deadlock. */
static ncclResult_t rhReduceScatter(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                    size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank;
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  char *acc = scheduleTemp(s, (size_t)n * bytes); /* block b's piece at acc + b * bytes */
  if (!acc) return ncclSystemError;
  CHECK(laneTask(s, c, d, ch));
  int lo = 0;
  for (int bit = n / 2; bit >= 1; bit /= 2) {
    int peer = r ^ bit, mine = (r & bit) ? lo + bit : lo, theirs = (r & bit) ? lo : lo + bit;
    for (int k = 0; k < bit; k++) {
      int sb = theirs + k, rb = mine + k;
      if (bit == n / 2) { /* the first round reads the input, scaled */
        ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, peer, ch), src + (size_t)sb * blk, NULL, bytes);
        ADD(s, stepRecvReduceCopy, REDUCE_PRE, connRecv(c->conns, peer, ch), NULL, src + (size_t)rb * blk,
            acc + (size_t)rb * bytes, bytes);
      } else {
        ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), acc + (size_t)sb * bytes, NULL, bytes);
        ADD(s, stepRecvAcc, 0, connRecv(c->conns, peer, ch), NULL, NULL, acc + (size_t)rb * bytes, bytes);
      }
    }
    lo = mine;
  }
  ADD(s, stepCopy, REDUCE_POST, NULL, NULL, acc + (size_t)r * bytes, (char *)d->recvbuff + off * esz, bytes);
  return ncclSuccess;
}

static ncclResult_t rdBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  size_t piece = pieceElems(c, dtypeSize(d->dtype));
  if (d->coll == collAllReduce) return perChannel(rdAllReduce, s, c, d, nch, piece);
  if (d->coll == collReduceScatter) return perChannel(rhReduceScatter, s, c, d, nch, piece);
  return perChannel(rdAllGather, s, c, d, nch, piece);
}

const struct algoFamily recDoublingAlgo = {rdSupports, rdBuild};
