/* The Simple protocol: the sender fills a free slot and publishes it by
 * advancing tail (release); the receiver sees tail move (acquire), consumes
 * the slot and releases it by advancing head. Counters only grow. Over the
 * socket transport the same calls also move bytes: a full FIFO or an empty
 * one asks the transport to make progress before answering "not yet". */
#ifndef CHORUS_PROTO_SIMPLE_H
#define CHORUS_PROTO_SIMPLE_H
#include <string.h>

#include "transport/conn.h"
#include "transport/net.h"

/* A free slot to write into, or NULL while the FIFO is full. */
static inline char *simpleSendSlot(struct conn *c) {
  if (c->step - c->headCache >= c->nslots) {
    if (c->net) netProgress(c); /* an error sticks; the engine reports it */
    c->headCache = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
    if (c->step - c->headCache >= c->nslots) return 0;
  }
  return connSlotData(c, (uint32_t)(c->step % c->nslots));
}
/* Publishes the slot simpleSendSlot gave, holding bytes bytes. */
static inline void simpleSendPost(struct conn *c, size_t bytes) {
  if (c->net) c->net->sizes[c->step % c->nslots] = (uint32_t)bytes;
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  if (c->net) netProgress(c); /* on the wire at once: latency */
}
/* Publishes the slot simpleSendSlot gave with bytes copied from data. Over
 * sockets the kernel reads them from data itself (a copy saved); either
 * way data may change once this returns. */
static inline void simpleSendPostFrom(struct conn *c, const void *data, size_t bytes) {
  if (c->net) {
    netPostFrom(c, (const char *)data, bytes);
  } else {
    memcpy(connSlotData(c, (uint32_t)(c->step % c->nslots)), data, bytes);
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  }
}
/* The next filled slot, or NULL while none has arrived. */
static inline const char *simpleRecvSlot(struct conn *c) {
  if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) {
    if (!c->net) return 0;
    netProgress(c);
    if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) return 0;
  }
  return connSlotData(c, (uint32_t)(c->step % c->nslots));
}
static inline void simpleRecvDone(struct conn *c) {
  __atomic_store_n(&c->ctrl->head, ++c->step, __ATOMIC_RELEASE);
}
#endif
