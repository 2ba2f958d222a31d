#include "algo/build.h"

ncclResult_t laneTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int lane) {
  int t = scheduleAddTask(s, &d->red, c->laneLast[lane], c->boot, c->abortFlag, c->rank, collName(d->coll));
  if (t < 0) return ncclSystemError;
  c->laneLast[lane] = t;
  s->tasks[t].channel = lane < c->conns->nch ? lane : c->conns->nch;
  s->tasks[t].lane = lane;
  return ncclSuccess;
}

ncclResult_t p2pTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int send, int peer,
                     const void *buf, size_t bytes) {
  int nch = c->conns->nch, lane = send ? nch + peer : nch + c->nranks + peer;
  CHECK(laneTask(s, c, d, lane));
  int p2p = CONN_P2P_LANE(c->conns);
  if (send) ADD(s, stepSend, 0, NULL, connSend(c->conns, peer, p2p), buf, NULL, bytes);
  else ADD(s, stepRecv, 0, connRecv(c->conns, peer, p2p), NULL, NULL, (void *)buf, bytes);
  return ncclSuccess;
}

void channelPart(size_t count, size_t esz, int nch, int ch, size_t *off, size_t *cnt) {
  size_t align = 64 / esz;
  size_t per = (count + nch - 1) / nch;
  per = (per + align - 1) / align * align;
  size_t lo = per * ch;
  *off = lo < count ? lo : count;
  size_t hi = lo + per;
  *cnt = (hi < count ? hi : count) - *off;
}

size_t pieceElems(const struct algoCtx *c, size_t esz) {
  const struct conn *k = &c->conns->send[0];
  size_t bytes = (size_t)k->nslots * k->slotBytes / 2;
  return bytes / 64 * 64 / esz;
}

ncclResult_t perChannel(pieceFn fn, struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch,
                        size_t loop) {
  size_t esz = dtypeSize(d->dtype);
  for (int ch = 0; ch < nch; ch++) {
    size_t off, cnt;
    channelPart(d->count, esz, nch, ch, &off, &cnt);
    if (cnt == 0) continue;
    size_t step = loop ? loop : cnt;
    for (size_t o = off; o < off + cnt; o += step) CHECK(fn(s, c, d, ch, o, off + cnt - o < step ? off + cnt - o : step));
  }
  return ncclSuccess;
}
