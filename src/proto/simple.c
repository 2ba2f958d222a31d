/* The Simple protocol: the sender fills a free slot and publishes it by
 * advancing tail (release); the receiver sees tail move (acquire), consumes
 * the slot and releases it by advancing head. Counters only grow. A slot
 * header is a descriptor when its mark is the slot's step + 1, so a sender
 * writes one only on an operation's first slot and never clears it. Over a
 * transport that moves bytes itself (sockets) the same calls drive it
 * through its table: a full FIFO or an empty one asks it to make progress
 * before answering "not yet". */
#include <string.h>

#include "core/log.h"
#include "engine/desc.h"
#include "proto/proto.h"
#include "transport/transport.h"

static char *simpleSendSlot(struct conn *c) {
  if (c->step - c->headCache >= c->nslots && c->tp->progress)
    c->tp->progress(c); /* the FIFO seems full: let the transport drain it; an error sticks, the engine reports it */
  return protoRoom(c) ? connSlotData(c, (uint32_t)(c->step % c->nslots)) : NULL;
}

static void simpleDescPut(struct conn *c, const void *body) {
  struct connDesc *d = protoHeader(c);
  memcpy(d->body, body, sizeof d->body);
  /* Atomic: a receiver waiting at an operation's start reads the mark
   * (foreign) while it is written; release, so one that then reads the
   * body reads this one. */
  __atomic_store_n(&d->mark, c->step + 1, __ATOMIC_RELEASE);
}

static void simpleSendPost(struct conn *c, size_t bytes) {
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  if (c->tp->posted) c->tp->posted(c, bytes); /* on the wire at once: latency */
  protoPopulateSent(c, bytes);
}

static int simpleSendReadsSource(const struct conn *c) { return c->tp->postFrom != NULL; }

static void simpleSendPostFrom(struct conn *c, const void *data, size_t bytes) {
  if (c->tp->postFrom) {
    c->tp->postFrom(c, data, bytes);
  } else {
    memcpy(connSlotData(c, (uint32_t)(c->step % c->nslots)), data, bytes);
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
    protoPopulateSent(c, bytes);
  }
}

static const char *simpleRecvSlot(struct conn *c) {
  if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) {
    if (!c->tp->progress) return 0;
    c->tp->progress(c);
    if (__atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) <= c->step) return 0;
  }
  protoPopulateReceived(c);
  return connSlotData(c, (uint32_t)(c->step % c->nslots));
}

static int simpleDescGet(const struct conn *c, void *body) {
  const struct connDesc *d = protoHeader(c);
  if (!protoSimpleHasDesc(d->mark, c->step)) return 0;
  memcpy(body, d->body, sizeof d->body);
  return 1;
}

static int simpleForeign(const struct conn *c, void *body) {
  const struct connDesc *d = protoHeader(c);
  if (__atomic_load_n(&d->mark, __ATOMIC_ACQUIRE) != protoLLFlag(c->step, 1)) return 0;
  memcpy(body, d->body, sizeof d->body);
  return 1;
}

/* A reference slot's data: where the bytes lie in the sender's memory,
 * or, once a receiver wrote its result where the sender asked, where it
 * wrote it in the receiver's. */
struct simpleRef {
  uint64_t addr;
  uint64_t bytes;
  uint64_t key;       /* the transport's name for the memory it lies in (shareRef) */
  uint64_t result;    /* where the sender wants the receiver's result of them (0: nowhere) */
  uint64_t resultKey; /* and that memory's key */
  uint64_t written;   /* 1: a slot that says the bytes were written at addr in the receiver's memory */
};

/* Publishes the slot at c's step as the reference r. */
static void simplePostRefSlot(struct conn *c, const struct simpleRef *r) {
  struct connDesc *d = protoHeader(c);
  *(struct simpleRef *)connSlotData(c, (uint32_t)(c->step % c->nslots)) = *r;
  /* descPut wrote step + 1 if this slot starts an operation. */
  uint64_t mark = PROTO_REF | (c->step + 1) | (d->mark == c->step + 1 ? PROTO_REF_DESC : 0);
  __atomic_store_n(&d->mark, mark, __ATOMIC_RELEASE);
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
}

static int simpleSendPostRef(struct conn *c, const void *data, void *result, size_t bytes, int anyMemory) {
  struct simpleRef r = {.addr = (uintptr_t)data, .bytes = bytes};
  if (!c->tp->shareRef || !c->tp->shareRef(c, data, bytes, anyMemory, &r.key)) return 0;
  if (result && c->tp->shareRef(c, result, bytes, 0, &r.resultKey)) r.result = (uintptr_t)result;
  simplePostRefSlot(c, &r);
  c->refUntil = c->step;
  return 1;
}

static void simpleSendPostWritten(struct conn *c, uint64_t theirs, size_t bytes) {
  struct simpleRef r = {.addr = theirs, .bytes = bytes, .written = 1};
  if (!c->wroteResults)
    INFO(subsysColl | subsysShm, "chorus : results written straight into rank %d's memory where it asked (ncclMemAlloc's)",
         c->peer);
  c->wroteResults = 1;
  simplePostRefSlot(c, &r);
}

static int simpleRefsHeld(const struct conn *c) {
  return c->refUntil > __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
}

static const struct simpleRef *simpleRefAt(const struct conn *c) {
  return (const struct simpleRef *)connSlotData(c, (uint32_t)(c->step % c->nslots));
}

static size_t simpleRecvRef(const struct conn *c) {
  if ((protoHeader(c)->mark & ~PROTO_REF_DESC) != (PROTO_REF | (c->step + 1))) return 0;
  return (size_t)simpleRefAt(c)->bytes;
}

static const void *simpleRecvMapped(struct conn *c, size_t bytes) {
  const struct simpleRef *r = simpleRefAt(c);
  return c->tp->mapPeer ? c->tp->mapPeer(c, r->addr, r->key, bytes) : NULL;
}

static ncclResult_t simpleRecvRead(struct conn *c, void *dst, size_t bytes, uint64_t timeoutNs) {
  const struct simpleRef *r = simpleRefAt(c);
  return c->tp->readPeer(c, dst, r->addr, r->key, bytes, timeoutNs);
}

static void *simpleRecvResultAt(struct conn *c, size_t bytes, uint64_t *theirs) {
  const struct simpleRef *r = simpleRefAt(c);
  *theirs = r->result;
  return r->result && c->tp->mapPeer ? c->tp->mapPeer(c, r->result, r->resultKey, bytes) : NULL;
}

static uint64_t simpleRecvWritten(const struct conn *c) {
  const struct simpleRef *r = simpleRefAt(c);
  return r->written ? r->addr : 0;
}

const struct proto simpleProto = {
    .name = "Simple",
    .sendSlot = simpleSendSlot,
    .descPut = simpleDescPut,
    .sendPost = simpleSendPost,
    .sendPostFrom = simpleSendPostFrom,
    .sendReadsSource = simpleSendReadsSource,
    .recvSlot = simpleRecvSlot,
    .descGet = simpleDescGet,
    .foreign = simpleForeign,
    .recvDone = protoRelease,
    .sendPostRef = simpleSendPostRef,
    .refsHeld = simpleRefsHeld,
    .recvRef = simpleRecvRef,
    .recvMapped = simpleRecvMapped,
    .recvRead = simpleRecvRead,
    .recvResultAt = simpleRecvResultAt,
    .sendPostWritten = simpleSendPostWritten,
    .recvWritten = simpleRecvWritten,
};

const struct proto *protoFor(int id, const struct conn *c) {
  if (c->tp->progress) return &simpleProto;
  return id == protoLL ? &llProto : &simpleProto;
}
