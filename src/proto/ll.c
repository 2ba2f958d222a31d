/* The LL protocol (NCCL's low-latency idea, on host memory): the sender
 * writes the data, the descriptor if the slot starts an operation, and
 * last, with release, the slot header's ready word (protoLLFlag: the step,
 * and whether a descriptor is there); the receiver polls that word. A
 * message that fits beside the header (24 bytes) travels with its flag and
 * descriptor in one cache line, and the tail counter, a line of its own, is
 * never touched. The word holds the full step, so a flag left from an
 * earlier round of the FIFO can never pass for a new one. Only for
 * transports where both sides share the FIFO (protoFor gives Simple
 * elsewhere); slots are released through head, as in Simple. */
#include <string.h>

#include "engine/desc.h"
#include "proto/proto.h"
#include "transport/transport.h"

static char *llSendSlot(struct conn *c) { return protoRoom(c) ? connSlotData(c, (uint32_t)(c->step % c->nslots)) : NULL; }

static void llDescPut(struct conn *c, const void *body) {
  struct connDesc *d = protoHeader(c);
  memcpy(d->body, body, sizeof d->body);
  c->descNext = 1;
}

static void llSendPost(struct conn *c, size_t bytes) {
  struct connDesc *d = protoHeader(c);
  __atomic_store_n(&d->mark, protoLLFlag(c->step, c->descNext), __ATOMIC_RELEASE);
  c->descNext = 0;
  c->step++;
  protoPopulateSent(c, bytes);
}

static void llSendPostFrom(struct conn *c, const void *data, size_t bytes) {
  memcpy(connSlotData(c, (uint32_t)(c->step % c->nslots)), data, bytes);
  llSendPost(c, bytes);
}

static int llSendReadsSource(const struct conn *c) {
  (void)c;
  return 0;
}

static const char *llRecvSlot(struct conn *c) {
  const struct connDesc *d = protoHeader(c);
  if ((__atomic_load_n(&d->mark, __ATOMIC_ACQUIRE) | 1) != protoLLFlag(c->step, 1)) return 0;
  protoPopulateReceived(c);
  return (const char *)d + CONN_SLOT_HDR;
}

static int llDescGet(const struct conn *c, void *body) {
  const struct connDesc *d = protoHeader(c);
  if (!(d->mark & 1)) return 0;
  memcpy(body, d->body, sizeof d->body);
  return 1;
}

static int llForeign(const struct conn *c, void *body) {
  const struct connDesc *d = protoHeader(c);
  if (!protoSimpleHasDesc(__atomic_load_n(&d->mark, __ATOMIC_ACQUIRE), c->step)) return 0;
  memcpy(body, d->body, sizeof d->body);
  return 1;
}

static void llRecvDone(struct conn *c, size_t bytes) {
  (void)bytes;
  protoRelease(c);
}

const struct proto llProto = {
    .name = "LL",
    .sendSlot = llSendSlot,
    .descPut = llDescPut,
    .sendPost = llSendPost,
    .sendPostFrom = llSendPostFrom,
    .sendReadsSource = llSendReadsSource,
    .recvSlot = llRecvSlot,
    .descGet = llDescGet,
    .foreign = llForeign,
    .recvDone = llRecvDone,
};
