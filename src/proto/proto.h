/* Protocols are a table of functions (DESIGN.md invariant 5): how a slot of
 * a connection's FIFO is filled, published, found and released, and how
 * an operation's descriptor rides in the slot header (struct connDesc,
 * transport/conn.h). The engine moves data only through these; each task
 * names its protocol (enum protoId) and each step holds the protocol of
 * each of its connections (protoFor).
 *   Simple  the sender publishes a slot by advancing the tail counter; the
 *           receiver polls tail (its own cache line), then reads the slot.
 *   LL      the sender publishes a slot by writing a ready flag into the
 *           slot header's first word after the data and the descriptor
 *           (release); the receiver polls that word: a small message, its
 *           descriptor and its flag share one cache line, and no tail
 *           counter is on the critical path.
 * Both release slots through the head counter, cut steps into slots of the
 * same size and keep the descriptor at the same place, so operations of
 * either protocol follow each other on one connection, and a receiver that
 * waits at an operation's start recognizes the other protocol's descriptor
 * (a mismatch to report, not to wait on).
 * Simple also has reference slots, for single copy within a host: the slot
 * holds where the data lies in the sender's memory, and the receiver reads
 * it there through the transport (readPeer). The sender's data must stay
 * as it is until the receiver releases the slot, so an operation that
 * posted references ends only once they are all released (refsHeld). */
#ifndef CHORUS_PROTO_PROTO_H
#define CHORUS_PROTO_PROTO_H
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/conn.h"

struct proto {
  const char *name;
  /* Sender. A free slot to write up to c->slotBytes into, or NULL while
   * the FIFO is full. */
  char *(*sendSlot)(struct conn *c);
  /* The slot about to be posted starts an operation described by body (24
   * bytes); call before posting it. */
  void (*descPut)(struct conn *c, const void *body);
  /* Publishes the slot sendSlot gave, holding bytes bytes. */
  void (*sendPost)(struct conn *c, size_t bytes);
  /* Publishes it with bytes copied from data (which may change once this
   * returns); over a transport that reads the source itself no slot is
   * filled. */
  void (*sendPostFrom)(struct conn *c, const void *data, size_t bytes);
  /* 1 when sendPostFrom reads the data where it is: a step that also keeps
   * the data then writes its output first and posts from there. */
  int (*sendReadsSource)(const struct conn *c);
  /* Sender, before it writes bytes into the slot sendSlot gave (not through
   * sendPostFrom, which chooses itself): 1 when it should store them past
   * the cache (streaming stores, fenced before sendPost). NULL where the
   * protocol always writes through the cache. */
  int (*slotStream)(struct conn *c, size_t bytes);
  /* Receiver. The next filled slot, or NULL while none has arrived. */
  const char *(*recvSlot)(struct conn *c);
  /* After recvSlot: 1 with body (24 bytes) filled when the slot starts an
   * operation, else 0. */
  int (*descGet)(const struct conn *c, void *body);
  /* While recvSlot says nothing arrived at an operation's first slot: 1
   * with body filled when the slot holds the other protocol's descriptor
   * for it (the peer chose another protocol). */
  int (*foreign)(const struct conn *c, void *body);
  /* Releases the slot recvSlot gave, bytes of which the step took. */
  void (*recvDone)(struct conn *c, size_t bytes);

  /* Single copy; NULL where the protocol has none. Sender: publishes the
   * next slot as a reference to bytes at data, which stay unchanged until
   * the operation ends. 0 (nothing posted) when the connection's receiver
   * cannot read them there (the transport's shareRef, with anyMemory):
   * then post a copy. result: NULL, or where this rank wants the
   * receiver's result of these bytes (as many): if the receiver maps that
   * memory too, it may write the result there itself and say so with
   * sendPostWritten instead of sending it back. */
  int (*sendPostRef)(struct conn *c, const void *data, void *result, size_t bytes, int anyMemory);
  /* Sender: 1 while the receiver has not released every reference slot. */
  int (*refsHeld)(const struct conn *c);
  /* Receiver, after recvSlot: the bytes a reference slot refers to; 0 when
   * the slot holds its data. */
  size_t (*recvRef)(const struct conn *c);
  /* Receiver: where the reference slot's data (bytes, what recvRef said)
   * can be read in place in this process, or NULL: then recvRead. */
  const void *(*recvMapped)(struct conn *c, size_t bytes);
  /* Receiver: copies bytes (what recvRef said) of the reference slot's data
   * into dst, waiting at most timeoutNs for any part the transport waits
   * for; an error is the transport's (readPeer). */
  ncclResult_t (*recvRead)(struct conn *c, void *dst, size_t bytes, uint64_t timeoutNs);
  /* Receiver, after recvSlot of a reference: where the sender wants the
   * result of its bytes, mapped in this process to be written, with the
   * sender's own address of it in *theirs; NULL when it asked for none or
   * this process does not map it. */
  void *(*recvResultAt)(struct conn *c, size_t bytes, uint64_t *theirs);
  /* Sender: publishes the slot sendSlot gave as saying that bytes were
   * written at theirs in the receiver's memory (what recvResultAt said of
   * the receiver's reference): it refers to none of this rank's memory. */
  void (*sendPostWritten)(struct conn *c, uint64_t theirs, size_t bytes);
  /* Receiver, after recvSlot of a reference slot (recvRef): the address in
   * this process that the sender wrote the slot's bytes to
   * (sendPostWritten), or 0 when the slot is a reference to read. */
  uint64_t (*recvWritten)(const struct conn *c);
};

extern const struct proto simpleProto, llProto;

/* The protocol a task of protocol id (enum protoId) uses on c: over a
 * transport that moves the bytes itself (sockets) the framing is Simple's,
 * whatever the task's. */
const struct proto *protoFor(int id, const struct conn *c);

/* For the protocols themselves: the header of the slot at c's step; whether
 * the sender has a free slot (refreshing its view of head when it seems
 * full); and releasing a received slot, the same in every protocol. */
static inline struct connDesc *protoHeader(const struct conn *c) {
  return connSlotHdr(c, (uint32_t)(c->step % c->nslots));
}
static inline int protoRoom(struct conn *c) {
  if (c->step - c->headCache < c->nslots) return 1;
  c->headCache = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
  return c->step - c->headCache < c->nslots;
}
static inline void protoRelease(struct conn *c) { __atomic_store_n(&c->ctrl->head, ++c->step, __ATOMIC_RELEASE); }

/* A sender, after posting a message: one of a page or more has the FIFO
 * faulted in (connPopulate). A receiver, on a slot that arrived: it
 * follows once the sender has. */
static inline void protoPopulateSent(struct conn *c, size_t bytes) {
  if (!c->populated && bytes >= CONN_POPULATE_FROM) connPopulate(c);
}
static inline void protoPopulateReceived(struct conn *c) {
  if (!c->populated && __atomic_load_n(&c->ctrl->populated, __ATOMIC_RELAXED)) connPopulate(c);
}

/* The LL ready word of the slot for step (what the header's mark holds
 * once it is posted): the top bit tells it from a Simple mark (step + 1),
 * the low bit says whether a descriptor is there. */
static inline uint64_t protoLLFlag(uint64_t step, int withDesc) {
  return (1ull << 63) | ((step + 1) << 1) | (uint64_t)(withDesc != 0);
}

/* Simple's header mark for step: step + 1 when a descriptor is there; a
 * reference slot has PROTO_REF set, and PROTO_REF_DESC too when it has a
 * descriptor. Neither bit is LL's (the top one). */
#define PROTO_REF (1ull << 62)
#define PROTO_REF_DESC (1ull << 61)
static inline int protoSimpleHasDesc(uint64_t mark, uint64_t step) {
  return mark == step + 1 || mark == (PROTO_REF | PROTO_REF_DESC | (step + 1));
}

#endif
