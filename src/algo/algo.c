#include "algo/algo.h"

#include "core/err.h"
#include "core/log.h"

#define ADD(s, ...)                                                   \
  do {                                                                \
    if (scheduleAddStep((s), __VA_ARGS__) < 0) return ncclSystemError; \
  } while (0)

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Starts a task on a lane, after the lane's previous task. */
static ncclResult_t laneTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int lane) {
  int t = scheduleAddTask(s, &d->red, c->laneLast[lane], c->boot, c->abortFlag, c->rank, collName(d->coll));
  if (t < 0) return ncclSystemError;
  c->laneLast[lane] = t;
  return ncclSuccess;
}

/* Channel ch's share [*off, *off + *cnt) of count elements, cut on 64-byte
 * boundaries so that channels never share a cache line. */
static void channelPart(size_t count, size_t esz, int nch, int ch, size_t *off, size_t *cnt) {
  size_t align = 64 / esz;
  size_t per = (count + nch - 1) / nch;
  per = (per + align - 1) / align * align;
  size_t lo = per * ch;
  *off = lo < count ? lo : count;
  size_t hi = lo + per;
  *cnt = (hi < count ? hi : count) - *off;
}

static ncclResult_t buildLocal(struct schedule *s, struct algoCtx *c, const struct collDesc *d) {
  CHECK(laneTask(s, c, d, 0));
  size_t bytes = d->count * dtypeSize(d->dtype);
  ADD(s, stepCopy, REDUCE_PRE | REDUCE_POST, NULL, NULL, d->sendbuff, d->recvbuff, bytes);
  return ncclSuccess;
}

/* Ring AllReduce on one channel: reduce-scatter then all-gather, 2(n-1)
 * steps; each step streams slot by slot, so the ring is pipelined. */
static ncclResult_t buildRingAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d,
                                       int ch, size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank;
  size_t esz = dtypeSize(d->dtype), align = 64 / esz;
  size_t per = ((cnt + n - 1) / n + align - 1) / align * align;
  struct conn *in = connRecv(c->conns, mod(r - 1, n), ch), *out = connSend(c->conns, mod(r + 1, n), ch);
  const char *src = d->sendbuff;
  char *dst = d->recvbuff;
#define BLOCK(b, O, N)                                              \
  size_t O = off + (size_t)(b)*per < off + cnt ? off + (size_t)(b)*per : off + cnt; \
  size_t N = ((O + per < off + cnt) ? O + per : off + cnt) - O
  CHECK(laneTask(s, c, d, ch));
  {
    BLOCK(mod(r - 1, n), o, k);
    ADD(s, stepSend, REDUCE_PRE, NULL, out, src + o * esz, NULL, k * esz);
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

/* Small AllReduce in one hop: every rank sends its pre-multiplied input to
 * every peer (each rank scales by its own scalar, as PreMulSum allows ranks
 * to differ) and adds all inputs in rank order, so all ranks get the same
 * bits. */
static ncclResult_t buildOneHopAllReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d) {
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

/* Broadcast down the chain root, root+1, ..., root-1. */
static ncclResult_t buildChainBroadcast(struct schedule *s, struct algoCtx *c, const struct collDesc *d,
                                        int ch, size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank, pos = mod(r - d->root, n);
  size_t esz = dtypeSize(d->dtype);
  struct conn *in = pos > 0 ? connRecv(c->conns, mod(r - 1, n), ch) : NULL;
  struct conn *out = pos < n - 1 ? connSend(c->conns, mod(r + 1, n), ch) : NULL;
  CHECK(laneTask(s, c, d, ch));
  char *dst = (char *)d->recvbuff + off * esz;
  if (pos == 0) ADD(s, stepCopySend, 0, NULL, out, (const char *)d->sendbuff + off * esz, dst, cnt * esz);
  else if (out) ADD(s, stepRecvCopySend, 0, in, out, NULL, dst, cnt * esz);
  else ADD(s, stepRecv, 0, in, NULL, NULL, dst, cnt * esz);
  return ncclSuccess;
}

/* Reduce up the chain root+1, ..., root-1, root. */
static ncclResult_t buildChainReduce(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                     size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank, pos = mod(r - d->root - 1, n);
  size_t esz = dtypeSize(d->dtype);
  struct conn *in = pos > 0 ? connRecv(c->conns, mod(r - 1, n), ch) : NULL;
  struct conn *out = pos < n - 1 ? connSend(c->conns, mod(r + 1, n), ch) : NULL;
  CHECK(laneTask(s, c, d, ch));
  const char *src = (const char *)d->sendbuff + off * esz;
  if (pos == 0) ADD(s, stepSend, REDUCE_PRE, NULL, out, src, NULL, cnt * esz);
  else if (out) ADD(s, stepRecvReduceSend, REDUCE_PRE, in, out, src, NULL, cnt * esz);
  else ADD(s, stepRecvReduceCopy, REDUCE_PRE | REDUCE_POST, in, NULL, src, (char *)d->recvbuff + off * esz, cnt * esz);
  return ncclSuccess;
}

/* AllGather ring: my block travels n-1 hops; block b sits at recvbuff + b*count. */
static ncclResult_t buildRingAllGather(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                                       size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank;
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  struct conn *in = connRecv(c->conns, mod(r - 1, n), ch), *out = connSend(c->conns, mod(r + 1, n), ch);
  char *dst = (char *)d->recvbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  ADD(s, stepCopySend, 0, NULL, out, (const char *)d->sendbuff + off * esz, dst + r * blk, bytes);
  for (int j = 1; j < n - 1; j++) ADD(s, stepRecvCopySend, 0, in, out, NULL, dst + mod(r - j, n) * blk, bytes);
  ADD(s, stepRecv, 0, in, NULL, NULL, dst + mod(r + 1, n) * blk, bytes);
  return ncclSuccess;
}

/* ReduceScatter ring: block b of sendbuff (at b*count) ends reduced on rank b. */
static ncclResult_t buildRingReduceScatter(struct schedule *s, struct algoCtx *c, const struct collDesc *d,
                                           int ch, size_t off, size_t cnt) {
  int n = c->nranks, r = c->rank;
  size_t esz = dtypeSize(d->dtype), blk = d->count * esz, bytes = cnt * esz;
  struct conn *in = connRecv(c->conns, mod(r - 1, n), ch), *out = connSend(c->conns, mod(r + 1, n), ch);
  const char *src = (const char *)d->sendbuff + off * esz;
  CHECK(laneTask(s, c, d, ch));
  ADD(s, stepSend, REDUCE_PRE, NULL, out, src + mod(r - 1, n) * blk, NULL, bytes);
  for (int j = 2; j < n; j++) ADD(s, stepRecvReduceSend, REDUCE_PRE, in, out, src + mod(r - j, n) * blk, NULL, bytes);
  ADD(s, stepRecvReduceCopy, REDUCE_PRE | REDUCE_POST, in, NULL, src + r * blk, (char *)d->recvbuff + off * esz,
      bytes);
  return ncclSuccess;
}

/* One send or receive on the point-to-point lane of a peer. */
static ncclResult_t p2pTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int send, int peer,
                            const void *buf, size_t bytes) {
  int nch = c->conns->nch, lane = send ? nch + peer : nch + c->nranks + peer;
  int t = scheduleAddTask(s, &d->red, c->laneLast[lane], c->boot, c->abortFlag, c->rank, collName(d->coll));
  if (t < 0) return ncclSystemError;
  c->laneLast[lane] = t;
  int p2p = CONN_P2P_LANE(c->conns);
  if (send) ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, p2p), buf, NULL, bytes);
  else ADD(s, stepRecv, 0, connRecv(c->conns, peer, p2p), NULL, NULL, (void *)buf, bytes);
  return ncclSuccess;
}

static ncclResult_t buildP2p(struct schedule *s, struct algoCtx *c, const struct collDesc *d) {
  size_t bytes = d->count * dtypeSize(d->dtype);
  return d->coll == collSend ? p2pTask(s, c, d, 1, d->root, d->sendbuff, bytes)
                             : p2pTask(s, c, d, 0, d->root, d->recvbuff, bytes);
}

/* AlltoAll, Gather and Scatter as NCCL builds them: grouped sends and
 * receives between pairs (block p of a buffer is at p * count). The rank's
 * own block is a local copy (none when already in place). */
static ncclResult_t buildPairwise(struct schedule *s, struct algoCtx *c, const struct collDesc *d) {
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

/* The largest piece a ring step may carry: a rank sends its first piece of
 * every loop before it receives anything, so the piece must fit in half of
 * the peer's FIFO or all ranks would wait on full FIFOs forever. */
static size_t ringChunkElems(const struct algoCtx *c, size_t esz) {
  const struct conn *k = &c->conns->send[0];
  size_t bytes = (size_t)k->nslots * k->slotBytes / 2;
  return bytes / 64 * 64 / esz;
}

/* Runs a per-channel builder over pieces of at most loop elements. */
typedef ncclResult_t (*pieceFn)(struct schedule *, struct algoCtx *, const struct collDesc *, int, size_t, size_t);
static ncclResult_t inPieces(pieceFn fn, struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                             size_t off, size_t cnt, size_t loop) {
  for (size_t o = off; o < off + cnt; o += loop) CHECK(fn(s, c, d, ch, o, off + cnt - o < loop ? off + cnt - o : loop));
  return ncclSuccess;
}

ncclResult_t algoBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int algo, int nch) {
  if (algo == algoP2p) return buildP2p(s, c, d);
  if (algo == algoPairwise) return buildPairwise(s, c, d);
  if (algo == algoLocal) return buildLocal(s, c, d);
  if (algo == algoOneHop) return buildOneHopAllReduce(s, c, d);
  size_t esz = dtypeSize(d->dtype), chunk = ringChunkElems(c, esz);
  for (int ch = 0; ch < nch; ch++) {
    size_t off, cnt;
    channelPart(d->count, esz, nch, ch, &off, &cnt);
    if (cnt == 0) continue;
    switch (d->coll) {
      case collAllReduce: CHECK(inPieces(buildRingAllReduce, s, c, d, ch, off, cnt, chunk * c->nranks)); break;
      case collBroadcast: CHECK(buildChainBroadcast(s, c, d, ch, off, cnt)); break;
      case collReduce: CHECK(buildChainReduce(s, c, d, ch, off, cnt)); break;
      case collAllGather: CHECK(inPieces(buildRingAllGather, s, c, d, ch, off, cnt, chunk)); break;
      case collReduceScatter: CHECK(inPieces(buildRingReduceScatter, s, c, d, ch, off, cnt, chunk)); break;
      default: return ncclInternalError;
    }
  }
  return ncclSuccess;
}
