/* A connection between two ranks, as the protocol layer sees it: a FIFO of
 * slots with monotonically increasing head and tail counters (DESIGN.md
 * invariant 5). Over shared memory the control block and slots live in the
 * receiver's segment and both sides use them; over sockets each side has its
 * own FIFO and the transport moves filled slots between them. Either way the
 * connection's transport (tp, transport/transport.h) is reached only through
 * its table of functions. Each side keeps its own step counter. */
#ifndef CHORUS_TRANSPORT_CONN_H
#define CHORUS_TRANSPORT_CONN_H
#include <stddef.h>
#include <stdint.h>

struct transport;

#define CONN_CTRL_BYTES 4096
#define CONN_MAX_SLOTS 64

/* Each slot begins with a header: a word the protocol gives its meaning
 * (proto/proto.h: Simple's descriptor mark, LL's ready flag) and room for
 * the descriptor of the operation the slot starts (engine/desc.h gives the
 * body its meaning). The data follows in the same cache line, so a small
 * operation's check costs no extra line. A transport that moves slots
 * itself (sockets) carries headers in Simple's format: mark == step + 1
 * when the slot has a descriptor. */
#define CONN_SLOT_HDR 32
struct connDesc {
  uint64_t mark;
  unsigned char body[24];
};
_Static_assert(sizeof(struct connDesc) == CONN_SLOT_HDR, "the slot header holds one descriptor");

struct connCtrl {
  _Alignas(64) uint64_t tail; /* slots filled by the sender */
  char pad0[56];
  _Alignas(64) uint64_t head; /* slots released by the receiver */
  char pad1[56];
  /* Written once by the receiver's transport at setup (before the barrier
   * that ends it), read by both: how the receiver can read the sender's
   * own memory (enum connReadMode), for slots that refer to data where the
   * sender holds it instead of carrying it (one copy instead of two). */
  _Alignas(64) uint32_t readMode;
  int32_t readPid; /* the sender's process, for CMA */
  /* Notes the sender's transport has sent the receiver's on a side channel
   * (shared memory: the descriptors of memory it may map), counted so that
   * the receiver looks for them only when there are new ones. */
  uint64_t notes;
  uint32_t mapRefused; /* the receiver could not map memory the sender handed over: it hands over no more */
  uint32_t populated;  /* the sender has faulted the whole FIFO in (connPopulate): the receiver may too */
  /* The offer (shared memory, CMA): a receiver that reads a large
   * reference offers its second half to the sender, which, waiting
   * anyway, may write it into the receiver's memory meanwhile (shm.c).
   * The receiver sets what and where, then raises offered; whoever raises
   * claimed to offered first copies that half; the sender then sets
   * offerErr and raises offerDone. */
  _Alignas(64) uint64_t offered;
  uint64_t offerClaimed, offerDone;
  uint64_t offerDst;   /* in the receiver's process */
  uint64_t offerSrc;   /* in the sender's */
  uint64_t offerBytes;
  int32_t offerErr;    /* errno of the sender's write, 0 when done */
  uint32_t offerRefused; /* the sender cannot write the receiver's memory: no more offers */
  /* Shared memory, large slots (proto/simple.c): how the sender last wrote
   * each slot (bit k: slot k past the cache), stored before the tail that
   * publishes it and only when it changes; and what taking a slot costs
   * the receiver each way, clockCycles per KiB (0: not measured), stored
   * when it moves by an eighth, for the sender's choice. */
  _Alignas(64) uint64_t slotWays;
  _Alignas(64) uint32_t readCost[2];
};

_Static_assert(sizeof(struct connCtrl) <= CONN_CTRL_BYTES, "the control block fits its page");

enum connReadMode {
  connReadNone,   /* slots carry the data */
  connReadCma,    /* process_vm_readv from the sender's process */
  connReadDirect, /* the same address space (ranks that are threads of one process) */
};

struct conn {
  struct connCtrl *ctrl;
  char *slots;
  uint32_t nslots;
  uint32_t slotBytes;  /* data bytes a slot holds */
  uint32_t slotStride; /* CONN_SLOT_HDR + slotBytes, a multiple of 64 */
  uint64_t step;      /* slots this side has posted (sender) or released (receiver) */
  uint64_t headCache; /* sender: last head seen */
  int descNext;       /* sender: the next slot posted starts an operation (LL's flag says so) */
  uint64_t refUntil;  /* sender: step after its last slot that refers to its memory (proto's sendPostRef) */
  int wroteResults;   /* sender: has written a result into the receiver's memory (logged the first time) */
  int populated;      /* this side has faulted its whole FIFO in (connPopulate) */
  int peer;
  uint64_t descStamp;  /* schedule building: the operation that last marked a step on it */
  /* Sender: how its large slots are written, through the cache or past it
   * (the protocol's choice, proto/simple.c): each way's cost in clockCycles
   * per KiB copied (0: not measured yet); the timed copies since the other
   * way was last tried, and the interval between tries; the slot whose
   * next copy is a try's timed one (-1: none), and its way; the way each
   * slot was last copied into (bit k: slot k past the cache), for the
   * slots whose bit in writeWaysKnown is set */
  uint32_t writeCost[2];
  uint32_t writeProbeIn, writeProbeEvery;
  int writeTrySlot, writeTryWay;
  uint64_t writeWays, writeWaysKnown;
  int writeMarked;   /* the slot being filled was marked by slotStream */
  /* Receiver: when it took the slot it is on (clockCycles), and its
   * running mean of the cost of taking a large slot each way (ctrl holds
   * the figure it last stored there). */
  uint64_t readStart;
  uint32_t readCost[2];
  int writeForced;   /* CHORUS_SLOT_STREAM as the connection was laid out: 0 or 1 forces the way, -1 measures */
  int writeStreamed; /* has written a slot past the cache by choice (logged the first time) */
  const struct transport *tp; /* the transport that connected it */
  void *tpConn;               /* that transport's own state for it (NULL: none) */
};

/* Lays a connection's control block and slots out at base, in the
 * connFifoBytes(buffSize) bytes given to it (NCCL_BUFFSIZE of data, and the
 * slots' headers): every transport uses the same slot count and size, so
 * both ends cut a step into the same pieces. */
void connLayout(struct conn *c, char *base, size_t buffSize, int peer);
/* The memory one connection's FIFO takes (control block, slots), whole pages. */
size_t connFifoBytes(size_t buffSize);
/* Touches the control block and each slot's first page, so that small
 * messages never pay for a page fault later. */
void connPrefault(struct conn *c);
/* Faults the FIFO's pages in on this side, once per connection (see
 * conn.c for when and how much). */
void connPopulate(struct conn *c);
/* Messages from this size make the sender populate its FIFO. */
#define CONN_POPULATE_FROM 4096

/* Connections of one communicator: for each peer, nch ring channels plus one
 * point-to-point lane. */
struct connTable {
  int nranks, nch;
  struct conn *send; /* [peer][nch + 1] */
  struct conn *recv;
};
static inline int connIndex(const struct connTable *t, int peer, int lane) {
  return peer * (t->nch + 1) + lane;
}
static inline struct conn *connSend(struct connTable *t, int peer, int lane) {
  return &t->send[connIndex(t, peer, lane)];
}
static inline struct conn *connRecv(struct connTable *t, int peer, int lane) {
  return &t->recv[connIndex(t, peer, lane)];
}
#define CONN_P2P_LANE(t) ((t)->nch)

/* Slot k's descriptor header and its data. */
static inline struct connDesc *connSlotHdr(const struct conn *c, uint32_t k) {
  return (struct connDesc *)(c->slots + (size_t)k * c->slotStride);
}
static inline char *connSlotData(const struct conn *c, uint32_t k) {
  return c->slots + (size_t)k * c->slotStride + CONN_SLOT_HDR;
}
#endif
