/* The Simple protocol: the sender fills a free slot and publishes it by
 * advancing tail (release); the receiver sees tail move (acquire), consumes
 * the slot and releases it by advancing head. Counters only grow. A slot
 * header is a descriptor when its mark is the slot's step + 1, so a sender
 * writes one only on an operation's first slot and never clears it. Over a
 * transport that moves bytes itself (sockets) the same calls drive it
 * through its table: a full FIFO or an empty one asks it to make progress
 * before answering "not yet". */
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "engine/desc.h"
#include "proto/proto.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

/* Large slots over shared memory are written through the cache or past it
 * (streaming stores), as the two ends measure. Where a line
 * moves between the two ranks' cores in the usual time (this VM's two
 * vCPUs: 0.05 us, bin/lineping) a cached copy into a slot costs 120-250
 * cycles per KiB, streaming 60-150, and the receiver then reads its slot
 * from the cache, not from memory: cached wins (2-rank AllGather 256 KiB-1
 * MiB 1.5-2x). But for minutes at a time the vCPUs sit far apart (0.2 us
 * a line): each line a cached copy stores was last read by the receiver's
 * core and is fetched back from it first, 550-1130 cycles per KiB, and a
 * 2-rank Broadcast of 1-4 MiB runs 4-5x slower than with streaming, which
 * stays at 60-150 (2026-12-07). The sender's clock does not see what
 * streaming costs the receiver (its reads from memory), so the receiver
 * times its taking of each large slot too (from recvSlot to recvDone: its
 * copy out, or its reduction) and stores its figure for each way in the
 * control block; streaming is chosen while the cached way's write and read
 * together cost more than 1.25x the streaming way's (slotTotalMargin), or,
 * until the receiver has figures for both ways, while cached copies cost
 * more than slotStreamRatio times as much to write (in the fast state
 * their mean reaches 4x).
 *   A copy's cost depends on how the slot was written the time before
 * (a cached copy after a streaming one finds the lines in memory, not in
 * the receiver's cache: 250-850 cycles per KiB where it costs 120-250 in
 * turn), so a copy is timed only when its slot's previous write went the
 * same way (writeWays). The way not chosen is tried on one slot: a copy
 * that way, untimed, then, when that slot comes round again, a timed one.
 * Tries come every writeProbeEvery large copies, an interval that doubles
 * (to slotProbeMost) while they confirm the choice, so that trying the
 * dear way costs little and a change of the machine's state is still
 * followed. Any change of the choice brings the next try near (in
 * slotProbeFirst copies), so that a choice one preempted copy made is soon
 * undone. Where the transport moves the bytes itself (sockets) slots are
 * only its staging: through the cache. */
enum { slotTimedFrom = 16384, slotStreamRatio = 5, slotProbeFirst = 32, slotProbeMost = 1024 };
#define slotTotalMargin(cached, streaming) (4 * (cached) > 5 * (streaming))

/* 1 where the receiver takes its slots where the sender wrote them (shared
 * memory), not from a transport that moves them (sockets). */
static int simpleSlotsShared(const struct conn *c) { return !c->tp->progress && !c->tp->postFrom; }

/* The cost per KiB of bytes copied or taken between two clockCycles
 * readings; 0 (unknown) when the counter stepped back (a move to another
 * CPU). */
static uint64_t simpleCostPerKiB(uint64_t start, uint64_t end, size_t bytes) {
  return end >= start ? (end - start) * 1024 / bytes + 1 : 0;
}

/* A running mean of costs, where one cost far off (the thread was
 * preempted) moves it by at most 1.75x. */
static uint32_t simpleCostMean(uint64_t mean, uint64_t cost) {
  if (mean && cost > 4 * mean) cost = 4 * mean;
  uint64_t next = mean ? (3 * mean + cost) / 4 : cost;
  return next > UINT32_MAX ? UINT32_MAX : (uint32_t)next;
}

/* Whether a large slot over shared memory goes past the cache, by the
 * figures so far (or CHORUS_SLOT_STREAM). */
static int simpleStreamChosen(struct conn *c, size_t bytes) {
  if (!simpleSlotsShared(c)) return 0;
  if (c->writeForced == 0 || c->writeForced == 1) return c->writeForced;
  if (bytes < slotTimedFrom || !c->writeCost[0] || !c->writeCost[1]) return 0;
  uint64_t r0 = __atomic_load_n(&c->ctrl->readCost[0], __ATOMIC_RELAXED);
  uint64_t r1 = __atomic_load_n(&c->ctrl->readCost[1], __ATOMIC_RELAXED);
  int way = r0 && r1 ? slotTotalMargin(c->writeCost[0] + r0, c->writeCost[1] + r1)
                     : c->writeCost[0] > slotStreamRatio * (uint64_t)c->writeCost[1];
  if (way && !c->writeStreamed) {
    c->writeStreamed = 1;
    INFO(subsysShm, "chorus : slots to rank %d written past the cache: through it they cost %u cycles/KiB to write and "
         "%u to take, past it %u and %u (CHORUS_SLOT_STREAM)", c->peer, c->writeCost[0], (unsigned)r0, c->writeCost[1],
         (unsigned)r1);
  }
  return way;
}

/* Notes how the slot at c's step is written: bytes through the cache or
 * past it (way). A small write leaves most of the slot's lines as they
 * were, unknown. */
static void simpleSlotWritten(struct conn *c, int way, size_t bytes) {
  uint64_t bit = 1ull << (c->step % c->nslots);
  if (bytes < slotTimedFrom) {
    c->writeWaysKnown &= ~bit;
    return;
  }
  c->writeWaysKnown |= bit;
  uint64_t ways = way ? c->writeWays | bit : c->writeWays & ~bit;
  if (ways != c->writeWays) /* ordered by the tail's release */
    __atomic_store_n(&c->ctrl->slotWays, ways, __ATOMIC_RELAXED);
  c->writeWays = ways;
}

/* The engine's own writes into a slot (reductions, a slot passed on)
 * follow the choice untimed: their cost depends on what they read too. */
static int simpleSlotStream(struct conn *c, size_t bytes) {
  int way = simpleStreamChosen(c, bytes);
  simpleSlotWritten(c, way, bytes);
  c->writeMarked = 1;
  return way;
}

/* A timed copy's cost into its way's figure. Noise (a preemption, an
 * interrupt) only ever makes a copy dearer, so a try that costs less than
 * the way's older (stale) figure replaces it, one that costs more counts
 * half; other copies go into the running mean. */
static void simpleWriteCost(struct conn *c, int way, uint64_t cost, int trying) {
  uint32_t *mean = &c->writeCost[way];
  if (cost > UINT32_MAX) cost = UINT32_MAX;
  *mean = !trying                ? simpleCostMean(*mean, cost)
          : !*mean || cost < *mean ? (uint32_t)cost
                                   : (uint32_t)(((uint64_t)*mean + cost) / 2);
}

/* Copies bytes of this rank's data into the slot at c's step, the chosen
 * way or a try's, timing it where the slot's previous write went the same
 * way. */
static void simpleCopyIntoSlot(struct conn *c, char *slot, const void *data, size_t bytes) {
  /* Not before the FIFO's pages are in (connPopulate, after the first
   * large message): a copy that faults them in costs 2000-3000 cycles per
   * KiB, whichever way. */
  if (c->writeForced >= 0 || bytes < slotTimedFrom || !c->populated || !simpleSlotsShared(c)) {
    int way = simpleStreamChosen(c, bytes);
    if (way) copyStreaming(slot, data, bytes);
    else memcpy(slot, data, bytes);
    simpleSlotWritten(c, way, bytes);
    return;
  }
  uint32_t k = (uint32_t)(c->step % c->nslots);
  uint64_t bit = 1ull << k;
  int chosen = simpleStreamChosen(c, bytes), way = chosen, trying = 0;
  if (c->writeTrySlot == (int)k) { /* a try's timed copy */
    way = c->writeTryWay;
    trying = 1;
    c->writeTrySlot = -1;
  } else if (c->writeTrySlot < 0 && (!c->writeCost[1] || ++c->writeProbeIn >= c->writeProbeEvery)) {
    way = !chosen; /* a try begins: this copy readies the slot */
    c->writeTrySlot = (int)k;
    c->writeTryWay = way;
    c->writeProbeIn = 0;
  }
  int timed = (c->writeWaysKnown & bit) && !!(c->writeWays & bit) == way;
  uint64_t start = timed ? clockCycles() : 0;
  if (way) copyStreaming(slot, data, bytes);
  else memcpy(slot, data, bytes);
  uint64_t cost = timed ? simpleCostPerKiB(start, clockCycles(), bytes) : 0;
  timed = cost != 0;
  if (timed) simpleWriteCost(c, way, cost, trying);
  simpleSlotWritten(c, way, bytes);
  if (!c->writeProbeEvery) c->writeProbeEvery = slotProbeFirst;
  if (!timed) return; /* an untimed try (the engine wrote the slot between) taught nothing */
  int changed = simpleStreamChosen(c, bytes) != chosen;
  if (changed) {
    c->writeProbeEvery = slotProbeFirst;
    c->writeProbeIn = 0;
  } else if (trying) {
    c->writeProbeEvery = 2 * c->writeProbeEvery > slotProbeMost ? slotProbeMost : 2 * c->writeProbeEvery;
  }
}

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
  /* Written without asking slotStream (stepSend's reduceCopy, a PreMulSum):
   * through the cache, which the receiver's figures must know too. */
  if (!c->writeMarked) simpleSlotWritten(c, 0, bytes);
  c->writeMarked = 0;
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  if (c->tp->posted) c->tp->posted(c, bytes); /* on the wire at once: latency */
  protoPopulateSent(c, bytes);
}

static int simpleSendReadsSource(const struct conn *c) { return c->tp->postFrom != NULL; }

static void simpleSendPostFrom(struct conn *c, const void *data, size_t bytes) {
  if (c->tp->postFrom) {
    c->tp->postFrom(c, data, bytes);
  } else {
    simpleCopyIntoSlot(c, connSlotData(c, (uint32_t)(c->step % c->nslots)), data, bytes);
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
  if (simpleSlotsShared(c)) c->readStart = clockCycles();
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

/* Releases the slot; a large one the step took from the slot itself (not a
 * reference) over shared memory is timed, its cost put to the way the
 * sender wrote it (ctrl's slotWays) and stored for the sender's choice
 * when it moved by an eighth. */
static void simpleRecvDone(struct conn *c, size_t bytes) {
  uint64_t start = c->readStart;
  c->readStart = 0;
  uint64_t cost =
      start && bytes >= slotTimedFrom && !simpleRecvRef(c) ? simpleCostPerKiB(start, clockCycles(), bytes) : 0;
  if (cost) {
    int way = (int)((__atomic_load_n(&c->ctrl->slotWays, __ATOMIC_RELAXED) >> (c->step % c->nslots)) & 1);
    uint32_t next = simpleCostMean(c->readCost[way], cost);
    uint32_t shown = __atomic_load_n(&c->ctrl->readCost[way], __ATOMIC_RELAXED);
    c->readCost[way] = next;
    if (!shown || next > shown + shown / 8 || next < shown - shown / 8)
      __atomic_store_n(&c->ctrl->readCost[way], next, __ATOMIC_RELAXED);
  }
  protoRelease(c);
}

const struct proto simpleProto = {
    .name = "Simple",
    .sendSlot = simpleSendSlot,
    .descPut = simpleDescPut,
    .sendPost = simpleSendPost,
    .sendPostFrom = simpleSendPostFrom,
    .sendReadsSource = simpleSendReadsSource,
    .slotStream = simpleSlotStream,
    .recvSlot = simpleRecvSlot,
    .descGet = simpleDescGet,
    .foreign = simpleForeign,
    .recvDone = simpleRecvDone,
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
