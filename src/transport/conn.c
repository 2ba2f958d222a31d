#include "transport/conn.h"

#include <stdint.h>
#include <sys/mman.h>

#include "core/param.h"

/* A slot holds buffSize / nslots bytes of data (rounded down to 64) and its
 * header on top: a block of a power-of-two size then fills whole slots
 * instead of leaving its last 32 bytes for one more slot, which over
 * sockets is one more message round (2 ranks on 2 hosts, 256 KiB AllReduce:
 * each ring step's 128 KiB block went as 131040 bytes and 32). */
static void connShape(size_t buffSize, uint32_t *nslots, uint32_t *stride) {
  uint32_t n = (uint32_t)(buffSize / (128 * 1024));
  if (n < 8) n = 8;
  if (n > CONN_MAX_SLOTS) n = CONN_MAX_SLOTS;
  *nslots = n;
  *stride = (uint32_t)((buffSize / n) & ~(size_t)63) + 64; /* the header's 32 bytes, rounded up to a line */
}

size_t connFifoBytes(size_t buffSize) {
  uint32_t n, stride;
  connShape(buffSize, &n, &stride);
  return CONN_CTRL_BYTES + (((size_t)n * stride + 4095) & ~(size_t)4095);
}

void connLayout(struct conn *c, char *base, size_t buffSize, int peer) {
  c->ctrl = (struct connCtrl *)base;
  c->slots = base + CONN_CTRL_BYTES;
  connShape(buffSize, &c->nslots, &c->slotStride);
  c->slotBytes = c->slotStride - CONN_SLOT_HDR;
  c->step = 0;
  c->headCache = 0;
  c->descNext = 0;
  c->refUntil = 0;
  c->populated = 0;
  c->peer = peer;
  c->writeCost[0] = c->writeCost[1] = 0;
  c->writeProbeIn = c->writeProbeEvery = 0;
  c->writeTrySlot = -1;
  c->writeTryWay = 0;
  c->writeWays = c->writeWaysKnown = 0;
  c->writeMarked = 0;
  c->readStart = 0;
  c->readCost[0] = c->readCost[1] = 0;
  int64_t forced = paramInt(paramSlotStream);
  c->writeForced = forced == 0 || forced == 1 ? (int)forced : -1; /* any other value: measured */
  c->writeStreamed = 0;
  c->tp = 0;
  c->tpConn = 0;
}

void connPrefault(struct conn *c) {
  ((volatile char *)c->ctrl)[CONN_CTRL_BYTES - 1] = 0;
  for (uint32_t i = 0; i < c->nslots; i++) ((volatile char *)c->slots)[(size_t)i * c->slotStride] = 0;
}

/* Each slot's first page is in from setup (connPrefault); the rest came a
 * page fault at a time, by each side, the first time a message reached
 * it: in a virtual machine 2-4 us a page, 6-8x what copying the page
 * costs, so a benchmark whose warm-up left slots unused measured those
 * faults (2 ranks, AllReduce 32 KiB, 20 calls: 15-53 us a call the first
 * time, 4-6 after). So the first message of a page or more
 * (proto/proto.h, protoPopulateSent) has the sender fault the FIFO in, and
 * say so in the control block, where the receiver, seeing it, does the
 * same on its side. Smaller messages never do (a slot's header may lie
 * anywhere in its first page, so one of a few hundred bytes may spill into
 * a second page, which then comes as before). Each slot up to
 * CONN_POPULATE_MAX / nslots bytes: the whole of the default NCCL_BUFFSIZE
 * (4 MiB), not all of a large one set by hand, which would stall that
 * message for as long as the kernel takes to clear it. A kernel without
 * MADV_POPULATE_WRITE (before 5.14) refuses it, and the pages come as
 * before. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define CONN_POPULATE_MAX (16ull << 20)
void connPopulate(struct conn *c) {
  if (c->populated) return;
  c->populated = 1;
  size_t each = c->slotStride;
  if ((uint64_t)each * c->nslots > CONN_POPULATE_MAX) each = (size_t)(CONN_POPULATE_MAX / c->nslots);
  for (uint32_t i = 0; i < c->nslots; i++) {
    uintptr_t from = (uintptr_t)c->slots + (size_t)i * c->slotStride, to = from + each;
    from &= ~(uintptr_t)4095;
    if (madvise((void *)from, to - from, MADV_POPULATE_WRITE) != 0) break; /* refused: no use asking again */
  }
  __atomic_store_n(&c->ctrl->populated, 1, __ATOMIC_RELAXED);
}
