/* The Simple protocol: the sender fills a free slot and publishes it by
 * advancing tail (release); the receiver sees tail move (acquire), consumes
 * the slot and releases it by advancing head. Counters only grow. Over a
 * transport that moves bytes itself (sockets) the same calls drive it
 * through its table: a full FIFO or an empty one asks it to make progress
 * before answering "not yet". */
#ifndef CHORUS_PROTO_SIMPLE_H
#define CHORUS_PROTO_SIMPLE_H
#include <string.h>

#include "transport/conn.h"
#include "transport/transport.h"

/* A free slot to write into, or NULL while the FIFO is full. */
static inline char *simpleSendSlot(struct conn *c) {
  if (c->step - c->headCache >= c->nslots) {
    if (c->tp->progress) c->tp->progress(c); /* an error sticks; the engine reports it */
    c->headCache = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
    if (c->step - c->headCache >= c->nslots) return 0;
  }
  return connSlotData(c, (uint32_t)(c->step % c->nslots));
}
/* Publishes the slot simpleSendSlot gave, holding bytes bytes. */
static inline void simpleSendPost(struct conn *c, size_t bytes) {
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  if (c->tp->posted) c->tp->posted(c, bytes); /* on the wire at once: latency */
}
/* 1 when simpleSendPostFrom reads the data where it is (no slot is
 * filled): then a step that also keeps the data writes its output first
 * and posts from there. */
static inline int simpleSendReadsSource(const struct conn *c) { return c->tp->postFrom != NULL; }
/* Publishes the slot simpleSendSlot gave with bytes copied from data. Over
 * sockets the kernel reads them from data itself (a copy saved); either
 * way data may change once this returns. */
static inline void simpleSendPostFrom(struct conn *c, const void *data, size_t bytes) {
  if (c->tp->postFrom) {
    c->tp->postFrom(c, data, bytes);
  } else {
    memcpy(connSlotData(c, (uint32_t)(c->step % c->nslots)), data, bytes);
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  }
}
/* The next filled slot, or NULL while none has arrived. */
static inline const char *simpleRecvSlot(struct conn *c) {
  if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) {
    if (!c->tp->progress) return 0;
    c->tp->progress(c);
    if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) return 0;
  }
  return connSlotData(c, (uint32_t)(c->step % c->nslots));
}
static inline void simpleRecvDone(struct conn *c) {
  __atomic_store_n(&c->ctrl->head, ++c->step, __ATOMIC_RELEASE);
}
#endif
