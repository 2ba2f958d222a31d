/* Recursive doubling, for small AllReduce and AllGather, its mirror,
 * recursive halving, for ReduceScatter, and both in turn for medium
 * AllReduce (Rabenseifner's algorithm): log2(n) rounds in which each rank
 * exchanges with the rank whose index differs in one bit, so a message
 * crosses log2(n) hops instead of a ring's n - 1. With n = 2^k + e ranks,
 * the first 2e fold in pairs first: the even rank of a pair hands its data
 * to the odd one, which takes part in the rounds for both and hands the
 * result back at the end (MPICH's scheme). Partners reduce in mirrored
 * order (a + b against b + a), which IEEE arithmetic makes the same bits,
 * so every rank gets the same result. Each exchange sends before it
 * receives, so a piece must fit half a FIFO (pieceElems): messages are cut
 * into such pieces, each running all rounds. */
#include "algo/build.h"

static int rdSupports(int coll, int nranks) {
  return nranks >= 2 && (coll == collAllReduce || coll == collAllGather || coll == collReduceScatter);
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

/* How many blocks one step may carry: when a piece is a whole block,
 * neighbouring blocks lie back to back (in the input, the output and a
 * staging buffer alike), and a step may carry as many as half a FIFO holds
 * (the bound a single piece keeps); else one. */
static int rdRun(const struct algoCtx *c, size_t bytes, size_t blk) {
  if (bytes != blk || bytes == 0) return 1;
  size_t most = pieceElems(c, 1) / bytes; /* pieceElems with esz 1: bytes */
  return most < 1 ? 1 : most > (size_t)c->nranks ? c->nranks : (int)most;
}

/* The rank of participant i: who[i], or i itself where all ranks take part. */
static int rdWho(const int *who, int i) { return who ? who[i] : i; }

/* An AllReduce piece's folding among participants (rank rdWho(who, i) for
 * participant i; this rank is participant me): a folded-out one hands its
 * partial sum cur (its input, scaled: pre REDUCE_PRE) to its partner and
 * gets the result back, and is done (*out = 1); its partner adds it into
 * dst first. rdUnfold: the partner hands the result back. */
static ncclResult_t rdFold(struct schedule *s, struct algoCtx *c, int ch, const struct rdShape *sh, const int *who,
                           int me, const char *cur, int pre, char *dst, size_t bytes, int *out) {
  *out = sh->index < 0;
  if (*out) {
    int partner = rdWho(who, me + 1);
    ADD(s, stepSend, pre, NULL, connSend(c->conns, partner, ch), cur, NULL, bytes);
    ADD(s, stepRecv, 0, connRecv(c->conns, partner, ch), NULL, NULL, dst, bytes);
  } else if (me < 2 * sh->extra) {
    ADD(s, stepRecvReduceCopy, pre, connRecv(c->conns, rdWho(who, me - 1), ch), NULL, cur, dst, bytes);
  }
  return ncclSuccess;
}
static ncclResult_t rdUnfold(struct schedule *s, struct algoCtx *c, int ch, const struct rdShape *sh, const int *who,
                             int me, const char *dst, size_t bytes) {
  if (me < 2 * sh->extra) ADD(s, stepSend, 0, NULL, connSend(c->conns, rdWho(who, me - 1), ch), dst, NULL, bytes);
  return ncclSuccess;
}

/* Recursive doubling AllReduce of one piece among np participants, this
 * rank participant me; acc: its partial sum is in dst already (scaled),
 * else it is src. */
static ncclResult_t rdAmong(struct schedule *s, struct algoCtx *c, int ch, const int *who, int np, int me,
                            const char *src, int acc, char *dst, size_t bytes) {
  struct rdShape sh = rdShapeOf(me, np);
  int out;
  CHECK(rdFold(s, c, ch, &sh, who, me, acc ? dst : src, acc ? 0 : REDUCE_PRE, dst, bytes, &out));
  if (out) return ncclSuccess;
  /* A rank that folded nothing in sends its input itself in the first
   * round and reduces the partner's into the output (one pass over the
   * input fewer than copying it there first); from then on dst. */
  int fresh = !acc && me >= 2 * sh.extra;
  for (int bit = 1; bit < sh.pow2; bit <<= 1) {
    int peer = rdWho(who, rdRank(&sh, sh.index ^ bit)), post = bit * 2 == sh.pow2 ? REDUCE_POST : 0;
    struct conn *to = connSend(c->conns, peer, ch), *from = connRecv(c->conns, peer, ch);
    if (fresh && bit == 1) {
      ADD(s, stepSend, REDUCE_PRE, NULL, to, src, NULL, bytes);
      ADD(s, stepRecvReduceCopy, REDUCE_PRE | post, from, NULL, src, dst, bytes);
      continue;
    }
    ADD(s, stepSend, 0, NULL, to, dst, NULL, bytes);
    ADD(s, stepRecvAcc, post, from, NULL, NULL, dst, bytes);
  }
  return rdUnfold(s, c, ch, &sh, who, me, dst, bytes);
}

/* Across hosts, where some host has several ranks: each host's first rank
 * (its leader) adds the others' inputs, in rank order, to its own; the
 * leaders, one per host, run recursive doubling among themselves; each
 * hands the result to its host's other ranks. Only one rank per host
 * crosses hosts, in log2(hosts) rounds, where all ranks would cross in
 * most of log2(n) (bench/tune_net, 8 ranks on 4 namespaces). */
static ncclResult_t rdHostsAllReduce(struct schedule *s, struct algoCtx *c, int ch, const char *src, char *dst,
                                     size_t bytes) {
  int n = c->nranks, r = c->rank, h = c->hostOf[r], lead = c->hostFirst[h], acc = 0;
  if (r != lead) {
    ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, lead, ch), src, NULL, bytes);
    ADD(s, stepRecv, 0, connRecv(c->conns, lead, ch), NULL, NULL, dst, bytes);
    return ncclSuccess;
  }
  for (int m = r + 1; m < n; m++)
    if (c->hostOf[m] == h) {
      if (acc) ADD(s, stepRecvAcc, 0, connRecv(c->conns, m, ch), NULL, NULL, dst, bytes);
      else ADD(s, stepRecvReduceCopy, REDUCE_PRE, connRecv(c->conns, m, ch), NULL, src, dst, bytes);
      acc = 1;
    }
  CHECK(rdAmong(s, c, ch, c->hostFirst, c->nhosts, h, src, acc, dst, bytes));
  for (int m = r + 1; m < n; m++)
    if (c->hostOf[m] == h) ADD(s, stepSend, 0, NULL, connSend(c->conns, m, ch), dst, NULL, bytes);
  return ncclSuccess;
}

/* Whether an AllReduce goes host by host: ranks on several hosts, and
 * fewer hosts than ranks. */
static int rdByHost(const struct algoCtx *c) {
  return c->hostOf && c->hostFirst && c->nhosts > 1 && c->nhosts < c->nranks;
}

static ncclResult_t rdAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch, size_t off,
                                size_t cnt) {
  size_t esz = dtypeSize(d->dtype), bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  char *dst = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  if (rdByHost(c)) return rdHostsAllReduce(s, c, ch, src, dst, bytes);
  return rdAmong(s, c, ch, NULL, c->nranks, c->rank, src, 0, dst, bytes);
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
  int run = rdRun(c, bytes, blk);
  for (int bit = 1; bit < sh.pow2; bit <<= 1) {
    int mine = sh.index & ~(bit - 1), theirs = (sh.index ^ bit) & ~(bit - 1), peer = rdRank(&sh, sh.index ^ bit);
    /* A step per block (a block's piece is not contiguous with the next
     * block's) or per run of whole blocks, sends and receives alternating:
     * neither partner is ever more than one step ahead, whatever the FIFO
     * holds. */
    int sb = rdLo(&sh, mine), se = rdLo(&sh, mine + bit), rb = rdLo(&sh, theirs), re = rdLo(&sh, theirs + bit);
    while (sb < se || rb < re) {
      if (sb < se) {
        int k = se - sb < run ? se - sb : run;
        ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), out + (size_t)sb * blk, NULL, k * bytes);
        sb += k;
      }
      if (rb < re) {
        int k = re - rb < run ? re - rb : run;
        ADD(s, stepRecv, 0, connRecv(c->conns, peer, ch), NULL, NULL, out + (size_t)rb * blk, k * bytes);
        rb += k;
      }
    }
  }
  if (r < 2 * sh.extra)
    for (int b = 0; b < n; b++)
      if (b != r - 1) ADD(s, stepSend, 0, NULL, connSend(c->conns, r - 1, ch), out + (size_t)b * blk, NULL, bytes);
  return ncclSuccess;
}

/* ReduceScatter by recursive halving: in the round of bit (2^k/2 down to
 * 1) an index keeps the half of its current range of indices on its own
 * side of bit, sends the blocks of the other half to the index across it
 * and adds what that one sends for its half; after the last round it holds
 * its own ranks' blocks (two for a folded pair: the odd rank hands the even
 * one its block). The first round reads the input, the last one writes the
 * output; the partial sums between gather in a staging buffer (sendbuff is
 * the caller's; in place, recvbuff is a block of it), block by block,
 * sends and receives alternating so that no FIFO bound can deadlock. */
static ncclResult_t rhReduceScatter(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                    size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank;
  struct rdShape sh = rdShapeOf(r, n);
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  char *out = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  if (sh.index < 0) { /* folded out: hand every block over, get my own back */
    for (int b = 0; b < n; b++)
      ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, r + 1, ch), src + (size_t)b * blk, NULL, bytes);
    ADD(s, stepRecv, 0, connRecv(c->conns, r + 1, ch), NULL, NULL, out, bytes);
    return ncclSuccess;
  }
  int paired = r < 2 * sh.extra; /* the partner's blocks come first: the first round reads acc */
  char *acc = NULL;              /* block b's partial sum at acc + b * bytes */
  if ((paired || sh.pow2 > 2) && !(acc = scheduleTemp(s, (size_t)n * bytes))) return ncclSystemError;
  if (paired)
    for (int b = 0; b < n; b++)
      ADD(s, stepRecvReduceCopy, REDUCE_PRE, connRecv(c->conns, r - 1, ch), NULL, src + (size_t)b * blk,
          acc + (size_t)b * bytes, bytes);
  int run = rdRun(c, bytes, blk);
  int lo = 0;
  for (int bit = sh.pow2 / 2; bit >= 1; bit /= 2) {
    int peer = rdRank(&sh, sh.index ^ bit), first = bit == sh.pow2 / 2 && !paired;
    int mine = (sh.index & bit) ? lo + bit : lo, theirs = (sh.index & bit) ? lo : lo + bit;
    int sb = rdLo(&sh, theirs), se = rdLo(&sh, theirs + bit), rb = rdLo(&sh, mine), re = rdLo(&sh, mine + bit);
    while (sb < se || rb < re) {
      /* Blocks per step: partners cut a range alike; the last round's
       * range (one block, two for a folded pair) goes one by one, so that
       * my own block's sum goes into the output on its own. */
      int most = bit == 1 ? 1 : run;
      if (sb < se) {
        int k = se - sb < most ? se - sb : most;
        if (first)
          ADD(s, stepSend, REDUCE_PRE, NULL, connSend(c->conns, peer, ch), src + (size_t)sb * blk, NULL, k * bytes);
        else ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), acc + (size_t)sb * bytes, NULL, k * bytes);
        sb += k;
      }
      if (rb < re) {
        int last = bit == 1 && rb == r; /* my own block's sum: into the output */
        int k = re - rb < most ? re - rb : most;
        char *to = last ? out : acc + (size_t)rb * bytes;
        int post = last ? REDUCE_POST : 0;
        if (first)
          ADD(s, stepRecvReduceCopy, REDUCE_PRE | post, connRecv(c->conns, peer, ch), NULL, src + (size_t)rb * blk,
              to, k * bytes);
        else
          ADD(s, stepRecvReduceCopy, post, connRecv(c->conns, peer, ch), NULL, acc + (size_t)rb * bytes, to,
              k * bytes);
        rb += k;
      }
    }
    lo = mine;
  }
  if (paired) ADD(s, stepSend, REDUCE_POST, NULL, connSend(c->conns, r - 1, ch), acc + (size_t)(r - 1) * bytes, NULL, bytes);
  return ncclSuccess;
}

/* x's lowest bits bits in reverse order. */
static int bitReverse(int x, int bits) {
  int y = 0;
  for (int b = 0; b < bits; b++) y |= ((x >> b) & 1) << (bits - 1 - b);
  return y;
}

/* Rabenseifner's AllReduce of elements [off, off + cnt): the 2^k indices
 * reduce-scatter the piece, cut into 2^k segments, by recursive halving
 * (each round sends half of what it holds and adds the other half's
 * partial sums into the output buffer; the first round reads the input),
 * so that index i holds a segment's sum, then all-gather the segments by
 * recursive doubling (the last halving round and the first doubling round
 * have the same partner and segment: one step adds and sends on). Each
 * rank moves 2 (2^k - 1) / 2^k of the piece instead of recursive
 * doubling's log2 2^k times all of it, and each segment's sum is made
 * once: all ranks get the same bits.
 * The rounds run on the index's bits reversed (j below; j ^ bit is index
 * i ^ reverse(bit)), so the first halving round, which moves half the
 * piece, pairs neighbouring indices, and the rounds between far ranks move
 * the least. Ranks are numbered host by host, so where a host has several
 * ranks the large rounds stay inside it: with L ranks on each of H hosts a
 * host sends 2 (H - 1) / H of the piece over its network, where rounds in
 * the other order (and a ring, whose host sends 2 (n - 1) / n) send more
 * (bench/tune_net, 8 ranks on 4 namespaces). */
static ncclResult_t rbAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch, size_t off,
                                size_t cnt) {
  int n = c->nranks, r = c->rank;
  struct rdShape sh = rdShapeOf(r, n);
  size_t esz = dtypeSize(d->dtype), bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  char *dst = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  int out;
  CHECK(rdFold(s, c, ch, &sh, NULL, r, src, REDUCE_PRE, dst, bytes, &out));
  if (out) return ncclSuccess;
  int paired = r < 2 * sh.extra; /* then the rounds read the pair's sum in dst */
  int k = 0;
  while ((2 << k) <= sh.pow2) k++;
  int p = sh.pow2, i = bitReverse(sh.index, k), lo = 0;
  size_t seg[128 + 1]; /* segment j starts at element seg[j] of the piece; seg[p] = cnt */
  if (p > 128) return ncclInternalError; /* rabSupports keeps it to 255 ranks */
  for (int j = 0; j <= p; j++) {
    size_t len;
    channelPart(cnt, esz, p, j, &seg[j], &len);
  }
#define SEG(a, w) ((seg[(a) + (w)] - seg[a]) * esz) /* bytes of segments a .. a+w-1 */
  for (int bit = p / 2; bit >= 1; bit /= 2) {
    int peer = rdRank(&sh, bitReverse(i ^ bit, k)), first = bit == p / 2 && !paired;
    int mine = (i & bit) ? lo + bit : lo, theirs = (i & bit) ? lo : lo + bit;
    const char *from = first ? src : dst; /* partial sums so far */
    int pre = first ? REDUCE_PRE : 0;
    ADD(s, stepSend, pre, NULL, connSend(c->conns, peer, ch), from + seg[theirs] * esz, NULL, SEG(theirs, bit));
    if (bit > 1)
      ADD(s, stepRecvReduceCopy, pre, connRecv(c->conns, peer, ch), NULL, from + seg[mine] * esz,
          dst + seg[mine] * esz, SEG(mine, bit));
    else /* segment i's sum, sent back to the same partner at once */
      ADD(s, stepRecvReduceCopySend, pre | REDUCE_POST, connRecv(c->conns, peer, ch), connSend(c->conns, peer, ch),
          from + seg[mine] * esz, dst + seg[mine] * esz, SEG(mine, 1));
    lo = mine;
  }
  for (int bit = 1; bit < p; bit *= 2) {
    int peer = rdRank(&sh, bitReverse(i ^ bit, k)), mine = i & ~(bit - 1), theirs = (i ^ bit) & ~(bit - 1);
    if (bit > 1) ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, ch), dst + seg[mine] * esz, NULL, SEG(mine, bit));
    ADD(s, stepRecv, 0, connRecv(c->conns, peer, ch), NULL, NULL, dst + seg[theirs] * esz, SEG(theirs, bit));
  }
#undef SEG
  return rdUnfold(s, c, ch, &sh, NULL, r, dst, bytes);
}

static ncclResult_t rdBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  size_t piece = pieceElems(c, dtypeSize(d->dtype));
  if (d->coll == collAllReduce) return perChannel(rdAllReduce, s, c, d, nch, piece);
  if (d->coll == collReduceScatter) return perChannel(rhReduceScatter, s, c, d, nch, piece);
  return perChannel(rdAllGather, s, c, d, nch, piece);
}

/* AllGather sends blocks of the output written once (and its input);
 * AllReduce sends dst and then adds into it. */
static int rdStableSends(int coll) { return coll == collAllGather; }

/* Two ranks out of place: an AllReduce's one round sends the caller's
 * input, which nothing writes (with more ranks later rounds send partial
 * sums that the next round overwrites; in place the input is the output). */
static int rdMappedSends(const struct collDesc *d, int nranks) {
  return d->coll == collAllReduce && nranks == 2 && d->sendbuff != d->recvbuff;
}

const struct algoFamily recDoublingAlgo = {
    .supports = rdSupports, .build = rdBuild, .stableSends = rdStableSends, .mappedSends = rdMappedSends};

static int rabSupports(int coll, int nranks) { return nranks >= 2 && nranks < 256 && coll == collAllReduce; }

static ncclResult_t rabBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  return perChannel(rbAllReduce, s, c, d, nch, pieceElems(c, dtypeSize(d->dtype)));
}

const struct algoFamily rabenseifnerAlgo = {.supports = rabSupports, .build = rabBuild};
