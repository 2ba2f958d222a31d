#include "transport/conn.h"

void connLayout(struct conn *c, char *base, size_t buffSize, int peer) {
  c->ctrl = (struct connCtrl *)base;
  c->slots = base + CONN_CTRL_BYTES;
  uint32_t nslots = (uint32_t)(buffSize / (128 * 1024));
  if (nslots < 8) nslots = 8;
  if (nslots > CONN_MAX_SLOTS) nslots = CONN_MAX_SLOTS;
  c->nslots = nslots;
  c->slotStride = (uint32_t)((buffSize / nslots) & ~(size_t)63);
  c->slotBytes = c->slotStride - CONN_SLOT_HDR;
  c->step = 0;
  c->headCache = 0;
  c->descNext = 0;
  c->refUntil = 0;
  c->peer = peer;
  c->tp = 0;
  c->tpConn = 0;
}

void connPrefault(struct conn *c) {
  ((volatile char *)c->ctrl)[CONN_CTRL_BYTES - 1] = 0;
  for (uint32_t i = 0; i < c->nslots; i++) ((volatile char *)c->slots)[(size_t)i * c->slotStride] = 0;
}
